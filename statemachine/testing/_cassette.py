"""Cassettes: a model's requests and replies, recorded once and replayed in tests.

``record(model, "run.json")`` wraps any chat model and writes each request it is
sent (the conversation and the tools offered) and what it answered (a reply or
a ``ChainError``), with API keys and authorization headers redacted.
``Cassette("run.json")`` is a chat model that gives those answers back, in
order, and checks that each request is the one recorded: one that differs
fails with a diff of the two. Messages are written as
:mod:`agentfsm.serialization` writes them.

Modes: ``strict`` (the default) refuses any request the cassette lacks;
``new_episodes`` asks ``model`` for requests past the recorded ones and adds
them to the file.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from agentfsm.providers import WrapperModel

from .._approval import DECIDED
from .._errors import ChainError
from .._messages import Message, MessageDelta
from .._serialization import dump, load
from .._tools import Tool
from .._trace import Trace

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel, DeltaHandler

__all__ = [
    "Cassette",
    "CassetteMismatchError",
    "Recorder",
    "cassette_from_traces",
    "record",
    "redact",
    "regression_test",
]

FORMAT: Final = "agentfsm-cassette/1"
REDACTED: Final = "[REDACTED]"
Mode = Literal["strict", "new_episodes"]

#: Keys whose values are secrets, whatever they hold (compared lower-cased).
_SECRET_KEYS: Final = frozenset(
    {
        "api_key",
        "api-key",
        "apikey",
        "x-api-key",
        "x-goog-api-key",
        "authorization",
        "proxy-authorization",
        "access_token",
        "secret",
        "client_secret",
        "password",
    }
)
#: Secrets written inside text: bearer tokens and the usual key shapes.
_SECRET_TEXT: Final = re.compile(
    r"(?i:bearer\s+)[A-Za-z0-9._~+/=-]{8,}"
    r"|\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"
    r"|\bAIza[0-9A-Za-z_-]{30,}"
)


def redact(value: Any) -> Any:
    """``value`` (a JSON value) with secrets replaced by ``[REDACTED]``."""
    if isinstance(value, Mapping):
        return {
            k: REDACTED if str(k).lower() in _SECRET_KEYS else redact(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return _SECRET_TEXT.sub(REDACTED, value)
    return value


class CassetteMismatchError(ChainError):
    """A request the cassette did not record, or not in that place; the message is a diff.

    The model call fails with it (so does the run); :meth:`Cassette.check`, and
    the ``cassette`` fixture at the end of a test, raise the first one again.
    """

    def __init__(self, message: str) -> None:
        super().__init__("cassette_mismatch", message, retryable=False)


def _tool(t: Tool) -> dict[str, Any]:
    return {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}


def _request(messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
    """A request as the cassette writes it (and compares it): JSON, redacted."""
    value = {
        "messages": [dump(m)["value"] for m in messages],
        "tools": [_tool(t) for t in tools],
    }
    return redact(json.loads(json.dumps(value, ensure_ascii=False)))  # type: ignore[no-any-return]


def _answer(reply: Message | ChainError) -> dict[str, Any]:
    if isinstance(reply, ChainError):
        return {"error": redact(dump(reply))}
    return {"reply": redact(dump(reply))}


def _replayed(episode: Mapping[str, Any]) -> Message | ChainError:
    if "error" in episode:
        error: ChainError = load(episode["error"], ChainError)
        return error
    message: Message = load(episode["reply"], Message)
    return message


def _read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a cassette (format {FORMAT!r})")
    return data


def _write(path: Path, model: str, episodes: Sequence[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "model": model, "episodes": list(episodes)}
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


async def _taped(
    model: ChatModel,
    messages: Sequence[Message],
    tools: Sequence[Tool],
    on_delta: DeltaHandler | None,
    request: dict[str, Any],
    tape: Callable[[dict[str, Any], Message | ChainError], None],
) -> Message:
    """``model``'s answer to ``request``, taped whether it is a reply or an error."""
    try:
        reply = await model.complete(messages, tools, on_delta=on_delta)
    except ChainError as error:
        tape(request, error)
        raise
    tape(request, reply)
    return reply


