"""N resumers of one run, killed, frozen and thawed at random (a small budget; the large
one is ``benchmarks/store_chaos.py``): every call runs once, bar the at-least-once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._chaos import CALLS, trial


@pytest.mark.parametrize(("seed", "resumers"), [(0, 1), (1, 3), (2, 5)])
def test_resumers_killed_and_frozen_at_random_run_each_call_once(
    tmp_path: Path, seed: int, resumers: int
) -> None:
    outcome = trial(tmp_path, seed=seed, resumers=resumers, chaos=2.5)
    assert outcome.unexcused == 0, outcome
    assert outcome.ended_as_one, outcome
    excused = outcome.killed_in_flight + outcome.frozen_in_flight
    assert sum(outcome.runs.values()) == len(CALLS) + excused, outcome
