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
