"""Every Python block of the docs and the README runs as a reader would run it.

A reader copies a block into a file and runs ``python file.py``. So each block is
written to a file of its own in an empty temp dir and run there, in a process of
its own: it must be a whole script, imports included. Top-level ``await`` is a
failure (it is a SyntaxError in a file): wrap it in ``async def main()`` and
``asyncio.run(main())``, or use the ``*_sync`` entry points.

A block that builds on the one above says so with a comment right before it,
``<!-- continues -->``, and a line of prose (or the page says once that its
blocks continue each other); it runs in one file with the blocks it continues.
Such a page also runs as one file, all its blocks in order.
A block opts out only with a comment right before it that says why:
``<!-- no-run: needs a PostgreSQL server -->``; the blocks around it run without it.
The files are padded with blank lines so that tracebacks point at the page's own
lines.

Run one page by hand: ``python tests/test_docs.py docs/agents.md``.
"""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

_OPENER = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_NO_RUN = re.compile(r"^\s*<!--\s*no-run\b(?P<why>.*?)-->\s*$")
_CONTINUES = re.compile(r"^\s*<!--\s*continues\s*-->\s*$")
_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")
_TIMEOUT = 45


class Block(NamedTuple):
    """One fenced block: its language, where its code starts, the code, and its marker."""

    lang: str
    line: int
    code: str
    no_run: str | None
    continues: bool = False


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown page, in order (indented ones dedented)."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opener = _OPENER.match(lines[i])
        if opener is None:
            i += 1
            continue
        indent, fence = len(opener["indent"]), opener["fence"]
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        code = "".join(line[indent:] + "\n" for line in lines[i + 1 : end])
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        marker = _NO_RUN.match(before)
        found.append(
            Block(
                opener["lang"],
                i + 2,
                code,
                None if marker is None else marker["why"].strip(),
                _CONTINUES.match(before) is not None,
            )
        )
        i = end + 1
    return found


def python_blocks(page: pathlib.Path) -> list[Block]:
    return [b for b in blocks(page.read_text()) if b.lang in ("python", "py", "python3")]


def scripts(page: pathlib.Path) -> list[list[Block]]:
    """The page's runnable scripts: each block with the blocks that continue it.

    A block that does not run (``no-run``) is left out: it neither is continued nor
    interrupts the blocks around it.
    """
    found: list[list[Block]] = []
    for block in python_blocks(page):
        if block.no_run is not None:
            continue
        if block.continues:
            assert found, f"{page.name}:{block.line}: the first block continues no block"
            found[-1].append(block)
        else:
            found.append([block])
    return found


def source(script: list[Block]) -> str:
    """The script's blocks in one file, each at its own line of the page."""
    text = ""
    for block in script:
        text += "\n" * (block.line - 1 - text.count("\n")) + block.code
    return text


def _first_await(node: ast.AST) -> int:
    """The line of the first await (or async for, async with) outside any function."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(child, ast.Await | ast.AsyncFor | ast.AsyncWith):
            return child.lineno
        if line := _first_await(child):
            return line
    return 0


def top_level_await(page: pathlib.Path, script: list[Block]) -> str | None:
    """Why the script would not run from a file because of a top-level await, if it would not."""
    try:
        compile(source(script), str(page), "exec", dont_inherit=True)
        return None
    except SyntaxError:
        pass
    code = compile(
        source(script), str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    if not code.co_flags & inspect.CO_COROUTINE:
        return None  # another SyntaxError, which running the script reports
    return (
        f"{page.name}:{_first_await(ast.parse(source(script)))}: "
        "top-level await is a SyntaxError in a file; "
        "wrap it in `async def main(): ...` and `asyncio.run(main())`, "
        "or use the *_sync entry points"
    )


def run_script(
    page: pathlib.Path,
    script: list[Block],
    whole: bool = False,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """Run the script as a reader would (with ``env`` added to the environment); what went
    wrong, if anything."""
    problem = top_level_await(page, script)
    if problem is not None:
        return problem
    stem = re.sub(r"\W", "_", page.stem)
    where = f"{page.name}:{script[0].line}"
    if whole:
        where = f"{page.name} (all its blocks in one file)"
    with tempfile.TemporaryDirectory() as folder:
        # Not named after the page: mcp.py or types.py would shadow a module.
        file = pathlib.Path(folder) / f"example_{stem}_line_{script[0].line}.py"
        file.write_text(source(script))
        try:
            done = subprocess.run(
                [sys.executable, file.name],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=_TIMEOUT,
                env={**os.environ, **(env or {})},
            )
        except subprocess.TimeoutExpired:
            return f"{where}: still running after {_TIMEOUT}s"
    if done.returncode == 0:
        return None
    output = (done.stdout + done.stderr).replace(str(file), str(page)).replace(file.name, str(page))
    return f"{where}:\n{output}"


def run_page(page: pathlib.Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Run each script of the page in its own empty folder; what went wrong.

    A page whose blocks continue each other also runs as one file, all its blocks in order.
    """
    found = scripts(page)
    problems = [p for script in found if (p := run_script(page, script, env=env)) is not None]
    if len(found) > 1 and any(len(script) > 1 for script in found) and not problems:
        every = [block for script in found for block in script]
        problem = run_script(page, every, whole=True, env=env)
        problems += [problem] if problem is not None else []
    return problems


#: A page whose blocks run on a Temporal server reads its address from this variable.
TEMPORAL_ADDRESS = "AGENTFSM_TEMPORAL_ADDRESS"


def _pages_with_code() -> list[pathlib.Path]:
    return [page for page in PAGES if any(b.no_run is None for b in python_blocks(page))]


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda page: page.name)
def test_page_runs(page: pathlib.Path, request: pytest.FixtureRequest) -> None:
    env = {}
    if TEMPORAL_ADDRESS in page.read_text():  # a dev server, as the page asks its reader
        env[TEMPORAL_ADDRESS] = request.getfixturevalue("temporal_server")
    problems = run_page(page, env)
    assert not problems, "\n\n".join(problems)


def test_every_opt_out_says_why() -> None:
    for page in PAGES:
        for block in python_blocks(page):
            why = block.no_run
            assert why is None or (why.startswith(": ") and len(why) > 3), (
                f"{page.name}:{block.line}: write why, as <!-- no-run: needs a server -->"
            )


def test_a_continuing_block_says_so_on_the_page() -> None:
    for page in PAGES:
        lines = page.read_text().splitlines()
        for block in python_blocks(page):
            if block.continues:
                marker = next(
                    i for i in range(block.line - 2, -1, -1) if _CONTINUES.match(lines[i])
                )
                prose = " ".join(lines[max(0, marker - 3) : marker]).lower()
                page_says = "blocks on this page continue each other" in " ".join(lines)
                assert page_says or "continu" in prose or "above" in prose, (
                    f"{page.name}:{block.line}: say in the text that the block continues"
                    " the one above"
                )


def test_docs_are_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert len(PAGES) > 10
    for page in PAGES[1:]:
        assert re.search(rf":\s*{re.escape(page.name)}\s*$", nav, re.M), f"{page.name} not in nav"


def test_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = [m["target"] for m in _LINK.finditer(readme) if "://" not in m["target"]]
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


if __name__ == "__main__":
    failed = False
    for name in sys.argv[1:]:
        problems = run_page(pathlib.Path(name).resolve())
        for problem in problems:
            print(problem, end="\n\n", file=sys.stderr)
        failed = failed or bool(problems)
        print(f"{name}: {'FAILED' if problems else 'ok'}")
    sys.exit(1 if failed else 0)
