"""Loading saved runs: a run's rows decoded, and checked against each other.

:func:`load_run` decodes a run as its last checkpoint left it (a :class:`SavedRun`)
and checks what the store keeps twice (the run's row: its status, result and agent
state) against the log of checkpoints, the one source of truth: a copy that does not
match is refused as the mark of an edited or damaged store, before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .._approval import Approval, DecisionError
from .._chain import Callbacks, LLMChain
from .._invariants import check_traces
from .._machine import UnknownMachineError
from .._messages import Message
from .._results import Failed, Interrupted, Ok, Paused, Terminal
from .._serialization import (
    Binder,
    FormatError,
    Models,
    UnknownToolError,
    Unpacker,
    check_format,
    converter,
    parse_json,
)
from .._state import AgentState
from .._tools import Tool
from .._trace import Trace
from .._versions import MachineChangedError, recorded_table
from .._versions import trace_identity as _identity
from ._base import RUN_STATUS, RunStatus, Store, StoredRun

__all__ = ["SAVED_OPTIONS", "SavedRun", "load_run"]

#: The options a checkpoint keeps; ``should_pause``, ``middleware`` and
#: ``extra_steps`` are code, passed again on resume.
SAVED_OPTIONS: Final = ("until_tool", "require_tool_success", "max_runs")

#: The statuses of a run that is over: the store refuses to claim or write it again.
_FINISHED: Final = ("ok", "error")


@attrs.frozen
class SavedRun:
    """A run as its last checkpoint left it, decoded.

    ``traces`` has one trace per segment: a run resumed after it ended
    (paused, interrupted) goes on in a new segment that enters the machine
    afresh, so each trace is a path of the machine.
    """

    run_id: str
    status: RunStatus
    #: The machine state of the last boundary (a terminal when the run ended).
    state: str
    #: The chain at that boundary (the result's chain when the run ended).
    chain: LLMChain
    traces: tuple[Trace, ...]
    options: Mapping[str, Any]
    result: Terminal | None
    agent_state: AgentState | None
    #: The run's message and context tables, which the chains share.
    messages: tuple[Message, ...] = attrs.field(repr=False, eq=False)
    contexts: tuple[Mapping[str, Any], ...] = attrs.field(repr=False, eq=False)
    #: The store's head of the run when it was read: a resume claims the run only
    #: if it is still there (:attr:`StoredRun.head <agentfsm.store.StoredRun.head>`).
    head: str | None = attrs.field(default=None, repr=False, eq=False)
    #: The run this one was forked from and the step it was forked at
    #: (:func:`fork_run`), or None for a run started afresh.
    forked_from: tuple[str, int] | None = None

    @property
    def trace(self) -> Trace:
        """The last segment's trace."""
        return self.traces[-1]

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def steps(self) -> int:
        return sum(len(t) for t in self.traces)


def _saved_options(value: Any) -> dict[str, Any]:
    """A segment's saved options, checked: a checkpoint is data, not code."""
    options = dict(value or {}) if isinstance(value, Mapping | None) else None
    if options is None or not set(options) <= set(SAVED_OPTIONS):
        raise FormatError(f"Saved options {value!r} are not {list(SAVED_OPTIONS)}")
    names = options.get("until_tool", [])
    runs = options.get("max_runs", 1)
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or not isinstance(options.get("require_tool_success", False), bool)
        or isinstance(runs, bool)
        or not isinstance(runs, int)
        or runs < 1
    ):
        raise FormatError(f"Saved options {value!r} are malformed")
    return options


