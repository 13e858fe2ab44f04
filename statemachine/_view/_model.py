"""What the run page shows, as plain JSON: steps, the messages they carry, the outcome.

Each message is written once (a table, equal messages counted as one: a resume
loaded from a file or a store has copies) and each step names the messages of
its chain by runs of indices, so a long run's page grows with its messages,
not with steps times messages. A step that ran child machines carries their runs
(``children``: each with its machine, path, terminal and own steps, nested as deep
as they ran), their messages in the same table. Every value is plain JSON (strings,
numbers, lists, objects): the page's script puts strings on the page as text, never
as markup.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from .._machine import MachineTable
from .._messages import Message, ToolCall, ToolResult
from .._middleware.human_in_the_loop import request_digest
from .._results import Failed, Interrupted, Ok, Paused, Terminal
from .._serialization import converter
from .._trace import Trace, Transition

__all__ = ["page_data"]


class _MessageTable:
    """Messages by index, equal ones once; chains as runs ``[[start, count], ...]``.

    A step's conversation is mostly the last step's and a few more messages, so
    :meth:`runs` goes on from the last one it wrote when that is a prefix: a run
    of many steps costs a pass of identity checks per step, not a lookup per message.
    """

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._by_key: dict[str, int] = {}
        self._by_id: dict[int, tuple[Message, int]] = {}
        self._last: tuple[Sequence[Message], list[list[int]]] = ((), [])

    def index(self, message: Message) -> int:
        known = self._by_id.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        key = json.dumps(converter.unstructure(message, Message), sort_keys=True, default=str)
        index = self._by_key.setdefault(key, len(self.messages))
        if index == len(self.messages):
            self.messages.append(message)
        self._by_id[id(message)] = (message, index)
        return index

    def runs(self, messages: Sequence[Message]) -> list[list[int]]:
        before, runs = self._last
        if messages is before:
            return [list(r) for r in runs]
        if len(before) <= len(messages) and all(map(operator.is_, before, messages)):
            runs, rest = [list(r) for r in runs], messages[len(before) :]
        else:
            runs, rest = [], messages
        for message in rest:
            index = self.index(message)
            if runs and runs[-1][0] + runs[-1][1] == index:
                runs[-1][1] += 1
            else:
                runs.append([index, 1])
        self._last = (messages, runs)
        return runs


def _plain(value: Any) -> Any:
    """``value`` as plain JSON (anything else as its ``str``), or its ``str`` if too deep."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (ValueError, TypeError, RecursionError):
        return str(value)


def _pretty(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (ValueError, TypeError, RecursionError):
        return str(value)


def _call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.call_id,
        "name": call.name,
        "arguments": _pretty(dict(call.arguments)),
        "invalid": call.invalid_arguments,
    }


def _result(result: ToolResult) -> dict[str, Any]:
    return {
        "id": result.tool_call_id,
        "name": result.name,
        "text": result.text,
        "error": result.is_error,
        "interrupt": result.is_interrupt,
        "updates": None if not result.state_updates else _pretty(dict(result.state_updates)),
    }


def _message(message: Message) -> dict[str, Any]:
    usage = message.metadata.get("usage")
    model = message.metadata.get("model")
    return {
        "role": message.role,
        "text": message.text,
        "status": message.status,
        "model": None if model is None else str(model),
        "usage": _plain(usage) if isinstance(usage, Mapping) else None,
        "calls": [_call(c) for c in message.tool_calls],
        "results": [_result(r) for r in message.tool_results],
    }


def _outcome(result: Terminal | None, last: Transition) -> dict[str, Any]:
    """How a segment ended: its terminal and what a reader must know about it."""
    out: dict[str, Any] = {"terminal": last.dest}
    reason = last.chain.custom_context.get("pause_reason")
    if last.dest == "paused" and reason is not None:
        out["reason"] = str(reason)
    match result:
        case Failed(_, error):
            out["error"] = {"type": error.type, "message": error.message}
        case Interrupted(_, data):
            requests = _requests(data)
            if requests:
                out["requests"] = requests
            else:
                out["interrupt"] = _pretty(dict(data))
        case Paused(chain, _) if chain.custom_context.get("pause_reason") is not None:
            out["reason"] = str(chain.custom_context["pause_reason"])
        case Ok(chain, tool_result):
            if tool_result is not None:
                out["answer"] = f"{tool_result.name}: {tool_result.text}"
            elif chain.last_message is not None:
                out["answer_message"] = chain.last_message
    return out


