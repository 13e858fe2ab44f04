"""What both durable engines (DBOS and Temporal) do alike inside and around a run.

The name of a recorded call (a DBOS step, a Temporal activity), the id a resumed run's
continuation takes and the refusal of a run id that would look like one, and whether
decisions sent are a repeat of ones a run took: one meaning on both engines, so a
program moving between them meets the same names and the same answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ._approval import Decision, DecisionError
from ._run import Run

__all__ = ["CONTINUATION", "RESERVED", "call_name", "check_run_id", "plain", "same_decisions"]

#: A run resumed after its wait timed out goes on in the workflow ``RUN/resume-N``.
CONTINUATION: Final = "/resume-"
#: A run id that names a continuation (refused for a new run).
RESERVED: Final = re.compile(re.escape(CONTINUATION) + r"[0-9]+\Z")


def check_run_id(run_id: str | None) -> None:
    """Refuse (ValueError) a run id ending in ``/resume-N``: such ids name continuations."""
    if run_id is not None and RESERVED.search(run_id):
        raise ValueError(
            f"Run id {run_id!r} ends in {CONTINUATION}N, which names a resumed run's "
            "continuation; pick another id."
        )


def call_name(run: Run | None, kind: str, index: int) -> str:
    """A recorded call's name: what it calls, the edge into the state making it, and its
    index in the run (``model:gpt@expanded>calling#1``); a call made between segments,
    outside any transition, is ``@resume`` (``subagent:NAME@resume#3``)."""
    if run is None:
        where = "resume"
    else:
        moves = run.trace.transitions
        where = f"{moves[-1].trigger if moves else 'entry'}>{run.state}"
    return f"{kind}@{where}#{index}"


def plain(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, default=repr))


def same_decisions(given: Sequence[Any], claimed: Sequence[Any], *, unbound: bool) -> bool:
    """Whether ``given`` are the ``claimed`` (bound, as a run keeps them) decisions again:
    the same type and edit, and the call id and digest each gives (a decision without a
    digest: only ``unbound``)."""
    if len(given) != len(claimed):
        return False
    for index, (data, theirs) in enumerate(zip(given, claimed, strict=True)):
        try:
            mine = plain(Decision.of(data, index).to_data())
        except DecisionError:
            return False
        if not isinstance(theirs, Mapping):
            return False
        if (mine["type"], mine.get("arguments")) != (theirs.get("type"), theirs.get("arguments")):
            return False
        for key in ("tool_call_id", "digest"):
            if mine.get(key) is not None and mine[key] != theirs.get(key):
                return False
        if mine.get("digest") is None and not unbound:
            return False
    return True