def load_run(
    store: Store,
    run_id: str,
    *,
    models: Models | None = None,
    tools: Sequence[Tool] = (),
    callbacks: Sequence[Callbacks] = (),
    strict: bool = True,
) -> SavedRun:
    """The saved run ``run_id``, bound as :func:`agentfsm.serialization.load` binds.

    Each segment must be a path of the machine it names (:class:`FormatError`
    if not, :class:`~agentfsm.machine.UnknownMachineError` for a machine not
    declared in this process).
    """
    stored = store.read(run_id)
    binder = Binder(models, tools, callbacks, strict)
    try:
        unpacker = Unpacker(
            [parse_json(m) for m in stored.messages],
            [parse_json(c) for c in stored.contexts],
            binder,
        )
        headers, firsts, traces = decode_segments(stored, unpacker)
        if not traces:
            raise FormatError(f"Run {run_id!r} has no segment: the store is damaged")
        header, first = headers[-1], firsts[-1]
        result: Terminal | None = None
        if stored.result is not None:
            decoded = unpacker.result(parse_json(stored.result))
            if not isinstance(decoded, Ok | Paused | Interrupted | Failed):
                raise FormatError(f"Run {run_id!r} has a result that is not terminal")
            result = decoded
        table = recorded_table(traces, headers)
        check_traces(traces, table, ended=result is not None)
        forked_from = _fork_point(headers[0])
        agent_state = None
        if result is not None:
            _check_logged(run_id, result, traces[-1])
            if stored.agent_state is not None:
                agent_state = converter.structure(parse_json(stored.agent_state), AgentState)
                _check_agent_state(run_id, agent_state, result)
        options = _saved_options(header.get("options"))
    except (FormatError, UnknownToolError, UnknownMachineError, MachineChangedError):
        raise
    except Exception as exc:
        raise FormatError(f"Run {run_id!r} cannot be read: {type(exc).__name__}: {exc}") from exc
    status: RunStatus = RUN_STATUS[type(result)] if result is not None else "running"
    if stored.status != status and {stored.status, status} & set(_FINISHED):
        # The store refuses to run a run its row says is over: the row and the log agree on that.
        raise _edited(run_id, f"the run's status ({stored.status!r}; its log says {status!r})")
    last = traces[-1]
    if result is not None:
        chain = result.chain
    elif last.transitions:
        chain = last.transitions[-1].chain
    else:
        chain = first
    return SavedRun(
        run_id=run_id,
        status=status,
        state=last.terminal or last.entry,
        chain=chain,
        traces=tuple(traces),
        options=options,
        result=result,
        agent_state=agent_state,
        messages=tuple(unpacker.messages),
        contexts=tuple(unpacker.contexts),
        head=stored.head,
        forked_from=forked_from,
    )


def decode_segments(
    stored: StoredRun, unpacker: Unpacker
) -> tuple[list[Mapping[str, Any]], list[LLMChain], list[Trace]]:
    """A stored run's segments decoded: each one's header, first chain and trace."""
    headers: list[Mapping[str, Any]] = []
    firsts: list[LLMChain] = []
    traces: list[Trace] = []
    for header_text, transitions in zip(stored.headers, stored.transitions, strict=True):
        header = parse_json(header_text)
        check_format(header)
        headers.append(header)
        firsts.append(unpacker.chain(header["chain"]))
        traces.append(
            Trace(
                entry=str(header["entry"]),
                transitions=unpacker.transitions([parse_json(t) for t in transitions]),
                machine=str(header["machine"]),
                **_identity(header),
            )
        )
    return headers, firsts, traces


def _fork_point(header: Mapping[str, Any]) -> tuple[str, int] | None:
    """The parent a forked run's first header names, checked (a header is data)."""
    point = header.get("forked_from")
    if point is None:
        return None
    run_id = point.get("run_id") if isinstance(point, Mapping) else None
    step = point.get("step") if isinstance(point, Mapping) else None
    if not isinstance(run_id, str) or type(step) is not int or step < 1:
        raise FormatError(f"A run's fork point {point!r} is not (run id, step)")
    return run_id, step


def _edited(run_id: str, what: str) -> FormatError:
    return FormatError(
        f"Run {run_id!r}: {what} does not match its checkpoints: the store was edited or "
        "is damaged. Nothing was run."
    )


def _check_logged(run_id: str, result: Terminal, last: Trace) -> None:
    """The result's conversation is the one the log's last transition left: the run's row
    is a copy of the log, never a second source."""
    transitions = last.transitions
    if not transitions or tuple(transitions[-1].chain.messages) != tuple(result.chain.messages):
        raise _edited(run_id, "the result's conversation")
    if isinstance(result, Interrupted):
        _check_interrupt(run_id, result.data)


def _check_interrupt(run_id: str, data: Any) -> None:
    """An approval interrupt's data is an approval (:meth:`Approval.of`), else FormatError."""
    if not isinstance(data, Mapping):
        raise _edited(run_id, "the interrupt")
    if not Approval.is_approval(data):
        return
    try:
        Approval.of(data)
    except DecisionError as exc:
        raise FormatError(
            f"Run {run_id!r} has an approval interrupt that is not one: {exc}"
        ) from exc


def _check_agent_state(run_id: str, state: AgentState, result: Terminal) -> None:
    """The saved agent state says what the result says: the conversation (less a system
    prompt), the status, the interrupt, the error's type. An ok run's state is its
    after_model hooks' (they may rewrite it), so only its status is checked."""
    if isinstance(result, Ok):
        if state.status not in ("ok", "error"):
            raise _edited(run_id, "the saved agent state")
        return
    messages = tuple(result.chain.messages)
    if messages and messages[0].role == "system" and tuple(state.messages) == messages[1:]:
        messages = messages[1:]
    same = tuple(state.messages) == messages and state.status == RUN_STATUS[type(result)]
    if isinstance(result, Interrupted):
        same = same and state.interrupt_data == result.data
    elif isinstance(result, Failed):
        same = same and state.error is not None and state.error.type == result.error.type
    if not same:
        raise _edited(run_id, "the saved agent state")