class Recorder(WrapperModel):
    """The wrapped model, each request and answer written to ``path`` as it happens."""

    __slots__ = ("episodes", "path")

    def __init__(self, wrapped: ChatModel, path: str | Path) -> None:
        super().__init__(wrapped)
        self.path = Path(path)
        self.episodes: list[dict[str, Any]] = []

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        return await _taped(
            self.wrapped, messages, tools, on_delta, _request(messages, tools), self._tape
        )

    def _tape(self, request: dict[str, Any], answer: Message | ChainError) -> None:
        self.episodes.append({"request": request, **_answer(answer)})
        _write(self.path, self.name, self.episodes)


def record(model: ChatModel, path: str | Path) -> Recorder:
    """``model``, recording into the cassette at ``path`` (written anew, call by call)."""
    return Recorder(model, path)


class Cassette:
    """A chat model that replays the cassette at ``path``, checking each request.

    ``mode="new_episodes"`` sends the requests past the recorded ones to
    ``model`` and records them too; ``strict`` fails them.
    """

    def __init__(
        self, path: str | Path, mode: Mode = "strict", *, model: ChatModel | None = None
    ) -> None:
        if mode not in ("strict", "new_episodes"):
            raise ValueError(f"mode is 'strict' or 'new_episodes', got {mode!r}")
        if mode == "new_episodes" and model is None:
            raise ValueError("mode='new_episodes' needs the model= that answers new requests")
        self.path = Path(path)
        self.mode: Mode = mode
        self.model = model
        data = _read(self.path) if self.path.exists() or mode == "strict" else None
        self.model_name: str = (
            str(data["model"]) if data else str(getattr(model, "name", "cassette"))
        )
        self.episodes: list[dict[str, Any]] = list(data["episodes"]) if data else []
        #: How many requests it has answered.
        self.played = 0
        #: The mismatches met, in order (each also failed its model call).
        self.mismatches: list[CassetteMismatchError] = []

    @property
    def name(self) -> str:
        return self.model_name

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        request = _request(messages, tools)
        index = self.played
        self.played += 1
        if index >= len(self.episodes):
            return await self._new(index, request, messages, tools, on_delta)
        recorded = self.episodes[index]["request"]
        if _names_only(recorded):
            request = {**request, "tools": [{"name": t["name"]} for t in request["tools"]]}
        if recorded != request:
            self._mismatch(
                f"request {index + 1} differs from the one recorded in {self.path}:\n"
                + _diff(recorded, request)
            )
        answer = _replayed(self.episodes[index])
        if isinstance(answer, ChainError):
            raise answer
        if on_delta is not None and answer.text:
            on_delta(MessageDelta(content=answer.text))
        return answer

    async def _new(
        self,
        index: int,
        request: dict[str, Any],
        messages: Sequence[Message],
        tools: Sequence[Tool],
        on_delta: DeltaHandler | None,
    ) -> Message:
        if self.mode == "strict" or self.model is None:
            last = json.dumps(request["messages"][-1:], indent=2, ensure_ascii=False)
            self._mismatch(
                f"request {index + 1} is not in {self.path}, which recorded "
                f"{len(self.episodes)}; it ends with:\n{last}\n"
                "Record it again, or replay with mode='new_episodes'."
            )
        assert self.model is not None
        return await _taped(self.model, messages, tools, on_delta, request, self._tape)

    def _tape(self, request: dict[str, Any], answer: Message | ChainError) -> None:
        self.episodes.append({"request": request, **_answer(answer)})
        _write(self.path, self.model_name, self.episodes)

    def _mismatch(self, message: str) -> None:
        error = CassetteMismatchError(message)
        self.mismatches.append(error)
        raise error

    def check(self) -> None:
        """Raise the first mismatch met, if any: a test that replayed the cassette calls it."""
        if self.mismatches:
            raise self.mismatches[0]

    def __repr__(self) -> str:
        return f"<Cassette {str(self.path)!r} {self.mode} {self.played}/{len(self.episodes)}>"


