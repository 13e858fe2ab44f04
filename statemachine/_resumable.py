"""Whether a saved run can be resumed as asked, said in the command line's words.

``runs resume`` and the studio's decisions refuse the same things the same way, and
name the command that would answer a waiting run.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ._agent import Agent
from ._agent_spec import UsageError
from ._middleware.human_in_the_loop import request_digest
from .store import SavedRun

__all__ = ["DEFAULT_DB", "check_resumable", "db_flag", "default_db", "resume_hint"]

#: The store used when ``--db`` is not given (the environment's AGENTFSM_DB wins).
DEFAULT_DB = "agentfsm.db"


def default_db() -> str:
    """The store used when ``--db`` is not given: ``$AGENTFSM_DB``, else ``agentfsm.db``."""
    return os.environ.get("AGENTFSM_DB") or DEFAULT_DB


def db_flag(db: str) -> str:
    """`` --db PATH`` for a command line to print, or nothing for the default store."""
    return "" if db == default_db() else f" --db {shlex.quote(db)}"


def resume_hint(run_id: str, interrupt_data: Mapping[str, Any] | None, db: str) -> str:
    """The command that answers an interrupted run's approval requests."""
    data = interrupt_data or {}
    requests = [r for r in data.get("action_requests") or () if isinstance(r, Mapping)]
    names = ", ".join(str(r.get("tool_name")) for r in requests) or "its interrupt"
    configs = data.get("review_configs")
    allowed: set[str] = set()
    for request in requests:
        config = configs.get(request.get("tool_name")) if isinstance(configs, Mapping) else None
        if isinstance(config, Mapping) and isinstance(config.get("allowed_decisions"), list):
            allowed.update(str(d) for d in config["allowed_decisions"])
    # Bound to what is shown: each decision carries its request's digest.
    example = json.dumps(
        [{"type": "approve", "digest": request_digest(r)} for r in requests]
        or [{"type": "approve"}]
    )
    return (
        f"waiting for a decision on {names}; answer with: agentfsm runs resume "
        f"{shlex.quote(run_id)}{db_flag(db)} --decisions {shlex.quote(example)}"
        + (f" (one per request, type {' or '.join(sorted(allowed))})" if allowed else "")
    )


def check_resumable(saved: SavedRun, decisions: object, agent: Agent, spec: str, db: str) -> None:
    """Refuse, in the command line's own words, what the store would refuse in Python's."""
    run_id = saved.run_id
    if saved.status in ("ok", "error"):
        raise UsageError(f"run {run_id} ended {saved.status}: there is nothing to resume")
    if saved.status == "interrupted" and decisions is None:
        state = saved.agent_state
        data = state.interrupt_data if state is not None else None
        raise UsageError(f"run {run_id} is interrupted, {resume_hint(run_id, data, db)}")
    if saved.status != "interrupted" and decisions is not None:
        raise UsageError(
            f"--decisions answers an interrupted run; run {run_id} is {saved.status}: "
            "resume it without --decisions"
        )
    if isinstance(decisions, list):
        _check_bound(saved, decisions, db)
    have = {t.name for t in agent.tools}
    missing = sorted({n for n in saved.chain.tool_names if n not in have})
    if missing:
        raise UsageError(
            f"the agent of --agent {spec} lacks tools run {run_id} used: {', '.join(missing)}; "
            "pass the --agent the run was made with"
        )


def _check_bound(saved: SavedRun, decisions: Sequence[object], db: str) -> None:
    """Refuse a decision that carries no digest: the command line is the wire, and a
    decision on it approves only the request it was made on (the Python API's
    ``unbound=True`` has no flag here)."""
    for index, decision in enumerate(decisions):
        if isinstance(decision, Mapping) and decision.get("digest") is None:
            run_id = saved.run_id
            state = saved.agent_state
            data = state.interrupt_data if state is not None else None
            raise UsageError(
                f"decision {index} carries no digest of the request it decides; "
                f"agentfsm runs show {shlex.quote(run_id)}{db_flag(db)} lists each request "
                f"with its digest. Run {run_id} is {resume_hint(run_id, data, db)}"
            )
