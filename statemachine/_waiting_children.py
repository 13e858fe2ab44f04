"""A subagent that waits: its interrupt, the answer that resumes it, and its run saved
beside a saved parent.

A subagent's approval request interrupts its parent (interrupt type ``"subagent"``,
naming it, the child's state packed in). The resume re-enters the parent with the
waiting call's result taken out and the child's answer carried in
(:func:`answer_subagents`): the call runs again at ``executing`` and its child goes on
where it waited. A checkpointed parent saves each child run beside it
(:func:`child_run_id`), so a resume after a crash goes on from the child's own
checkpoint instead of running its calls again. :func:`resume_subagents` answers a
waiting child outside the parent's machine, for an engine that records that answer
as a step of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ._answers import check_approval
from ._approval import ANSWER, Approval, Decision
from ._child_runs import _adopt, _run_child
from ._messages import ToolResult
from ._run import Run
from ._state import AgentState
from ._tools import ToolContext, ToolOutput
from ._trace import Trace

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = [
    "SUBAGENT",
    "SUBAGENT_ANSWERS",
    "answer_subagents",
    "check_answer",
    "child_run_id",
    "resume_subagents",
]

#: The interrupt type of a subagent's request, as the parent's interrupt data names it.
SUBAGENT: Final = "subagent"


#: The key of the answers a resume carries to waiting subagents (``{call_id: ...}``).
SUBAGENT_ANSWERS: Final = "subagents"


def _answer_of(state: AgentState) -> str:
    """A child's final answer: its target tool's result, or its last reply's text."""
    if state.tool_result is not None:
        return state.tool_result.text
    for message in reversed(state.messages):
        if message.role == "assistant":
            return message.text
    return ""


def _requests(data: Mapping[str, Any]) -> list[Any]:
    """The innermost approval requests of an interrupt, for a reviewer to read."""
    requests = data.get("action_requests")
    return list(requests) if isinstance(requests, list | tuple) else []


def _parent_store(parent: Run | None) -> tuple[Any, str] | None:
    """The store and run id the parent run checkpoints to, if it does."""
    if parent is None:
        return None
    from .store import Checkpointer  # only a checkpointed parent reaches here

    for hook in parent.hooks:
        if isinstance(hook, Checkpointer):
            return hook.store, hook.run_id
    return None


def child_run_id(parent_run_id: str, tool_call_id: str) -> str:
    """The id a subagent's child run is saved under, in its parent's store."""
    return f"{parent_run_id}/{tool_call_id}"


def _save_child(child: Run, parent: Run | None, context: ToolContext | None) -> None:
    """Checkpoint ``child`` beside its checkpointed parent, so a resume after a crash goes
    on where the child was instead of running its calls again."""
    where = _parent_store(parent)
    if where is None or context is None:
        return
    # a cycle: the store and the resume side import the agent's modules
    from .store import checkpoint

    store, run_id = where
    checkpoint(child, store, run_id=child_run_id(run_id, context.tool_call_id))


def _saved_child(parent: Run | None, context: ToolContext | None) -> Any:
    """The saved child run of this call, when the parent saves its runs and has one."""
    where = _parent_store(parent)
    if where is None or context is None:
        return None
    # a cycle: the store and the resume side import the agent's modules
    from ._errors import RunNotFoundError

    # a cycle: the store and the resume side import the agent's modules
    from .store import load_run

    store, run_id = where
    try:
        return load_run(store, child_run_id(run_id, context.tool_call_id), strict=False)
    except RunNotFoundError:
        return None


def _waiting_answer(context: ToolContext | None) -> Mapping[str, Any] | None:
    """The answer a resume brought this call's waiting child, if it did."""
    if context is None:
        return None
    carried = context.custom_context.get(ANSWER)
    if not isinstance(carried, Mapping):
        return None
    waiting = carried.get(SUBAGENT_ANSWERS)
    if not isinstance(waiting, Mapping):
        return None
    found = waiting.get(context.tool_call_id)
    return found if isinstance(found, Mapping) else None


