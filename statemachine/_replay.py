"""Replaying a recorded run through a table, segment by segment, calling nothing.

A saved run may have several segments (paused and resumed, interrupted and
answered, moved by a migration) and its last one may be cut off (the process
stopped, the run goes on later). Each segment is replayed on its own, from the
conversation it started with, at the entry the table gives that conversation
(at the state it was moved to, for a migration). What the world did to the run
is replayed with it: a model reply and a tool result by the recording, a pause
where the recording paused, a gate's interrupt where the recording was
interrupted at a state that asks for approval (the gate's answer is the agent's
middleware's, which a recording does not keep), and a cut-off segment stops
after as many steps as it made. An unchanged table therefore visits the
recorded states exactly; a changed one shows where it parts.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ._chain import LLMChain
from ._effects import state_effects
from ._machine import MachineTable
from ._messages import Message, ToolResult
from ._results import Continue, Interrupted, PipelineResult
from ._trace import Trace

if TYPE_CHECKING:
    from ._results import Terminal
    from ._run import Run
    from ._tools import Tool
    from .store import SavedRun

__all__ = ["ReplayReport", "replay"]

#: The entries the standard mode picks from by the conversation's situation.
_SITUATIONS = frozenset({"fresh", "pending tool calls", "tool results"})


@attrs.frozen
class ReplayReport:
    """Where a recorded run and its replay on another table part, or that they agree."""

    #: The states the recorded run visited, segment after segment.
    recorded: tuple[str, ...]
    #: The states the replay visited.
    replayed: tuple[str, ...]
    #: The replay's trace and result (its last segment's).
    trace: Trace
    result: Terminal | None
    #: How many recorded replies there were, and how many the replay asked for.
    replies: int
    model_calls: int
    #: Tool calls the replay made that the recording has no result for.
    unrecorded_calls: tuple[str, ...] = ()

    @property
    def index(self) -> int | None:
        """The position of the first state where the two differ; None when they agree."""
        for i, (a, b) in enumerate(itertools.zip_longest(self.recorded, self.replayed)):
            if a != b:
                return i
        return None

    @property
    def agrees(self) -> bool:
        return self.index is None

    def __str__(self) -> str:
        i = self.index
        if i is None:
            return f"the replay agrees: {len(self.replayed)} states, {' '.join(self.replayed)}"
        a = self.recorded[i] if i < len(self.recorded) else "(the end)"
        b = self.replayed[i] if i < len(self.replayed) else "(the end)"
        return (
            f"the replay parts at state {i}: recorded {a!r}, replayed {b!r} "
            f"(after {' '.join(self.recorded[:i]) or 'nothing'})"
        )


def _traces(saved: SavedRun | Trace | Sequence[Trace]) -> list[Trace]:
    if isinstance(saved, Trace):
        return [saved]
    if isinstance(saved, Sequence):
        return list(saved)
    return list(saved.traces)


def _results(traces: Sequence[Trace]) -> dict[str, ToolResult]:
    """Every tool result the run recorded, by call id."""
    results: dict[str, ToolResult] = {}
    for trace in traces:
        for t in trace.transitions:
            for message in t.chain.messages:
                for result in message.tool_results:
                    results.setdefault(result.tool_call_id, result)
    return results


def _start(trace: Trace, before: LLMChain | None, table: MachineTable) -> LLMChain | None:
    """The chain a segment started with: its first move's, less the reply or the tool
    results its entry's work added (a state that calls the model or runs tools, read
    from its effects); an empty segment's, the one before's."""
    if not trace.transitions:
        return before
    chain = trace.transitions[0].chain
    messages = list(chain.messages)
    kinds = state_effects(table).get(trace.entry, frozenset())
    roles = {"assistant"} if "model" in kinds else set()
    roles |= {"tool"} if "tools" in kinds else set()
    added = {id(m) for m in chain.exchanged_messages}
    while messages and id(messages[-1]) in added and messages[-1].role in roles:
        messages.pop()
    return LLMChain(
        llm=chain.llm,
        messages=messages,
        custom_context=chain.custom_context,
        max_retry_count=chain.max_retry_count,
    )


def _replies(trace: Trace, start: Sequence[Message]) -> list[Message]:
    """The model replies a segment recorded, in order."""
    replies: list[Message] = []
    known = {id(m) for m in start}
    for t in trace.transitions:
        for message in t.chain.exchanged_messages or (t.chain.last_message,):
            if message is None or message.role != "assistant" or id(message) in known:
                continue
            known.add(id(message))
            if not replies or replies[-1] != message:
                replies.append(message)
    return replies


def replay(
    saved: SavedRun | Trace | Sequence[Trace],
    table: MachineTable,
    opts: Mapping[str, Any] | None = None,
) -> ReplayReport:
    """Drive a recorded run's model replies and tool results through ``table``.

    No model and no tool is called: a scripted model answers each segment with
    its recorded replies in order, and each tool call answers with the recorded
    result of the same call id. Each segment starts from the conversation it
    started with and runs ``table`` with ``opts`` (the run's saved options when
    ``saved`` is a saved run), pausing, interrupting and stopping where the
    recording did (see the module); the report compares the states visited.
    """
    # a cycle: the machine and the store load the versions, which load this
    from ._modes.standard import StandardMode

    # a cycle: the machine and the store load the versions, which load this
    from ._run import Run

    # a cycle: the machine and the store load the versions, which load this
    from .providers import ScriptedModel

    traces = _traces(saved)
    if not any(trace.transitions for trace in traces):
        raise ValueError("the recorded run made no transition: there is nothing to replay")
    results = _results(traces)
    unrecorded: list[str] = []
    tools = _tools(results, traces, unrecorded)
    if opts is None:
        opts = dict(getattr(saved, "options", None) or {})
    ended = getattr(saved, "done", None)
    gates = {s for s, kinds in state_effects(table).items() if "approval" in kinds}
    standard = set(table.entries) >= _SITUATIONS
    recorded: list[str] = []
    replayed: list[str] = []
    replies = calls = 0
    before: LLMChain | None = None
    run: Run | None = None
    for number, trace in enumerate(traces):
        recorded += trace.states
        last = number == len(traces) - 1
        start = _start(trace, before, table)
        if trace.transitions:
            before = trace.transitions[-1].chain
        if start is None or (trace.migrated_from is not None and trace.entry not in table.steps):
            break  # the replay cannot enter where the recording did: they part here
        said = _replies(trace, start.messages)
        model = ScriptedModel(list(said), model_name="replay")
        chain = attrs.evolve(
            start,
            llm=model,
            tools=tools,
            custom_context=_context(start, first=number == 0),
            current_failure_count=0,
        )
        forced = _interrupts(trace, table, gates)
        holder: list[Run] = []
        options = dict(opts)
        if forced:
            options["extra_steps"] = {
                state: (_interrupter(holder, at),) for state, at in forced.items()
            }
        if trace.migrated_from is None and standard:
            run = StandardMode(table).start(chain, options)
        elif trace.migrated_from is None and number == 0:
            run = Run(table, chain, next(iter(table.entries.values())), options)
        else:
            run = Run(table, chain, trace.entry, options)
        holder.append(run)
        cut = last and (ended is False or (ended is None and trace.terminal not in table.terminals))
        pauses = {i: t.source for i, t in enumerate(trace.transitions) if _pause(t, table)}
        steps = 0
        while not run.done and not (cut and steps >= len(trace.transitions)):
            if pauses.get(steps) == run.state:
                run.request_pause("replayed: the recording paused here")
            run.step_sync()
            steps += 1
        replayed += run.trace.states
        replies += len(said)
        calls += model.calls
    assert run is not None
    return ReplayReport(
        recorded=tuple(recorded),
        replayed=tuple(replayed),
        trace=run.trace,
        result=run.result if run.done else None,
        replies=replies,
        model_calls=calls,
        unrecorded_calls=tuple(unrecorded),
    )


def _context(start: LLMChain, *, first: bool) -> dict[str, Any]:
    """A replayed segment's custom context: the first starts afresh; a later one keeps
    the run's (its agent state), less the last segment's pause reason."""
    if first:
        return {}
    return {k: v for k, v in start.custom_context.items() if k != "pause_reason"}


def _pause(t: Any, table: MachineTable) -> bool:
    """Whether the recorded move paused the run from outside its work."""
    detail = t.detail
    return bool(isinstance(detail, Mapping) and detail.get("requested")) and t.dest in (
        table.terminals
    )


def _interrupts(trace: Trace, table: MachineTable, gates: set[str]) -> dict[str, int]:
    """``{gate: step}`` where the recording was interrupted at a state that asks for
    approval (its edge fired on ``Interrupted``): the replay's gate interrupts there too."""
    out: dict[str, int] = {}
    for i, t in enumerate(trace.transitions):
        edge = table.edge(t.source, t.trigger) if t.source in gates else None
        if edge is not None and edge.on is Interrupted:
            out[t.source] = i
    return out


