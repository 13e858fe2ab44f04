"""The package's shape: one import name, arrows one way, a pinned public surface."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys
import zipfile
from typing import Final

import pytest

import agentfsm
import agentfsm.providers

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The folders and the import names they install as.
FOLDERS = {"statemachine": "agentfsm", "providers": "agentfsm.providers"}
#: Modules that read the engine to show it; the engine never imports them.
VIEWS = (
    "agentfsm._cli",
    "agentfsm._printable",
    "agentfsm.diagrams",
    "agentfsm._view",
    "agentfsm.studio",
    "agentfsm.serve",
)


def _modules() -> dict[str, pathlib.Path]:
    found: dict[str, pathlib.Path] = {}
    for folder, name in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """Every agentfsm module ``module`` imports, lazily or not, but not for type checking."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                targets.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in child.names:
                    submodule = f"{base}.{alias.name}"
                    targets.add(submodule if submodule in known else base)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {t for t in targets if t in known and t != module}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, set(modules)) for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_engine_never_imports_its_views() -> None:
    graph = _graph()
    engine = [
        m for m in graph if m not in ("agentfsm", "agentfsm.__main__") and not m.startswith(VIEWS)
    ]
    offenders = {m: sorted(t for t in graph[m] if t.startswith(VIEWS)) for m in engine}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_providers_know_the_engine_only_through_its_data() -> None:
    allowed = (
        "agentfsm._chat_model",
        "agentfsm._messages",
        "agentfsm._tools",
        "agentfsm._errors",
        "agentfsm._moved",
        "agentfsm.providers",
    )
    graph = _graph()
    offenders = {
        m: sorted(t for t in targets if not t.startswith(allowed))
        for m, targets in graph.items()
        if m.startswith("agentfsm.providers")
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def _home(target: str) -> str | None:
    """The package a private module belongs to: the one holding its first private part
    (``agentfsm.diagrams._writers`` is ``agentfsm.diagrams``'s), or None if it is public."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_"):
            return ".".join(parts[:i])
    return None


def _private_imports() -> set[tuple[str, str]]:
    """(importer, what) for every private module a module imports from outside the
    package that owns it, and every private name it takes from a public module."""
    modules = _modules()
    found: set[tuple[str, str]] = set()
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                named = [(base, alias.name) for alias in node.names]
            else:
                continue
            for base, name in named:
                target = (
                    base if name is None or f"{base}.{name}" not in modules else (f"{base}.{name}")
                )
                home = _home(target) if target.startswith("agentfsm") else None
                if home is not None and not (module == home or module.startswith(home + ".")):
                    found.add((module, target))
                elif name and name.startswith("_") and target == base and not _is_private(base):
                    found.add((module, f"{base}.{name}"))
    return found


def test_no_module_takes_a_private_name_of_another() -> None:
    """A private room is its package's own: a module outside the package goes through the
    package's face (the CLI draws with ``agentfsm.diagrams``, not its ``_writers``), and a
    private name of a public module is that module's alone."""
    assert _private_imports() == set()


def test_the_private_import_rule_sees_a_room_of_another_package() -> None:
    assert _home("agentfsm.diagrams._writers") == "agentfsm.diagrams"
    assert _home("agentfsm._machine") == "agentfsm"
    assert _home("agentfsm.store") is None


#: A module longer than this is split along its ideas, or says why it is one.
LONG: Final = 600
#: The sentence of a long module's docstring that says why it is one idea.
ONE_IDEA: Final = "One idea:"
#: Long modules that do not say it (none).
LONG_UNSAID: Final[frozenset[str]] = frozenset()


def _long_unsaid() -> set[str]:
    found = set()
    for module, path in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > LONG and ONE_IDEA not in (
            ast.get_docstring(ast.parse(text, str(path))) or ""
        ):
            found.add(module)
    return found


def test_a_long_module_says_why_it_is_one_idea() -> None:
    """A module over 600 lines is read whole to be changed: its docstring says, in a
    sentence starting ``One idea:``, why it is not several modules."""
    assert _long_unsaid() == LONG_UNSAID


def test_every_subpackage_is_installed() -> None:
    """pyproject lists the packages one by one; a new folder must join the list."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    packages = {m for m, p in _modules().items() if p.name == "__init__.py"}
    assert packages == listed


def test_the_faces_export_only_what_they_have() -> None:
    """What each face exports is pinned, name by name, in tests/test_public_api.py."""
    for module in (agentfsm, agentfsm.providers):
        for name in module.__all__:
            assert hasattr(module, name), name


def test_chain_run_finds_the_modes_by_name() -> None:
    """The chain looks modes up in the registry; ``import agentfsm`` registered the built-ins."""
    from agentfsm._registry import MODES

    assert {
        "",
        "step",
        "while_needs_response",
        "until_success",
        "until_tool_used",
        "standard",
    } <= set(MODES)


def test_only_agentfsm_is_importable(tmp_path: pathlib.Path) -> None:
    """Installed, the distribution claims one top-level name: statemachine/providers are folders."""
    code = (
        "import importlib.util as u, sys; "
        "print(u.find_spec('agentfsm') is not None, u.find_spec('statemachine'), "
        "u.find_spec('providers'))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["True", "None", "None"]


@pytest.mark.skipif(
    os.environ.get("AGENTFSM_SKIP_WHEEL") == "1", reason="AGENTFSM_SKIP_WHEEL=1 set"
)
def test_the_wheel_holds_only_agentfsm(tmp_path: pathlib.Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("agentfsm-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/")[0] for name in zf.namelist()}
        names = set(zf.namelist())
    assert tops == {"agentfsm", wheel.name.split("-py3")[0] + ".dist-info"}
    assert {
        "agentfsm/py.typed",
        "agentfsm/providers/py.typed",
        "agentfsm/providers/_openai.py",
        "agentfsm/_view/page.js",
    } <= names


#: Folders whose modules may speak SQL: the store's own, and the durable engine's database.
SQL_HOMES = ("agentfsm.store", "agentfsm.durable")
#: A statement's first word, as SQL is written here (upper case: prose is not SQL).
_SQL_START = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|WITH|PRAGMA)\b")


def _store_tables() -> frozenset[str]:
    from agentfsm.store import _sqlite

    return frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", _sqlite._SCHEMA))


def _store_sql(source: str, tables: frozenset[str]) -> list[str]:
    """What in ``source`` reads the store's tables itself: an import of sqlite3, or a
    string that is SQL naming one of the tables."""
    names = "|".join(sorted(tables))
    naming = re.compile(rf"\b(FROM|INTO|UPDATE|TABLE|JOIN)\s+[\"`\[]?({names})\b")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "sqlite3"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlite3":
            found.append(node.module or "")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _SQL_START.search(node.value)
            and naming.search(node.value)
        ):
            found.append(" ".join(node.value.split())[:60])
    return found


def test_only_the_store_reads_its_tables() -> None:
    """The store's SQL is the store's: anything else asks it through a method, so its
    tables can change with it alone."""
    tables = _store_tables()
    offenders = {
        module: _store_sql(path.read_text(), tables)
        for module, path in _modules().items()
        if not module.startswith(SQL_HOMES)
    }
    assert {m: found for m, found in offenders.items() if found} == {}


def test_the_store_sql_rule_sees_a_query_and_sqlite3() -> None:
    tables = _store_tables()
    assert {"runs", "log", "meta"} <= tables
    source = 'import sqlite3\nQ = "SELECT updated FROM log WHERE run_id = ?"\n'
    assert _store_sql(source, tables) == ["sqlite3", "SELECT updated FROM log WHERE run_id = ?"]
    assert _store_sql('"""Update the page from runs we read."""', tables) == []


def test_the_studio_never_imports_the_command_line() -> None:
    """What the studio shares with the CLI (loading an agent, refusing a resume) lives in
    root modules both import; the CLI is one view, the studio another."""
    graph = _graph()
    offenders = {
        m: sorted(t for t in targets if t.startswith("agentfsm._cli"))
        for m, targets in graph.items()
        if m.startswith("agentfsm.studio")
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def _function_imports() -> list[tuple[str, int, bool]]:
    """(file, line, has a reason) for every import inside a function of the package."""
    found = []
    for path in _modules().values():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    here = lines[inner.lineno - 1]
                    before = lines[inner.lineno - 2].strip()
                    reason = "#" in here or before.startswith("#")
                    found.append((str(path.relative_to(ROOT)), inner.lineno, reason))
    return found


def test_every_import_inside_a_function_says_why() -> None:
    """An import inside a function is for an optional extra, for import time, or to break a
    cycle; a comment on its line (or the line above) says which."""
    assert [(f, n) for f, n, reason in _function_imports() if not reason] == []
