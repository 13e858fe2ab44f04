"""Every Python block of the docs and the README runs as a reader would run it.

A page's blocks run in order in one fresh namespace (a later block builds on an
earlier one), in a process of their own whose working folder is an empty temp
dir, so blocks that write files write there. A block may use top-level
``await``, as in ``python -m asyncio``. A block opts out only with a comment
right before it that says why: ``<!-- no-run: needs a PostgreSQL server -->``.
Tracebacks point at the page's own lines.

Run one page by hand: ``python tests/test_docs.py docs/agents.md``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import pathlib
import re
import subprocess
import sys
from typing import Any, NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

_OPENER = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_NO_RUN = re.compile(r"^\s*<!--\s*no-run\b(?P<why>.*?)-->\s*$")
_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


class Block(NamedTuple):
    """One fenced block: its language, where its code starts, the code, and an opt-out."""

    lang: str
    line: int
    code: str
    no_run: str | None


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
            Block(opener["lang"], i + 2, code, None if marker is None else marker["why"].strip())
        )
        i = end + 1
    return found


def python_blocks(page: pathlib.Path) -> list[Block]:
    return [b for b in blocks(page.read_text()) if b.lang in ("python", "py", "python3")]


def run_page(page: pathlib.Path) -> None:
    """Run the page's Python blocks in one namespace, each compiled at its own line numbers."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    loop = asyncio.new_event_loop()
    try:
        for block in python_blocks(page):
            if block.no_run is not None:
                continue
            code = compile(
                "\n" * (block.line - 1) + block.code,
                str(page),
                "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                dont_inherit=True,
            )
            if code.co_flags & inspect.CO_COROUTINE:
                loop.run_until_complete(eval(code, namespace))
            else:
                exec(code, namespace)
    finally:
        loop.close()


def _pages_with_code() -> list[pathlib.Path]:
    return [page for page in PAGES if any(b.no_run is None for b in python_blocks(page))]


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda page: page.name)
def test_page_runs(page: pathlib.Path, tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, __file__, str(page)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert done.returncode == 0, f"{page.name}:\n{done.stdout}\n{done.stderr}"


def test_every_opt_out_says_why() -> None:
    for page in PAGES:
        for block in python_blocks(page):
            why = block.no_run
            assert why is None or (why.startswith(": ") and len(why) > 3), (
                f"{page.name}:{block.line}: write why, as <!-- no-run: needs a server -->"
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
    run_page(pathlib.Path(sys.argv[1]).resolve())
