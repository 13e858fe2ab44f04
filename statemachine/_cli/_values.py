"""Value types the commands' options share, each refusing a wrong value in one line."""

from __future__ import annotations

import argparse

__all__ = ["positive"]


def positive(text: str) -> int:
    """An integer of at least 1 (``--runs``, ``--max-runs``, ``--concurrency``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
