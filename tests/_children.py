"""Machines inside machines, for the drawing and showing tests: a team machine whose
``researching`` state runs the research machine, whose ``searching`` state runs the
fetch machine, and a run on them built by hand (child traces on the transitions that
ran them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfsm import Edge, LLMChain, MachineTable, Message, Ok, Trace, Transition
from agentfsm.providers import ScriptedModel
from agentfsm.steps import Continue, PipelineResult


def _noop(result: PipelineResult, opts: Mapping[str, Any] | None) -> PipelineResult:
    return result


class RunsMachine:
    """A step whose work is a child machine (the engine that runs it is not needed here)."""

    def __init__(self, machine: MachineTable) -> None:
        self.machine = machine

    def __call__(self, result: PipelineResult, opts: Mapping[str, Any] | None) -> PipelineResult:
        return result


_TERMINALS = ("ok", "paused", "error")

FETCH = MachineTable(
    name="test_fetch",
    steps={"getting": (_noop,)},
    terminals=_TERMINALS,
    entries={"fresh": "getting"},
    edges=(Edge("getting", "ok", on=Ok, trigger="got", why="the page came"),),
)
RESEARCH = MachineTable(
    name="test_research",
    steps={"searching": (RunsMachine(FETCH),), "reading": (_noop,)},
    terminals=_TERMINALS,
    entries={"fresh": "searching"},
    edges=(
        Edge("searching", "reading", on=Continue, trigger="found", why="results came"),
        Edge("reading", "ok", on=Ok, trigger="read", why="the notes are written"),
    ),
)
TEAM = MachineTable(
    name="test_team",
    steps={"planning": (_noop,), "researching": (RunsMachine(RESEARCH),), "writing": (_noop,)},
    terminals=_TERMINALS,
    entries={"fresh": "planning"},
    edges=(
        Edge("planning", "researching", on=Continue, trigger="planned", why="a plan stands"),
        Edge("researching", "writing", on=Continue, trigger="researched", why="notes are in"),
        Edge("writing", "ok", on=Ok, trigger="wrote", why="the report is written"),
    ),
)

#: Text a model or tool could return: must show as written, never act.
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'


def _chain(*texts: str) -> LLMChain:
    chain = LLMChain(ScriptedModel([]))
    for text in texts:
        chain = chain.add_message(Message.assistant(text))
    return chain


def team_run() -> Trace:
    """A run of the team machine: researching ran research, whose searching ran fetch."""
    fetch = Trace(
        "getting",
        [Transition("getting", "got", "ok", _chain("the page " + HOSTILE), 0.001)],
        machine=FETCH.name,
    )
    research = Trace(
        "searching",
        [
            Transition("searching", "found", "reading", _chain("found 3"), 0.002).with_children(
                [fetch]
            ),
            Transition("reading", "read", "ok", _chain("found 3", "notes"), 0.001),
        ],
        machine=RESEARCH.name,
    )
    return Trace(
        "planning",
        [
            Transition("planning", "planned", "researching", _chain("plan"), 0.001),
            Transition(
                "researching", "researched", "writing", _chain("plan", "notes"), 0.01
            ).with_children([research]),
            Transition("writing", "wrote", "ok", _chain("plan", "notes", "report"), 0.001),
        ],
        machine=TEAM.name,
    )
