"""A machine a user declares, with states of its own, for an agent run on Temporal.

``REVIEWED`` is not derived from the standard table: its five states are its own
(``thinking``, ``gate``, ``acting``, ``merging``, ``judging``), built from the steps of
:mod:`agentfsm.steps`, the standard approval state's steps for ``gate``, and a
judging step of its own. ``reviewed()`` is its agent: a scripted model that files a
report (a tool every call of which waits for approval), then says it is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfsm import (
    STANDARD,
    Agent,
    Edge,
    Failed,
    HumanInTheLoop,
    Interrupted,
    MachineTable,
    Ok,
    Paused,
    tool,
)
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.steps import (
    Continue,
    PipelineResult,
    call_llm,
    check_max_runs,
    check_pause,
    check_response_complete,
    execute_tools,
    expand_tool_results,
    propagate_state,
    take_tool_answers,
)

#: The reports filed, in order (a worker in this process files them).
FILED: list[str] = []


def judge(result: PipelineResult, opts: Mapping[str, Any] | None = None) -> PipelineResult:
    """Think again while the model asked for tools (within max_runs); else the run is done."""
    if not isinstance(result, Continue):
        return result
    if result.chain.needs_response:
        return check_max_runs(result, opts)
    return Ok(result.chain)


REVIEWED = MachineTable(
    name="temporal_reviewed",
    steps={
        "thinking": (expand_tool_results, call_llm, check_response_complete, check_pause),
        "gate": STANDARD.steps["interrupt_check"],
        "acting": (execute_tools,),
        "merging": (take_tool_answers, propagate_state),
        "judging": (judge,),
    },
    terminals=("ok", "paused", "interrupted", "error"),
    entries={"fresh": "thinking", "pending tool calls": "gate", "tool results": "merging"},
    edges=(
        Edge("thinking", "gate", on=Continue, trigger="thought", why="the model replied"),
        Edge("thinking", "error", on=Failed, trigger="failed", why="the model call failed"),
        Edge("thinking", "paused", on=Paused, trigger="paused", why="asked to stop"),
        Edge("gate", "acting", on=Continue, trigger="allowed", why="nothing waits for approval"),
        Edge("gate", "interrupted", on=Interrupted, trigger="held", why="a call needs approval"),
        Edge("acting", "merging", on=Continue, trigger="acted", why="every call has its result"),
        Edge("merging", "judging", on=Continue, trigger="merged", why="the results are in"),
        Edge("judging", "thinking", on=Continue, trigger="again", why="the model asked for tools"),
        Edge("judging", "ok", on=Ok, trigger="done", why="the model answered"),
        Edge("judging", "error", on=Failed, trigger="failed", why="max_runs reached"),
    ),
)


@tool
def file_report(title: str) -> str:
    """File a report (every call waits for approval)."""
    FILED.append(title)
    return f"filed {title}"


def reviewed() -> Agent:
    model = ScriptedModel(
        lambda messages: (
            say("Filed.")
            if any(m.role == "tool" for m in messages)
            else call_tool("file_report", title="Q3", call_id="report-1")
        ),
        model_name="scripted",
    )
    return Agent(
        model,
        [file_report],
        middleware=[HumanInTheLoop({"file_report": True})],
        machine=REVIEWED,
    )