def _interrupter(holder: list[Run], at: int) -> Any:
    def interrupt(result: PipelineResult, opts: Mapping[str, Any]) -> PipelineResult:
        if isinstance(result, Continue) and holder and len(holder[0].trace.transitions) == at:
            return Interrupted(result.chain, {"type": "replayed", "reason": "recorded interrupt"})
        return result

    return interrupt


def _tools(
    results: Mapping[str, ToolResult], traces: Sequence[Trace], unrecorded: list[str]
) -> tuple[Tool, ...]:
    """A tool for every name the recording called, answering with the recorded results."""
    # a cycle: the machine and the store load the versions, which load this
    from ._tools import Tool, ToolContext, ToolOutput

    def tool_for(name: str) -> Tool:
        def answer(context: ToolContext, **_: Any) -> ToolOutput:
            result = results.get(context.tool_call_id)
            if result is None or result.name != name:
                unrecorded.append(f"{name} ({context.tool_call_id})")
                return ToolOutput(content=f"no recorded result for {name}", is_error=True)
            return ToolOutput(
                content=result.content,
                state_updates=result.state_updates,
                interrupt=result.interrupt_data if result.is_interrupt else None,
                is_error=result.is_error,
            )

        return Tool(
            name=name,
            description="answers from a recorded run",
            function=answer,
            parameters={"type": "object", "properties": {}, "additionalProperties": True},
            context_param="context",
        )

    called = {
        c.name
        for trace in traces
        for t in trace.transitions
        for m in t.chain.messages
        for c in m.tool_calls
    }
    return tuple(tool_for(n) for n in sorted({r.name for r in results.values()} | called))