def _diff(recorded: Any, request: Any) -> str:
    old = json.dumps(recorded, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    new = json.dumps(request, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    lines = difflib.unified_diff(old, new, "recorded", "requested", lineterm="", n=2)
    return "\n".join(lines)


def _names_only(request: Mapping[str, Any]) -> bool:
    """A request exported from a saved run knows its tools by name only."""
    return any(set(t) == {"name"} for t in request.get("tools", ()))


def _calls_model(trace: Trace, state: str) -> bool:
    # a cycle: the machine's module is below the cassette's faces
    from .._effects import effects_of

    # a cycle: the machine's module is below the cassette's faces
    from .._machine import machine_named

    table = machine_named(trace.machine, version=trace.machine_version)
    return any("model" in (effects_of(step) or ()) for step in table.steps.get(state, ()))


def cassette_from_traces(
    traces: Trace | Sequence[Trace], path: str | Path, *, tools: Sequence[Tool] = ()
) -> int:
    """Write the model calls of a saved run's ``traces`` to a cassette; how many.

    Each transition out of a state that calls the model (by its steps' declared
    effects) and ends in a new assistant reply is one request (the conversation
    before the reply) and that reply. ``tools`` (the agent's) are written in full;
    without them a tool is known by its name and compared by name on replay. A
    model call a state makes apart from the conversation (a summary, say) is not
    in the trace, so a cassette made this way lacks it.
    """
    runs = [traces] if isinstance(traces, Trace) else list(traces)
    by_name = {t.name: t for t in tools}
    episodes: list[dict[str, Any]] = []
    model = "cassette"
    for trace in runs:
        before: Message | None = None
        for transition in trace:
            reply = transition.chain.last_message
            made = reply is not None and reply is not before and reply.role == "assistant"
            if made and reply is not None and _calls_model(trace, transition.source):
                offered = [
                    _tool(by_name[t.name]) if t.name in by_name else {"name": t.name}
                    for t in transition.chain.tools
                ]
                messages = list(transition.chain.messages)[:-1]
                request = _request(messages, ())
                request["tools"] = redact(offered)
                episodes.append({"request": request, **_answer(reply)})
                model = str(reply.metadata.get("model", model))
            before = reply
    _write(Path(path), model, episodes)
    return len(episodes)


#: The result a rejected call gets (the approval middleware's words).
_REJECTED: Final = "Tool call '{name}' was rejected by a human reviewer."


def regression_test(
    traces: Trace | Sequence[Trace],
    cassette: str | Path,
    *,
    agent: str,
    test: str | Path | None = None,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The text of a pytest file that replays ``cassette`` through ``agent``
    (``module:factory``, a function of the model returning the Agent) and asserts
    the run takes each of ``traces``' paths again, one per segment.

    A segment that paused is paused where it did (the run's ``should_pause`` at
    that step, or, for a pause the host requested, ``request_pause`` before it);
    the next is started from where it ended, as resuming it does. One that was
    interrupted for approval is answered with the decisions its results show:
    the decisions its approval state applied, an edit with the arguments that ran (a
    run saved before answers entered the machine shows only ``reject`` or ``approve``
    in its results: change an edit there by hand).
    ``options`` (``Agent.start``'s, such as ``until_tool``) go to every segment.

    ``test`` is where the file will be written: the test then finds ``cassette``
    from its own folder, wherever either is. Without it, a relative ``cassette``
    is taken as relative to the test file's folder, and an absolute one is
    written as it is.
    """
    runs = [traces] if isinstance(traces, Trace) else list(traces)
    if not runs:
        raise ValueError("regression_test needs the run's traces, one per segment; got none")
    module, _, factory = agent.partition(":")
    first = next(
        (m.text for t in runs[0] for m in t.chain.messages if m.role == "user"),
        "",
    )
    where = Path(cassette)
    if test is not None:
        try:
            where = Path(os.path.relpath(where.resolve(), Path(test).resolve().parent))
        except ValueError:  # another drive: only the absolute path finds it
            where = where.resolve()
    if where.is_absolute():
        cassette_expr = f"Path({where.as_posix()!r})"
    else:
        cassette_expr = f"Path(__file__).parent / {where.as_posix()!r}"
    extra = "" if not options else ", **OPTIONS"
    body: list[str] = []
    needs_pause_at = needs_asyncio = False
    for index, trace in enumerate(runs):
        ends = trace.terminal or "(not ended)"
        body.append(
            f"    # segment {index + 1} of {len(runs)}: entered at {trace.entry}, ended {ends}"
        )
        before = runs[index - 1] if index else None
        if before is None:
            state = f"AgentState.of({first!r})"
            start = "agent.start({state}{pause}" + extra + ")"
        elif before.terminal == "interrupted":
            decided = _decided(before, trace)
            body.append(f"    decided = {decided!r}")
            body.append("    ids = run.agent_state.interrupt_data['hitl_tool_call_ids']")
            state = "run.agent_state, [decided[i] for i in ids]"
            # the recorded decisions, as they were made: bound to the request at hand
            start = "asyncio.run(agent.start_resume({state}, unbound=True{pause}" + extra + "))"
            needs_asyncio = True
        else:
            state = "run.agent_state"
            start = "agent.start({state}{pause}" + extra + ")"
        last = trace.transitions[-1] if trace.transitions else None
        paused = last is not None and last.dest == "paused"
        # a pause the run's work asked for (should_pause), or one from outside its work
        # (requested by the host, or a cancellation): paused there by request_pause
        outside = last is not None and bool({"requested", "cancelled"} & set(last.detail or {}))
        if paused and not outside:
            needs_pause_at = True
            body.append(f"    pause = _PauseAt({len(trace)})")
            body.append(
                "    run = pause.run = " + start.format(state=state, pause=", should_pause=pause")
            )
            body.append("    run.run_sync()")
        elif paused:
            body.append("    run = " + start.format(state=state, pause=""))
            body.append(f"    while len(run.trace) < {len(trace) - 1}:")
            body.append("        run.step_sync()")
            body.append("    run.request_pause('paused here, as the saved run was')")
            body.append("    run.run_sync()")
        else:
            body.append("    run = " + start.format(state=state, pause=""))
            body.append("    run.run_sync()")
        body.append(f"    assert_path(run, {trace.path!r})")
    body.append("    model.check()")
    head = [
        '"""A saved run, replayed from its cassette: each segment must take its path again."""',
        "",
    ]
    if needs_asyncio:
        head.append("import asyncio")
    head += [
        "from pathlib import Path",
        "",
        "from agentfsm import AgentState",
        "from agentfsm.testing import Cassette, assert_path",
        f"from {module} import {factory}",
        "",
        f"CASSETTE = {cassette_expr}",
    ]
    if options:
        head.append(f"OPTIONS = {dict(options)!r}")
    if needs_pause_at:
        head += [
            "",
            "",
            "class _PauseAt:",
            '    """should_pause of a run that paused at step ``step``: true while it works."""',
            "",
            "    def __init__(self, step):",
            "        self.step, self.run = step, None",
            "",
            "    def __call__(self):",
            "        return self.run is not None and len(self.run.trace) + 1 == self.step",
        ]
    head += [
        "",
        "",
        "def test_saved_run_takes_its_path_again():",
        "    model = Cassette(CASSETTE)",
        f"    agent = {factory}(model)",
    ]
    return "\n".join([*head, *body]) + "\n"


def _decided(interrupted: Trace, answered: Trace) -> dict[str, dict[str, Any]]:
    """The decisions a saved run's answer to an approval interrupt took, by call id: the
    ones its approval state applied (an edit with the arguments that ran), or, for a run
    saved before answers entered the machine, those the tool message the resume added
    shows."""
    if answered.transitions:
        applied = answered.transitions[0].chain
        decided = applied.custom_context.get(DECIDED)
        reply = applied.last_message
        if isinstance(decided, Mapping) and reply is not None:
            calls = {c.call_id: c for c in reply.tool_calls}
            out: dict[str, dict[str, Any]] = {}
            for call_id, kind in decided.items():
                out[call_id] = {"type": kind}
                if kind == "edit" and call_id in calls:
                    out[call_id]["arguments"] = dict(calls[call_id].arguments)
            return out
    asked = interrupted.transitions[-1].chain.messages if interrupted.transitions else ()
    after = answered.transitions[0].chain.messages if answered.transitions else ()
    if len(after) <= len(asked) or after[len(asked)].role != "tool":
        raise ValueError(
            f"The segment entered at {answered.entry} resumed an interrupt without the "
            "tool message an approval adds: its answer is not in the saved run, so it "
            "cannot be replayed"
        )
    return {
        r.tool_call_id: {"type": "reject" if r.text == _REJECTED.format(name=r.name) else "approve"}
        for r in after[len(asked)].tool_results
    }