async def _resume_child(
    name: str,
    agent: Agent,
    parent: Run | None,
    waiting: Mapping[str, Any] | None,
    saved: Any,
) -> str | ToolOutput:
    """Go on with this call's child: from its saved run when the parent's store has it
    (a resume after a crash redoes nothing the child checkpointed), else from the state
    its interrupt carried, with the answer the resume brought."""
    answer = None if waiting is None else waiting.get("answer")
    unbound = bool(waiting and waiting.get("unbound"))
    if saved is not None:
        if saved.status in ("ok", "error") or (saved.status == "interrupted" and answer is None):
            for trace in saved.traces:
                _adopt(parent, trace)
            state = saved.agent_state
            assert state is not None, "an ended saved run keeps its agent state"
            return _outcome(name, state)
        # a cycle: the store and the resume side import the agent's modules
        from ._resume import restore_run

        where = _parent_store(parent)
        assert where is not None, "a saved child is found through its parent's store"
        store = where[0]
        given = answer if saved.status == "interrupted" else None
        child = await restore_run(agent, saved.run_id, store, given, unbound=unbound)
    else:
        assert waiting is not None
        state = _unpacked(waiting.get("state"), name)
        child = await agent.start_resume(state, answer, unbound=unbound)
    _adopt(parent, child.trace)
    await _run_child(child)
    return _outcome(name, child.agent_state)


def _outcome(name: str, state: AgentState) -> str | ToolOutput:
    """The tool's result of a child that ended in ``state``."""
    match state.status:
        case "ok":
            return _answer_of(state)
        case "interrupted":
            data = dict(state.interrupt_data or {})
            interrupt = {
                "type": SUBAGENT,
                "subagent": name,
                "action_requests": _requests(data),
                "request": data,
                "state": _packed(state),
            }
            return ToolOutput(f"The {name} subagent waits for an answer.", interrupt=interrupt)
        case "paused":
            return ToolOutput(
                f"The {name} subagent paused ({state.pause_reason}) before it finished.",
                is_error=True,
            )
    error = state.error
    return ToolOutput(f"The {name} subagent failed: {error}", is_error=True)


def _packed(state: AgentState) -> Any:
    # a cycle: the store and the resume side import the agent's modules
    from ._serialization import converter

    return converter.unstructure(state, AgentState)


def _unpacked(value: Any, name: str) -> AgentState:
    # a cycle: the store and the resume side import the agent's modules
    from ._serialization import FormatError, converter

    try:
        state = converter.structure(value, AgentState)
    except Exception as exc:
        raise FormatError(f"The {name} subagent's saved state is not one: {exc}") from exc
    return state


