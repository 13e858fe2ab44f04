"""The public face: every public module says what it exports, and what it exports is pinned.

A module is public when no part of its name starts with ``_``. Each one has an
``__all__`` whose every name exists, and the whole surface is the one written
in ``tests/golden/public_api.txt``: a change to it is a change of the API, made
on purpose with ``python tests/test_public_api.py --write`` and read in review.
"""

from __future__ import annotations

import importlib
import pathlib
import sys

import pytest

#: The deprecated module answers every name it lists, each with a warning (tested in
#: tests/test_store.py); reading the surface takes them all.
DEPRECATED = "ignore:agentfsm.store.checkpoint is deprecated:DeprecationWarning"
ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "public_api.txt"
FOLDERS = {"statemachine": "agentfsm", "providers": "agentfsm.providers"}


def public_modules() -> list[str]:
    names = set()
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if any(part.startswith("_") for part in parts):
                continue
            names.add(".".join([package, *parts]))
    return sorted(names)


def surface() -> str:
    """The public surface as text: one line per module, its names sorted."""
    lines = []
    for name in public_modules():
        exported = getattr(importlib.import_module(name), "__all__", None)
        shown = "(no __all__)" if exported is None else " ".join(sorted(exported))
        lines.append(f"{name}: {shown}")
    return "\n".join(lines) + "\n"


@pytest.mark.filterwarnings(DEPRECATED)
def test_every_public_module_declares_what_it_exports() -> None:
    for name in public_modules():
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{name} has no __all__"
        assert len(set(exported)) == len(exported), f"{name}.__all__ names a name twice"
        for item in exported:
            assert hasattr(module, item), f"{name}.__all__ names {item!r}, which it lacks"


@pytest.mark.filterwarnings(DEPRECATED)
def test_the_public_surface_is_the_pinned_one() -> None:
    assert surface() == GOLDEN.read_text(), (
        "The public API changed. If that is intended, run "
        "`python tests/test_public_api.py --write` and review tests/golden/public_api.txt."
    )


def test_the_api_pages_document_the_faces_and_nothing_else() -> None:
    """docs/api/ has one page per public module, each rendering that module (its __all__)."""
    pages = sorted((ROOT / "docs" / "api").glob("*.md"))
    rendered = sorted(
        line.removeprefix("::: ").strip()
        for page in pages
        for line in page.read_text().splitlines()
        if line.startswith(":::")
    )
    assert rendered == public_modules()


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        GOLDEN.write_text(surface())
    else:
        print(surface(), end="")
