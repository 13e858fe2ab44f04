"""A fork nothing runs, as the studio shows it and goes on with it.

:func:`~agentfsm.store.fork_run` saves a run running and unclaimed: nothing runs it
until it is resumed. Its page shows it waiting (not running, not live) with a form
that resumes it in the studio's process, with the studio's agent (its ``--agent``, or
the demo agent) on the agent's own model or one named ``PROVIDER:NAME`` from the
providers' registry (``scripted:echo`` runs offline).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Container, Mapping
from typing import Any, Final
from urllib.parse import quote

from .._agent_spec import DEFAULT_AGENT, UsageError
from .._errors import ResumeError
from .._resumable import check_resumable
from .._resume import restore_run
from ..store import SavedRun

__all__ = ["MODELS", "agent_labels", "naming", "resting", "resume_fork", "shown_status"]

#: The models a resume offers by name (any PROVIDER:NAME may be typed).
MODELS: Final = ("scripted:echo", "openai:gpt-4.1-mini", "anthropic:claude-sonnet-4-5")


#: What to do about a studio's agent that lacks a run's tools.
_FIX: Final = "start the studio with --agent MODULE:ATTR, the agent the run was made with"


def agent_labels(studio: Any) -> list[str]:
    """The agents a resume from the page offers, the first its default: the studio's
    ``--agent``s, else the one it was given or the demo agent."""
    if studio.agent_specs:
        return list(studio.agent_specs)
    return ["the agent the studio was given" if studio.given else DEFAULT_AGENT]


def naming(studio: Any, recorded: str | None = None) -> dict[str, str]:
    """How a refusal of the studio's agent (it lacks the run's tools) names it, and the
    fix (:func:`~agentfsm._resumable.check_resumable`'s ``named`` and ``fix``)."""
    if studio.agent_specs:
        named = f"the studio's agent (--agent {studio.spec_for(recorded)})"
    elif studio.given and recorded is None:
        tools = ", ".join(sorted(t.name for t in studio.agent().tools)) or "no tools"
        named = f"the agent the studio was given (with {tools})"
    else:
        named = f"the studio's agent ({studio.agent_named(recorded)})"
    return {"named": named, "fix": _FIX}


def shown_status(
    run_id: str, status: str, forked: bool, unheld: Callable[[], Container[str]]
) -> str:
    """The status the studio shows a run with, on every page and in every live update:
    ``waiting`` for a fork nothing runs (saved running, and in ``unheld()``, the store's
    runs no lease holds, read only for such a fork), else the run's own."""
    if status == "running" and forked and run_id in unheld():
        return "waiting"
    return status


def resting(studio: Any, saved: SavedRun) -> dict[str, Any]:
    """A fork nothing runs (:func:`shown_status`, which makes its page waiting and not
    live): what resumes it from the page (the studio's agent; a model by name). Empty for any other
    run."""
    forked = saved.forked_from is not None
    unheld = studio.catalog.store.unheld
    if shown_status(saved.run_id, saved.status, forked, unheld) != "waiting":
        return {}
    return {
        "resting": True,
        "resume": f"/api/runs/{quote(saved.run_id, safe='')}/resume",
        "agents": agent_labels(studio),
        "models": list(MODELS),
    }


async def resume_fork(
    studio: Any, run_id: str, body: Mapping[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """The fork ``run_id`` restored on the agent and model ``body`` names, claimed and
    not yet stepped, and what the answer says of it. UsageError (400) for an agent the
    studio has not or a model that is not ``PROVIDER:NAME`` of a known provider;
    ResumeError (409) for a run that is no fork at rest."""
    labels = agent_labels(studio)
    chosen, model = body.get("agent") or labels[0], body.get("model") or ""
    if chosen not in labels or not isinstance(model, str):
        offered = " or ".join(labels)
        raise UsageError(
            f"this studio resumes runs with {offered}; start it with --agent MODULE:ATTR "
            "(repeated for several) for another, and name a model as PROVIDER:NAME"
        )
    saved: SavedRun = studio.load(run_id)
    if not resting(studio, saved):
        raise ResumeError(f"run {run_id} is {saved.status}: only a fork nothing runs goes on here")
    agent = studio.agent(chosen if chosen in studio.agent_specs else None)
    if model:
        provider, _, name = model.partition(":")
        if not provider or not name:
            raise UsageError(f"name the model as PROVIDER:NAME (scripted:echo), not {model!r}")
        # import time: only a resume on another model loads the providers
        from ..providers import create_model

        agent = copy.copy(agent)  # the studio's agent itself keeps its model
        agent.model = create_model(provider, name)
    names = naming(studio, chosen if chosen in studio.agent_specs else None)
    check_resumable(saved, None, agent, chosen, studio.db, None, **names)
    run = await restore_run(agent, run_id, studio.writer())
    said = {"run_id": run_id, "resumed": True, "agent": chosen, "model": agent.model.name}
    return run, said