def _subagent_interrupts(data: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The subagent interrupts of ``data``, in order; None when it is not all of them."""
    if data.get("type") == SUBAGENT:
        return [data]
    if data.get("type") != "multiple_interrupts":
        return None
    found = [i for i in data.get("interrupts") or () if isinstance(i, Mapping)]
    if not found or any(i.get("type") != SUBAGENT for i in found):
        return None
    return found


async def resume_subagents(
    agent: Agent, state: AgentState, answer: Any, *, unbound: bool = False
) -> tuple[AgentState, tuple[Trace, ...]] | None:
    """Hand ``answer`` to the subagent(s) ``state`` waits on; None for another interrupt.

    One waiting subagent takes ``answer`` as its own resume takes it (its approval
    decisions, checked against its request); several take one answer each, in the
    order of the interrupt's ``interrupts``. Each child goes on where it waited (a
    child waiting on its own subagent hands the answer down), and its answer replaces
    the waiting tool result. The state returned runs on from its tool results; the
    traces are the resumed children's, for the parent's next transition.
    """
    interrupts = _subagent_interrupts(state.interrupt_data or {})
    if interrupts is None:
        return None
    answers = _answers_each(interrupts, answer)
    waiting = [
        _waiting(agent, i, given, unbound) for i, given in zip(interrupts, answers, strict=True)
    ]
    children: list[Trace] = []
    for interrupt, (name, child_agent, child_state), given in zip(
        interrupts, waiting, answers, strict=True
    ):
        child = await child_agent.start_resume(child_state, given, unbound=unbound)
        await _run_child(child)
        children.append(child.trace)
        outcome = _outcome(name, child.agent_state)
        call_id = str(interrupt.get("tool_call_id"))
        state = state.replace_tool_result(_result(call_id, name, outcome))
    return state, tuple(children)


def answer_subagents(
    agent: Agent, state: AgentState, answer: Any, *, unbound: bool = False
) -> tuple[AgentState, dict[str, Any]] | None:
    """The state and answer that re-enter the machine at ``executing`` for the subagents
    ``state`` waits on (None for another interrupt): each waiting call's result is taken
    out of the last tool message, so the call runs again, and the answer carries, per
    call, what its child takes and the state it waited in. Checked first: an answer that
    does not fit raises and nothing runs."""
    interrupts = _subagent_interrupts(state.interrupt_data or {})
    if interrupts is None:
        return None
    answers = _answers_each(interrupts, answer)
    carried: dict[str, Any] = {}
    for interrupt, given in zip(interrupts, answers, strict=True):
        _waiting(agent, interrupt, given, unbound)
        carried[str(interrupt.get("tool_call_id"))] = {
            "answer": _plain(given),
            "state": interrupt.get("state"),
            "unbound": unbound,
        }
    last = state.messages[-1] if state.messages else None
    waiting_ids = {r.tool_call_id for r in (last.tool_results if last else ()) if r.is_interrupt}
    if last is None or last.role != "tool" or not set(carried) <= waiting_ids:
        raise ValueError(
            "The run waits on a subagent call that has no waiting result in the last tool "
            "message: the state was edited or belongs to another conversation. Nothing was run."
        )
    kept = tuple(r for r in last.tool_results if r.tool_call_id not in carried)
    messages = state.messages[:-1]
    if kept:
        messages = (*messages, attrs.evolve(last, tool_results=kept))
    return attrs.evolve(state, messages=messages), {SUBAGENT_ANSWERS: carried}


def _answers_each(interrupts: Sequence[Mapping[str, Any]], answer: Any) -> list[Any]:
    if len(interrupts) == 1:
        return [answer]
    if not isinstance(answer, list | tuple) or len(answer) != len(interrupts):
        raise ValueError(
            f"{len(interrupts)} subagents wait: answer with a list of one answer each, "
            "in the order of the interrupt's 'interrupts'"
        )
    return list(answer)


def _plain(value: Any) -> Any:
    """An answer as data (a checkpoint saves it): typed decisions in their wire form."""
    if isinstance(value, Decision):
        return value.to_data()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def check_answer(
    agent: Agent, interrupt: Mapping[str, Any], answer: Any, *, unbound: bool = False
) -> None:
    """Refuse ``answer`` (ValueError) unless it answers the request the subagent
    ``interrupt`` of ``agent``'s run waits on, as a resume checks it: for a host that
    takes answers before it resumes (a durable run's engine)."""
    _waiting(agent, interrupt, answer, unbound)


def _waiting(
    agent: Agent, interrupt: Mapping[str, Any], answer: Any, unbound: bool
) -> tuple[str, Agent, AgentState]:
    """The subagent ``interrupt`` waits on, its agent and its saved state, once ``answer``
    is checked against its request (ValueError before any child runs anything)."""
    name = str(interrupt.get("subagent"))
    # the agent's subagents (SubAgent is the face above this module: found by their agent)
    tools: dict[str, Any] = {
        t.name: t for t in agent.tools if getattr(t, "agent", None) is not None
    }
    tool = tools.get(name)
    if tool is None:
        raise ValueError(
            f"The run waits on the subagent {name!r}, which this agent does not have "
            f"(its subagents: {sorted(tools)})"
        )
    state = _unpacked(interrupt.get("state"), name)
    data = state.interrupt_data
    if (
        state.status != "interrupted"
        or not data
        or data != interrupt.get("request")
        or interrupt.get("action_requests") != _requests(data)
    ):
        raise ValueError(
            f"The {name} subagent's saved state is not the one its request came from; "
            "nothing was run"
        )
    _check_answer(tool.agent, state, data, answer, unbound)
    return name, tool.agent, state


def _check_answer(
    agent: Agent, state: AgentState, data: Mapping[str, Any], answer: Any, unbound: bool
) -> None:
    """Refuse an answer that does not fit the child's request as it stands."""
    if Approval.is_approval(data):
        check_approval(state, agent.tools, agent.middleware, answer, unbound=unbound)
        return
    inner = _subagent_interrupts(data)
    if inner is not None and len(inner) == 1:
        _waiting(agent, inner[0], answer, unbound)


def _result(call_id: str, name: str, outcome: str | ToolOutput) -> ToolResult:
    if isinstance(outcome, str):
        return ToolResult(call_id, name, outcome)
    interrupt = outcome.interrupt
    return ToolResult(
        call_id,
        name,
        outcome.content,
        is_error=outcome.is_error,
        is_interrupt=interrupt is not None,
        interrupt_data=None if interrupt is None else dict(interrupt),
    )
