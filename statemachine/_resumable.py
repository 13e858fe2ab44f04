"""Whether a saved run can be resumed as asked, said in the command line's words.

``runs resume`` and the studio's decisions refuse the same things the same way, and
name the command that would answer a waiting run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ._agent import Agent
from ._agent_spec import UsageError
from ._middleware.human_in_the_loop import request_digest
from .store import SavedRun, Store

__all__ = [
    "DEFAULT_DB",
    "agent_flag",
    "check_resumable",
    "db_flag",
    "default_db",
    "machines_flag",
    "recorded_command",
    "resume_hint",
]

#: The store used when ``--db`` is not given (the environment's AGENTFSM_DB wins).
DEFAULT_DB = "agentfsm.db"


def default_db() -> str:
    """The store used when ``--db`` is not given: ``$AGENTFSM_DB``, else ``agentfsm.db``."""
    return os.environ.get("AGENTFSM_DB") or DEFAULT_DB


def db_flag(db: str) -> str:
    """`` --db PATH`` for a command line to print, or nothing for the default store."""
    return "" if db == default_db() else f" --db {shlex.quote(db)}"


#: A module's dotted name, and ``MODULE:ATTR``: what a saved command may name, nothing else.
_MODULE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_SPEC: Final = re.compile(_MODULE.pattern + ":" + _MODULE.pattern)
#: The providers ``agentfsm run --provider`` takes.
PROVIDERS: Final = ("openai", "anthropic", "scripted")


def recorded_command(store: Store, run_id: str) -> dict[str, Any]:
    """How the command line started run ``run_id`` (``checkpoint(command=...)``), checked:
    ``{"agent": "MODULE:ATTR", "machines": [MODULE, ...]}`` for ``agentfsm run --agent``,
    ``{"provider": ..., "model": ..., "base_url": ..., "max_runs": ...}`` for its own small
    agent; ``{}`` for a run started otherwise, or one whose record is not of this shape (a
    saved file is data: a name in it that is no module name is never imported)."""
    try:
        header = json.loads(store.read(run_id).headers[0])
    except Exception:  # no such run, or a damaged one: the command's own read says so
        return {}
    command = header.get("command") if isinstance(header, Mapping) else None
    if not isinstance(command, Mapping):
        return {}
    agent = command.get("agent")
    if isinstance(agent, str) and _SPEC.fullmatch(agent):
        machines = command.get("machines") or []
        if not isinstance(machines, list):
            machines = []
        return {
            "agent": agent,
            "machines": [m for m in machines if isinstance(m, str) and _MODULE.fullmatch(m)],
        }
    provider, model = command.get("provider"), command.get("model")
    base_url, runs = command.get("base_url"), command.get("max_runs")
    if (
        provider in PROVIDERS
        and isinstance(model, str)
        and (base_url is None or isinstance(base_url, str))
        and isinstance(runs, int)
        and not isinstance(runs, bool)
        and runs > 0
    ):
        return {"provider": provider, "model": model, "base_url": base_url, "max_runs": runs}
    return {}


def agent_flag(command: Mapping[str, Any] | None) -> str:
    """`` --agent MODULE:ATTR`` for a run started with one, else nothing."""
    agent = (command or {}).get("agent")
    return f" --agent {shlex.quote(agent)}" if isinstance(agent, str) else ""


def machines_flag(command: Mapping[str, Any] | None) -> str:
    """`` --machines MODULE`` for each module a run's own machine is declared in."""
    return "".join(f" --machines {shlex.quote(m)}" for m in (command or {}).get("machines", ()))


def resume_hint(
    run_id: str,
    interrupt_data: Mapping[str, Any] | None,
    db: str,
    command: Mapping[str, Any] | None = None,
) -> str:
    """The command that answers an interrupted run's approval requests (with the
    ``--agent`` the run was started with, when the command line recorded one)."""
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
        f"{shlex.quote(run_id)}{db_flag(db)}{agent_flag(command)} "
        f"--decisions {shlex.quote(example)}"
        + (f" (one per request, type {' or '.join(sorted(allowed))})" if allowed else "")
    )


def check_resumable(
    saved: SavedRun,
    decisions: object,
    agent: Agent,
    spec: str,
    db: str,
    command: Mapping[str, Any] | None = None,
    *,
    named: str | None = None,
    fix: str = "pass the --agent the run was made with",
) -> None:
    """Refuse, in the command line's own words, what the store would refuse in Python's
    (``command``: how the command line started the run, for the commands it names;
    ``named``: how a refusal names the agent, when no ``--agent`` gave it; ``fix``: what
    to do about an agent that lacks the run's tools)."""
    run_id = saved.run_id
    if saved.status in ("ok", "error"):
        raise UsageError(f"run {run_id} ended {saved.status}: there is nothing to resume")
    if saved.status == "interrupted" and decisions is None:
        state = saved.agent_state
        data = state.interrupt_data if state is not None else None
        hint = resume_hint(run_id, data, db, command)
        raise UsageError(f"run {run_id} is interrupted, {hint}")
    if saved.status != "interrupted" and decisions is not None:
        raise UsageError(
            f"--decisions answers an interrupted run; run {run_id} is {saved.status}: "
            "resume it without --decisions"
        )
    if isinstance(decisions, list):
        _check_bound(saved, decisions, db, command)
    have = {t.name for t in agent.tools}
    missing = sorted({n for n in saved.chain.tool_names if n not in have})
    if missing:
        who = named or f"the agent of --agent {spec}"
        raise UsageError(f"{who} lacks tools run {run_id} used: {', '.join(missing)}; {fix}")


def _check_bound(
    saved: SavedRun, decisions: Sequence[object], db: str, command: Mapping[str, Any] | None
) -> None:
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
                f"agentfsm runs show {shlex.quote(run_id)}{db_flag(db)}"
                f"{machines_flag(command)} lists each request "
                f"with its digest. Run {run_id} is {resume_hint(run_id, data, db, command)}"
            )