def unanswered_calls(trace: Trace) -> list[ToolCall] | None:
    """The tool calls an interrupted segment left unanswered (None if it did not interrupt)."""
    if not trace.transitions or trace.terminal != "interrupted":
        return None
    # In order: a call answered earlier does not answer a later call of the same id (a
    # scripted model numbers its calls afresh in each process that resumes the run).
    pending: dict[str, ToolCall] = {}
    for m in trace.transitions[-1].chain.messages:
        if m.role == "assistant":
            pending.update((c.call_id, c) for c in m.tool_calls)
        for r in m.tool_results:
            pending.pop(r.tool_call_id, None)
    return list(pending.values())


def _requests(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An approval interrupt's action requests, each with the digest a decision may carry."""
    requests = data.get("action_requests")
    if not isinstance(requests, list | tuple):
        return []
    configs = data.get("review_configs")
    out = []
    for request in requests:
        if not isinstance(request, Mapping):
            continue
        name = request.get("tool_name")
        config = configs.get(name) if isinstance(configs, Mapping) else None
        allowed = config.get("allowed_decisions") if isinstance(config, Mapping) else None
        out.append(
            {
                "tool": str(name),
                "call_id": str(request.get("tool_call_id")),
                "arguments": _pretty(request.get("arguments")),
                "description": None
                if request.get("description") is None
                else str(request.get("description")),
                "allowed": [str(a) for a in allowed] if isinstance(allowed, list) else None,
                "digest": request_digest(request),
            }
        )
    return out


def _decisions(pending: Sequence[ToolCall], trace: Trace) -> list[dict[str, Any]]:
    """What a human decided on an interrupt, read from the segment that answered it.

    The answer enters at the approval state, which applies it; ``executing`` carries the
    decisions out and names them (its detail's ``decisions``), so the results (and an
    edit's arguments, rewritten in the call) are in the first chain that holds every
    answered call's result. A run saved before decisions were recorded reads them from
    the results alone: a rejected call's result says so; any other ran.
    """
    decided: Mapping[str, Any] = {}
    results: dict[str, ToolResult] = {}
    calls = {c.call_id: c for c in pending}
    for transition in trace.transitions:
        # From the message that asked on: a call id may repeat in one conversation (a
        # scripted model numbers its calls afresh in each process that resumes the run),
        # and an earlier call's result under the same id is not this one's.
        everything = transition.chain.messages
        asks = [
            k for k, m in enumerate(everything) if any(c.call_id in calls for c in m.tool_calls)
        ]
        messages = tuple(everything)[asks[-1] :] if asks else tuple(everything)
        results = {r.tool_call_id: r for m in messages for r in m.tool_results}
        if all(c.call_id in results for c in pending):
            calls.update(
                {c.call_id: c for m in messages for c in m.tool_calls if c.call_id in calls}
            )
            detail = transition.detail
            said = detail.get("decisions") if isinstance(detail, Mapping) else None
            decided = said if isinstance(said, Mapping) else {}
            break
    out = []
    for asked in pending:
        result = results.get(asked.call_id)
        if result is None:
            continue
        call = calls[asked.call_id]
        said = decided.get(call.call_id)
        rejected = (
            said == "reject"
            if said is not None
            else result.text == f"Tool call '{result.name}' was rejected by a human reviewer."
        )
        out.append(
            {
                "tool": call.name,
                "call_id": call.call_id,
                "arguments": _pretty(dict(call.arguments)),
                "decision": "rejected" if rejected else "approved",
                "result": result.text,
                "error": result.is_error,
            }
        )
    return out


def _version(trace: Trace | None, table: MachineTable) -> str:
    """The machine version and fingerprint the run recorded (the table's, for an older run)."""
    version = (
        table.version if trace is None or trace.machine_version is None else trace.machine_version
    )
    fingerprint = (trace and trace.machine_fingerprint) or table.fingerprint
    return f"v{version} ({fingerprint})"


def _child(trace: Trace, known: _MessageTable) -> dict[str, Any]:
    """A child run a step made (a child machine's, a subagent's): its machine, path and
    end, and its own steps, each with the child runs it made in turn."""
    steps = []
    for t in trace:
        step: dict[str, Any] = {
            "source": t.source,
            "trigger": t.trigger,
            "dest": t.dest,
            "elapsed": t.elapsed,
            "detail": _plain(dict(t.detail)) if t.detail else None,
            "messages": known.runs(t.chain.messages),
        }
        if t.children:
            step["children"] = [_child(child, known) for child in t.children]
        steps.append(step)
    return {
        "machine": trace.machine,
        "version": trace.machine_version,
        "entry": trace.entry,
        "path": trace.states,
        "terminal": trace.terminal,
        "elapsed": sum(t.elapsed for t in trace),
        "steps": steps,
    }


def page_data(
    traces: Sequence[Trace],
    table: MachineTable,
    *,
    title: str,
    run_id: str | None = None,
    result: Terminal | None = None,
    clock: Sequence[float | None] = (),
) -> dict[str, Any]:
    """The page's data for ``traces`` (a run's segments, in order) on ``table``.

    ``result`` is the last segment's result when it is known (a saved run's);
    ``clock`` the wall-clock time (seconds since the epoch) each step was saved at,
    by the step's number in the whole run, when the store keeps it.
    """
    known = _MessageTable()
    edge_index = {(e.source, e.trigger, e.dest): k for k, e in enumerate(table.edges)}
    steps: list[dict[str, Any]] = []
    segments: list[dict[str, Any]] = []
    at = 0.0
    pending: list[ToolCall] | None = None
    for number, trace in enumerate(traces):
        segment: dict[str, Any] = {
            "entry": trace.entry,
            "first": len(steps),
            "steps": len(trace),
            "version": _version(trace, table),
            "migrated_from": trace.migrated_from,
        }
        if pending:
            segment["decisions"] = _decisions(pending, trace)
        pending = unanswered_calls(trace)
        for index, t in enumerate(trace):
            context = t.chain.custom_context
            steps.append(
                {
                    "segment": number,
                    "index": index,
                    "source": t.source,
                    "trigger": t.trigger,
                    "dest": t.dest,
                    "edge": edge_index.get((t.source, t.trigger, t.dest), -1),
                    "elapsed": t.elapsed,
                    "at": at,
                    "wall": clock[len(steps)] if len(steps) < len(clock) else None,
                    "detail": _plain(dict(t.detail)) if t.detail else None,
                    "state": _plain(context.get("state")) if context.get("state") else None,
                    "messages": known.runs(t.chain.messages),
                }
            )
            if t.children:
                steps[-1]["children"] = [_child(child, known) for child in t.children]
            at += t.elapsed
        if trace.transitions and trace.terminal in table.terminals:
            last = number == len(traces) - 1
            segment["outcome"] = _outcome(result if last else None, trace.transitions[-1])
        segments.append(segment)
    for segment in segments:
        outcome = segment.get("outcome")
        if outcome is not None and "answer_message" in outcome:
            # The answer is the last message: named by its index, not written twice.
            outcome["answer_message"] = known.index(outcome["answer_message"])
    messages = [_message(m) for m in known.messages]
    usage: dict[str, int] = {}
    for m in messages:
        for key, value in (m["usage"] or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                usage[key] = usage.get(key, 0) + value
    return {
        "title": title,
        "run_id": run_id,
        "machine": table.name,
        "version": _version(traces[-1] if traces else None, table),
        "terminals": list(table.terminals),
        "segments": segments,
        "steps": steps,
        "messages": messages,
        "usage": usage,
        "elapsed": at,
    }
