"""The documentation pages as a reader meets them: the speed page says what the figures mean
to a user (the engineering record lives beside the benchmarks), and each page links the
glossary's terms where it first uses them."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_speed_page_is_for_users_and_the_history_beside_the_benchmarks() -> None:
    page = (DOCS / "speed.md").read_text(encoding="utf-8")
    # What the figures mean beside a model call, first; how to reproduce them.
    intro = page.split("\n## ", 1)[0]
    assert "µs" in intro and "model call" in intro
    assert "python benchmarks/speed.py --markdown" in page
    assert "python benchmarks/peers/run.py" in page
    # No commit a reader cannot know: the rounds of work are in benchmarks/HISTORY.md.
    assert not re.search(r"`[0-9a-f]{7}`", page), re.findall(r"`[0-9a-f]{7}`", page)
    assert "HISTORY.md" in page
    history = (ROOT / "benchmarks" / "HISTORY.md").read_text(encoding="utf-8")
    assert "`a9c4ec9`" in history and "format 3" in history
    # The anchors other pages link to.
    assert "\n## Saving runs\n" in page and "\n## OpenTelemetry\n" in page


#: The glossary's terms each page links where it first uses them: anchor, and the words.
TERMS = {
    "segment": r"segments?",
    "step": r"steps?",
    "transition": r"transitions?",
    "trace": r"traces?",
    "chain": r"chains?",
    "boundary": r"boundar(?:y|ies)",
    "lease": r"leases?",
    "claim": r"claim(?:s|ed)?",
    "digest": r"digests?",
    "entry": r"entr(?:y|ies)",
}

#: What is not prose on a line: code spans, links (their text is another page's name),
#: HTML, addresses. A link to the glossary is kept apart: it is what is looked for.
_SKIP = re.compile(r"(`+)[^`]*?\1|\[[^\]]*\]\([^)]*\)|<[^>]+>|https?://\S+")
_GLOSSARY_LINK = re.compile(r"\[([^\]]*)\]\(glossary\.md#([a-z]+)\)")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a page a reader reads as prose: no code block, heading or comment."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines()):
        stripped = line.lstrip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if stripped.startswith(("#", "<!--", "|---", "|:--")):
            continue
        out.append((number, line))
    return out


def first_uses(text: str) -> dict[str, tuple[int, int, bool]]:
    """Each term's first use on a page: its line, column, and whether it links the glossary."""
    found: dict[str, tuple[int, int, bool]] = {}
    for number, line in prose_lines(text):
        spans: list[tuple[int, int, str, bool]] = []
        for link in _GLOSSARY_LINK.finditer(line):
            spans.append((link.start(), link.end(), link.group(2), True))
        plain = _SKIP.sub(lambda m: " " * len(m.group(0)), line)
        for term, words in TERMS.items():
            for match in re.finditer(rf"\b{words}\b", plain, flags=re.I):
                spans.append((match.start(), match.end(), term, False))
        for start, _, term, linked in sorted(spans):
            found.setdefault(term, (number, start, linked))
    return found


def _pages() -> list[pathlib.Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name != "glossary.md")


def test_each_page_links_the_glossary_where_it_first_uses_a_term() -> None:
    unlinked = [
        f"{page.name}:{number + 1}: {term}"
        for page in _pages()
        for term, (number, _, linked) in first_uses(page.read_text(encoding="utf-8")).items()
        if not linked
    ]
    assert unlinked == []


def test_every_glossary_link_has_its_anchor() -> None:
    glossary = (DOCS / "glossary.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r"\{ #([a-z]+) \}", glossary))
    assert set(TERMS) <= anchors
    for page in _pages():
        for _, anchor in _GLOSSARY_LINK.findall(page.read_text(encoding="utf-8")):
            assert anchor in anchors, (page.name, anchor)
