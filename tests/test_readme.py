"""The README's first example runs as written."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys


def test_five_minutes_example_runs() -> None:
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    (code,) = re.findall(r"## Five minutes\n\n```python\n(.*?)```", readme, re.S)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "2 + 40 = 42" in out
    assert out.strip().endswith("deciding ok")
