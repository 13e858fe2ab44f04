"""The last release's import paths keep working for one more release, each with a warning.

``tests/golden/public_api_0.1.txt`` is the surface of release 0.1: every module and name in
it. A name still exported where it was imports silently; any other imports the same object
with a :class:`DeprecationWarning` that names the face it lives in now, or says it became
internal.
"""

from __future__ import annotations

import importlib
import pathlib
import re
import subprocess
import sys
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
OLD = ROOT / "tests" / "golden" / "public_api_0.1.txt"
NEW = ROOT / "tests" / "golden" / "public_api.txt"


def _surface(path: pathlib.Path) -> dict[str, list[str]]:
    lines = (line.split(": ", 1) for line in path.read_text().splitlines())
    return {module: names.split() for module, names in lines}


OLD_SURFACE = _surface(OLD)
NEW_SURFACE = _surface(NEW)
CASES = [(module, name) for module, names in OLD_SURFACE.items() for name in names]


def test_the_new_surface_is_at_most_two_hundred_names() -> None:
    assert sum(map(len, NEW_SURFACE.values())) <= 200
    # the faces: nine, and the extras mcp, otel, serve, studio, temporal; agentfsm.evals is a
    # face of its own: runs many times over a dataset, and tests between two configurations,
    # are neither one run's testing (agentfsm.testing) nor a run's view
    assert len(NEW_SURFACE) <= 14


@pytest.mark.parametrize(("module", "name"), CASES, ids=[f"{m}.{n}" for m, n in CASES])
def test_each_old_name_still_imports(module: str, name: str) -> None:
    kept = name in NEW_SURFACE.get(module, ())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(importlib.import_module(module), name)
    said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    if kept:
        assert said == []
        return
    assert len(said) == 1, said
    home = [face for face, names in NEW_SURFACE.items() if name in names]
    match = re.fullmatch(rf"{re.escape(module)}\.{name} is deprecated: (.*)", said[0])
    assert match, said[0]
    if match[1].startswith("import it from "):
        face = match[1].removeprefix("import it from ")
        assert face in home and getattr(importlib.import_module(face), name) is value
    else:
        assert match[1] == "it is internal now and will be removed", said[0]


def test_an_old_module_path_names_a_name_it_never_had_as_missing() -> None:
    old = importlib.import_module("agentfsm.machine")
    with pytest.raises(AttributeError, match=r"module 'agentfsm\.machine' has no attribute 'x'"):
        old.x  # noqa: B018


def test_the_old_paths_work_in_a_fresh_interpreter() -> None:
    """As a user's program meets them: the first import of agentfsm installs the finder."""
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "try:\n    from agentfsm.store.sqlite import SQLiteStore\n"
        "except DeprecationWarning as w:\n    print(w)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "agentfsm.store.sqlite.SQLiteStore is deprecated: import it from agentfsm.store"
    )


def test_an_old_module_path_never_hides_the_faces_name_of_the_same_name() -> None:
    import agentfsm
    import agentfsm.store

    importlib.import_module("agentfsm.store.load")
    importlib.import_module("agentfsm.store.checkpoint")
    importlib.import_module("agentfsm.effects")
    assert callable(agentfsm.store.load) and agentfsm.store.load.__module__ == "agentfsm.store"
    assert agentfsm.store.checkpoint.__name__ == "checkpoint"
    assert agentfsm.effects.__module__ == "agentfsm"
