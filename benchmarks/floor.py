"""The design floor: the Agent row's run written by hand, one layer of design at a time.

One idea: the Agent row's run, written by hand at each layer of its design, held to the
Agent's conversation and counted as ``speed.py`` counts it.

Each rung is a loop doing the observable work of ``speed.py``'s Agent row (the peers'
workload: K model calls asking for ``add`` once each, then the answer), ending with the
same conversation; each adds one layer to the rung before it:

1. ``dicts``: plain dicts as messages, tool calls and results, appended to a list;
2. ``slots``: the same as instances of classes with ``__slots__``;
3. ``attrs``: the same as frozen attrs classes, built by keyword;
4. ``values``: agentfsm's own values: ``Message``, ``ToolCall`` and ``ToolResult``, the
   chain copied through ``add_message``, the tool's binding and result
   (``Tool.invoke``), the library's ``ScriptedModel`` with the Agent row's script;
5. ``traced``: plus the trace: the seven moves of the standard machine per model call,
   each one :class:`~agentfsm.Transition` record and one clock reading, with every
   state's check written inline (the expansions, the failure budget, the reply's status,
   the pause, approvals, answers, state updates, interrupts, the until-tool targets,
   the run count against ``max_runs``). This is the design floor: what a run of this
   design costs with no engine around it;
6. ``engine``: plus the engine's own parts of a move, each once: the standard machine's
   real trigger fired per move, the record of what builds each step's detail when read,
   and the reply's token count: the engine at unit cost, with none of its generality.

Before measuring, every rung is run at a small K and its conversation checked equal to
the Agent's (and the traced rung's moves to the Agent's trace); ``tests/test_floor.py``
does the same in the suite. Counts are ``speed.py``'s: instructions per model call under
callgrind, ``(I(K) - I(2)) / (K - 2)``, each count the median of ``--repeat`` processes;
the Agent row is the median over ``speed.LAYOUTS`` folder layouts (:func:`speed.laid_out`),
the rungs import the same copy of the package from one layout.

``--python PATH`` (repeatable) measures the ladder on that interpreter instead: a venv
per interpreter is built once under the temp folder (``agentfsm-bench/``) with the
package installed (so its dependencies are there), and every count imports this tree's
copy of the package from ``PYTHONPATH``, as the running interpreter's does.

Run from the repository's root, by hand: ``python benchmarks/floor.py`` (about half an
hour on a busy 2-core machine; needs valgrind; each count is written to stderr as it is
taken); ``--markdown`` prints the tables for the docs.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import attrs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

import workload as w  # noqa: E402  (the peers' workload, from the folder above)
from adapters.agentfsm import AGENT, _script, add  # noqa: E402
from speed import LAYOUTS, _copied, _env, laid_out, per_call  # noqa: E402

from agentfsm import (  # noqa: E402
    AgentState,
    LLMChain,
    Message,
    Ok,
    ToolCall,
    ToolContext,
    ToolResult,
    Transition,
    Usage,
)
from agentfsm._approval import ANSWER, DECIDED  # noqa: E402
from agentfsm._modes.standard import STANDARD  # noqa: E402
from agentfsm.providers import ScriptedModel  # noqa: E402
from agentfsm.steps import Continue  # noqa: E402

#: The model's name a reply carries (``ScriptedModel`` writes it into its metadata).
MODEL_NAME = "scripted"
#: The rungs, in order, each with what it adds.
RUNGS = {
    "dicts": "plain dicts as messages and tool calls",
    "slots": "classes with __slots__",
    "attrs": "frozen attrs classes, keyword construction",
    "values": "agentfsm's values: Message, chain copies, Tool.invoke, ScriptedModel",
    "traced": "+ one Transition and one clock reading per move, checks inline (design floor)",
    "engine": "+ the machine's 7 real triggers, step details, token count (engine at unit cost)",
}
DESIGN_FLOOR = "traced"
#: The tool the rungs below agentfsm's values call, as the asyncio floor does.
TOOLS = {w.TOOL_NAME: w.tool_add}


class Ran(NamedTuple):
    """What a rung ends with: its conversation (in its own values) and its moves."""

    messages: Sequence[Any]
    trace: Sequence[Transition] = ()


class Unmodelled(NotImplementedError):
    """A check found what the workload never brings (an expansion, an interrupt...):
    the floor checks for it, as the machine does, but does not act on it."""


# ---------------------------------------------------------------- 1. dicts


async def _dict_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    n, wants_tool = await w.model_turn()
    if n >= 2:
        last = messages[-1]
        results = last["tool_results"] if last["role"] == "tool" else None
        w.check_last_result(n, results[0]["content"] if results else None)
    if wants_tool:
        call = {"call_id": f"call_{n}", "name": w.TOOL_NAME, "arguments": {"a": n, "b": 1}}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [call],
            "tool_results": [],
            "metadata": {"model": MODEL_NAME},
        }
    return {
        "role": "assistant",
        "content": w.final_text(),
        "tool_calls": [],
        "tool_results": [],
        "metadata": {"model": MODEL_NAME},
    }


async def dicts(ctx: w.RunCtx) -> Ran:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": w.PROMPT, "tool_calls": [], "tool_results": [], "metadata": {}}
    ]
    while True:
        reply = await _dict_model(messages)
        messages.append(reply)
        calls = reply["tool_calls"]
        if not calls:
            return Ran(messages)
        results = []
        for call in calls:
            value = await TOOLS[call["name"]](**call["arguments"])
            results.append(
                {"tool_call_id": call["call_id"], "name": call["name"], "content": str(value)}
            )
        messages.append(
            {
                "role": "tool",
                "content": None,
                "tool_calls": [],
                "tool_results": results,
                "metadata": {},
            }
        )


# ---------------------------------------------------------------- 2. slots


class SlotCall:
    __slots__ = ("arguments", "call_id", "name")

    def __init__(self, *, call_id: str, name: str, arguments: dict[str, Any]) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments


class SlotResult:
    __slots__ = ("content", "name", "tool_call_id")

    def __init__(self, *, tool_call_id: str, name: str, content: str) -> None:
        self.tool_call_id = tool_call_id
        self.name = name
        self.content = content


class SlotMessage:
    __slots__ = ("content", "metadata", "role", "tool_calls", "tool_results")

    def __init__(
        self,
        *,
        role: str,
        content: str | None = None,
        tool_calls: tuple[SlotCall, ...] = (),
        tool_results: tuple[SlotResult, ...] = (),
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.role = role
        self.content = content
        self.tool_calls = tool_calls
        self.tool_results = tool_results
        self.metadata = {} if metadata is None else metadata


async def _slot_model(messages: list[SlotMessage]) -> SlotMessage:
    n, wants_tool = await w.model_turn()
    if n >= 2:
        last = messages[-1]
        results = last.tool_results if last.role == "tool" else None
        w.check_last_result(n, results[0].content if results else None)
    if wants_tool:
        call = SlotCall(call_id=f"call_{n}", name=w.TOOL_NAME, arguments={"a": n, "b": 1})
        return SlotMessage(role="assistant", tool_calls=(call,), metadata={"model": MODEL_NAME})
    return SlotMessage(role="assistant", content=w.final_text(), metadata={"model": MODEL_NAME})


async def slots(ctx: w.RunCtx) -> Ran:
    messages = [SlotMessage(role="user", content=w.PROMPT)]
    while True:
        reply = await _slot_model(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return Ran(messages)
        results = []
        for call in reply.tool_calls:
            value = await TOOLS[call.name](**call.arguments)
            results.append(
                SlotResult(tool_call_id=call.call_id, name=call.name, content=str(value))
            )
        messages.append(SlotMessage(role="tool", tool_results=tuple(results)))


# ---------------------------------------------------------------- 3. frozen attrs


@attrs.frozen(kw_only=True)
class AttrsCall:
    call_id: str
    name: str
    arguments: dict[str, Any]


@attrs.frozen(kw_only=True)
class AttrsResult:
    tool_call_id: str
    name: str
    content: str


@attrs.frozen(kw_only=True)
class AttrsMessage:
    role: str
    content: str | None = None
    tool_calls: tuple[AttrsCall, ...] = ()
    tool_results: tuple[AttrsResult, ...] = ()
    metadata: dict[str, Any] = attrs.field(factory=dict)


async def _attrs_model(messages: list[AttrsMessage]) -> AttrsMessage:
    n, wants_tool = await w.model_turn()
    if n >= 2:
        last = messages[-1]
        results = last.tool_results if last.role == "tool" else None
        w.check_last_result(n, results[0].content if results else None)
    if wants_tool:
        call = AttrsCall(call_id=f"call_{n}", name=w.TOOL_NAME, arguments={"a": n, "b": 1})
        return AttrsMessage(role="assistant", tool_calls=(call,), metadata={"model": MODEL_NAME})
    return AttrsMessage(role="assistant", content=w.final_text(), metadata={"model": MODEL_NAME})


async def attrs_values(ctx: w.RunCtx) -> Ran:
    messages = [AttrsMessage(role="user", content=w.PROMPT)]
    while True:
        reply = await _attrs_model(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return Ran(messages)
        results = []
        for call in reply.tool_calls:
            value = await TOOLS[call.name](**call.arguments)
            results.append(
                AttrsResult(tool_call_id=call.call_id, name=call.name, content=str(value))
            )
        messages.append(AttrsMessage(role="tool", tool_results=tuple(results)))


# ---------------------------------------------------------------- 4. agentfsm's values

#: The library's scripted model on the Agent row's script (its own instance).
MODEL = ScriptedModel(_script)


def _chain() -> LLMChain:
    return LLMChain(MODEL, tools=(add,)).add_message(Message.user(w.PROMPT))


async def _results(chain: LLMChain, reply: Message) -> tuple[ToolResult, ...]:
    """The reply's calls run through the tools' own binding (``Tool.invoke``)."""
    state = chain.custom_context.get("state") or {}
    results = []
    for call in reply.tool_calls:
        tool = chain.tool(call.name)
        assert tool is not None
        context = ToolContext(
            state=state, custom_context=chain.custom_context, tool_call_id=call.call_id
        )
        results.append(await tool.invoke(call, context))
    return tuple(results)


async def values(ctx: w.RunCtx) -> Ran:
    chain = _chain()
    try:
        while True:
            reply = await chain.llm.complete(chain.messages, chain.tools)
            chain = chain.add_message(reply)
            if not reply.tool_calls:
                return Ran(chain.messages)
            results = await _results(chain, reply)
            chain = chain.add_message(Message(role="tool", tool_results=results))
    finally:
        MODEL.requests.clear()


# ---------------------------------------------------------------- 5. the trace: the design floor


async def traced(ctx: w.RunCtx) -> Ran:
    """``values`` as the standard machine's seven moves per model call, each recorded."""
    chain = _chain().update_custom_context({"mode_state": {"run_count": 0}})
    gate: Any  # of the middleware: none here
    max_runs, should_pause, tool_names, middleware = ctx.k + 5, None, (), ()
    trace: list[Transition] = []
    record, clock = trace.append, time.perf_counter
    started = clock()
    try:
        while True:
            # expanding: the last tool message's expansions
            last = chain.last_message
            if last is not None and last.role == "tool":
                for result in last.tool_results:
                    if result.expansion is not None and result.expandable:
                        raise Unmodelled("an expansion")
            ended = clock()
            record(Transition("expanding", "expanded", "calling", chain, ended - started))
            started = ended
            # calling: the failure budget, the model, its reply counted, its status, the pause
            if chain.current_failure_count >= chain.max_retry_count:
                raise Unmodelled("a spent failure budget")
            reply = await chain.llm.complete(chain.messages, chain.tools, on_delta=None)
            if not isinstance(reply, Message) or reply.role != "assistant":
                raise Unmodelled("an invalid reply")
            changes: dict[str, Any] = {} if reply.tool_calls else {"current_failure_count": 0}
            context = chain.custom_context
            mode_state = context["mode_state"]
            counted = {**mode_state, "run_count": mode_state["run_count"] + 1}
            chain = chain.add_message(
                reply, custom_context={**context, "mode_state": counted}, **changes
            )
            if reply.status != "complete":
                raise Unmodelled("a cut-off reply")
            if not reply.tool_calls and not reply.text.strip():
                raise Unmodelled("an empty reply")
            if should_pause is not None:
                raise Unmodelled("a pause")
            ended = clock()
            record(Transition("calling", "called", "interrupt_check", chain, ended - started))
            started = ended
            # interrupt_check: every middleware's approval gate
            for gate in middleware:
                raise Unmodelled(f"an approval gate {gate}")
            ended = clock()
            record(Transition("interrupt_check", "clear", "executing", chain, ended - started))
            started = ended
            # executing: the pending calls, run, and their tool message
            last = chain.last_message
            assert last is not None
            calls = (
                last.tool_calls if last.role == "assistant" and last.status == "complete" else ()
            )
            context = chain.custom_context
            if DECIDED in context or ANSWER in context:
                raise Unmodelled("a resumed batch")
            if calls:
                results = await _results(chain, last)
                failures = 0
                for result in results:
                    if result.is_error:
                        failures = chain.current_failure_count + 1
                        break
                tool_message = Message(role="tool", tool_results=results)
                chain = chain.add_message(tool_message, current_failure_count=failures)
            ended = clock()
            record(Transition("executing", "executed", "propagating", chain, ended - started))
            started = ended
            # propagating: answers, state updates, interrupts
            if chain.custom_context.get(ANSWER) is not None:
                raise Unmodelled("an answer")
            last = chain.last_message
            if last is not None and last.role == "tool":
                for result in last.tool_results:
                    if result.state_updates and not result.is_interrupt:
                        raise Unmodelled("state updates")
                    if result.is_interrupt:
                        raise Unmodelled("an interrupt")
            ended = clock()
            record(Transition("propagating", "propagated", "until_check", chain, ended - started))
            started = ended
            # until_check: the target tools
            if tool_names:
                raise Unmodelled("until-tool targets")
            ended = clock()
            record(Transition("until_check", "unsatisfied", "deciding", chain, ended - started))
            started = ended
            # deciding: loop within max_runs, or done
            if not chain.needs_response:
                record(Transition("deciding", "done", "ok", chain, clock() - started))
                return Ran(chain.messages, trace)
            if chain.custom_context["mode_state"]["run_count"] >= max_runs:
                raise Unmodelled("max_runs reached")
            ended = clock()
            record(Transition("deciding", "loop", "expanding", chain, ended - started))
            started = ended
    finally:
        MODEL.requests.clear()


# ---------------------------------------------------------------- 6. the engine's parts, once


class _Cursor:
    """What the shared machine moves: one per run, as the engine's."""

    __slots__ = ("__weakref__", "state")
    state: str


async def engine_parts(ctx: w.RunCtx) -> Ran:
    """``traced`` with the parts of the engine a move is made of, each once: the move
    fires the standard machine's real trigger, the record keeps what builds the step's
    detail when read, and the two moves that grew the chain count the reply's tokens."""
    chain = _chain().update_custom_context({"mode_state": {"run_count": 0}})
    gate: Any  # of the middleware: none here
    max_runs, should_pause, tool_names, middleware = ctx.k + 5, None, (), ()
    exits, machine = STANDARD.exits, STANDARD.machine
    cursor = _Cursor()
    machine.add_model(cursor, initial="expanding")
    trace: list[Transition] = []
    clock = time.perf_counter
    started = clock()

    def move(source: str, before: LLMChain, after: LLMChain, kind: type[Any] = Continue) -> None:
        nonlocal started
        ended = clock()
        usage = None
        reply = after.last_message
        if reply is not before.last_message and reply is not None and reply.role == "assistant":
            counts = Usage.of(reply)
            usage = None if counts is None else counts.to_dict()
        trigger, event, describe = exits[source][kind]
        event.fire(cursor)
        if describe is None and usage is None:
            moved = Transition(source, trigger, cursor.state, after, ended - started)
        else:
            moved = Transition(
                source,
                trigger,
                cursor.state,
                after,
                ended - started,
                describe=describe,
                before=before,
                usage=usage,
            )
        trace.append(moved)
        started = ended

    try:
        while True:
            last = chain.last_message
            if last is not None and last.role == "tool":
                for result in last.tool_results:
                    if result.expansion is not None and result.expandable:
                        raise Unmodelled("an expansion")
            move("expanding", chain, chain)
            before = chain
            if chain.current_failure_count >= chain.max_retry_count:
                raise Unmodelled("a spent failure budget")
            reply = await chain.llm.complete(chain.messages, chain.tools, on_delta=None)
            if not isinstance(reply, Message) or reply.role != "assistant":
                raise Unmodelled("an invalid reply")
            changes: dict[str, Any] = {} if reply.tool_calls else {"current_failure_count": 0}
            context = chain.custom_context
            mode_state = context["mode_state"]
            counted = {**mode_state, "run_count": mode_state["run_count"] + 1}
            chain = chain.add_message(
                reply, custom_context={**context, "mode_state": counted}, **changes
            )
            if reply.status != "complete":
                raise Unmodelled("a cut-off reply")
            if not reply.tool_calls and not reply.text.strip():
                raise Unmodelled("an empty reply")
            if should_pause is not None:
                raise Unmodelled("a pause")
            move("calling", before, chain)
            for gate in middleware:
                raise Unmodelled(f"an approval gate {gate}")
            move("interrupt_check", chain, chain)
            before = chain
            last = chain.last_message
            assert last is not None
            calls = (
                last.tool_calls if last.role == "assistant" and last.status == "complete" else ()
            )
            context = chain.custom_context
            if DECIDED in context or ANSWER in context:
                raise Unmodelled("a resumed batch")
            if calls:
                results = await _results(chain, last)
                failures = 0
                for result in results:
                    if result.is_error:
                        failures = chain.current_failure_count + 1
                        break
                tool_message = Message(role="tool", tool_results=results)
                chain = chain.add_message(tool_message, current_failure_count=failures)
            move("executing", before, chain)
            if chain.custom_context.get(ANSWER) is not None:
                raise Unmodelled("an answer")
            last = chain.last_message
            if last is not None and last.role == "tool":
                for result in last.tool_results:
                    if result.state_updates and not result.is_interrupt:
                        raise Unmodelled("state updates")
                    if result.is_interrupt:
                        raise Unmodelled("an interrupt")
            move("propagating", chain, chain)
            if tool_names:
                raise Unmodelled("until-tool targets")
            move("until_check", chain, chain)
            if not chain.needs_response:
                move("deciding", chain, chain, Ok)
                return Ran(chain.messages, trace)
            if chain.custom_context["mode_state"]["run_count"] >= max_runs:
                raise Unmodelled("max_runs reached")
            move("deciding", chain, chain)
    finally:
        machine.remove_model(cursor)
        MODEL.requests.clear()


# ---------------------------------------------------------------- checked against the Agent

Rung = Callable[[w.RunCtx], Awaitable[Ran]]
#: Each rung's loop, by name.
LOOPS: dict[str, Rung] = {
    "dicts": dicts,
    "slots": slots,
    "attrs": attrs_values,
    "values": values,
    "traced": traced,
    "engine": engine_parts,
}


def _last_text(messages: Sequence[Any]) -> str:
    last = messages[-1]
    return str(last["content"] if isinstance(last, dict) else last.content)


def runner(name: str) -> Callable[[int], Coroutine[Any, Any, None]]:
    """``run_once(k)`` of the rung ``name``: one run, checked by the workload, as a peer
    adapter's (what ``speed.py``'s worker runs for ``floor.<name>``)."""
    loop = LOOPS[name]

    async def one(ctx: w.RunCtx) -> str:
        return _last_text((await loop(ctx)).messages)

    async def run_once(k: int) -> None:
        await w.drive(one, k)

    return run_once


def as_messages(messages: Sequence[Any]) -> list[Message]:
    """A rung's conversation as agentfsm's messages, for comparing with the Agent's."""
    out = []
    for message in messages:
        if isinstance(message, Message):
            out.append(message)
            continue
        get: Callable[[str], Any] = (
            message.get if isinstance(message, dict) else message.__getattribute__
        )
        out.append(
            Message(
                role=get("role"),
                content=get("content"),
                tool_calls=tuple(
                    _call(c.get if isinstance(c, dict) else c.__getattribute__)
                    for c in get("tool_calls")
                ),
                tool_results=tuple(
                    _result(r.get if isinstance(r, dict) else r.__getattribute__)
                    for r in get("tool_results")
                ),
                metadata=dict(get("metadata")),
            )
        )
    return out


def _call(get: Callable[[str], Any]) -> ToolCall:
    return ToolCall(call_id=get("call_id"), name=get("name"), arguments=dict(get("arguments")))


def _result(get: Callable[[str], Any]) -> ToolResult:
    return ToolResult(tool_call_id=get("tool_call_id"), name=get("name"), content=get("content"))


async def agent_run(k: int) -> Ran:
    """The Agent row's run of size ``k``: its conversation and its moves."""
    seen: list[Ran] = []

    async def one(ctx: w.RunCtx) -> str:
        run = AGENT.start(AgentState.of(w.PROMPT), max_runs=ctx.k + 5)
        try:
            await run.run()
        finally:
            AGENT.model.requests.clear()  # type: ignore[attr-defined]
        seen.append(Ran(run.agent_state.messages, run.trace.transitions))
        return str(run.agent_state.messages[-1].text)

    await w.drive(one, k)
    return seen[0]


async def rung_run(name: str, k: int) -> Ran:
    """The rung ``name``'s run of size ``k``, checked by the workload."""
    seen: list[Ran] = []

    async def one(ctx: w.RunCtx) -> str:
        ran = await LOOPS[name](ctx)
        seen.append(ran)
        return _last_text(ran.messages)

    await w.drive(one, k)
    return seen[0]


def check(k: int = 3) -> None:
    """Every rung's conversation is the Agent's, and the traced rung's moves the Agent's
    trace (source, trigger, destination); raises ``WorkloadError`` naming the rung."""
    agent = asyncio.run(agent_run(k))
    expected = list(agent.messages)
    edges = [(t.source, t.trigger, t.dest) for t in agent.trace]
    for name in LOOPS:
        ran = asyncio.run(rung_run(name, k))
        if as_messages(ran.messages) != expected:
            raise w.WorkloadError(f"rung {name!r} ended with another conversation than the Agent")
        if ran.trace and [(t.source, t.trigger, t.dest) for t in ran.trace] != edges:
            raise w.WorkloadError(f"rung {name!r} took other moves than the Agent")
    if not asyncio.run(rung_run(DESIGN_FLOOR, k)).trace:
        raise w.WorkloadError(f"the design floor {DESIGN_FLOOR!r} recorded no moves")


# ---------------------------------------------------------------- measuring


def venv_for(python: str) -> str:
    """The python of a venv of ``python`` with this package installed (its dependencies
    are what the counts need; the package itself is imported from a copy on
    ``PYTHONPATH``), built once under the temp folder and reused."""
    found = Path(python).expanduser()
    if not found.exists():
        raise SystemExit(f"--python {python}: no such interpreter; see `ls ~/.pyenv/versions`")
    version = subprocess.run(
        [str(found), "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    key = hashlib.sha256(str(found.resolve()).encode()).hexdigest()[:8]
    venv = Path(tempfile.gettempdir()) / "agentfsm-bench" / f"venv-{version}-{key}"
    inside = venv / "bin" / "python"
    probe = [str(inside), "-c", "import attrs, cattrs, httpx, rich, transitions"]
    if inside.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(inside)
    subprocess.run([str(found), "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [str(inside), "-m", "pip", "install", "-q", str(HERE.parent)],
        check=True,
    )
    subprocess.run(probe, check=True)
    return str(inside)


def ladder(k: int, repeat: int, python: str) -> dict[str, float]:
    """Instructions per model call of every rung and of the Agent row (``"Agent"``), on
    ``python``."""
    counts: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="agentfsm") as scratch:
        package = _copied(Path(scratch))
        # the rungs run as the Agent does on this interpreter and this copy, or nothing counts
        checked = [
            python,
            "-c",
            f"import sys; sys.path[:0] = [{str(HERE)!r}]; import floor; floor.check()",
        ]
        subprocess.run(checked, env=_env(package), check=True)
        for name in RUNGS:
            counts[name] = per_call(f"floor.{name}", k, repeat, path=package, python=python)
            print(f"{python}: {name} {counts[name]:,.0f}", file=sys.stderr, flush=True)
    counts["Agent"] = laid_out(_copied, k, repeat, python=python)
    print(f"{python}: Agent {counts['Agent']:,.0f}", file=sys.stderr, flush=True)
    return counts


def _version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|---|" + "---:|" * (len(header) - 1))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        print()
        return
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                c.ljust(n) if i == 0 else c.rjust(n)
                for i, (c, n) in enumerate(zip(row, widths, strict=True))
            )
        )
    print()


def _ladder_rows(counts: dict[str, float]) -> list[list[str]]:
    rows, before = [], None
    agent = counts["Agent"]
    for number, (name, what) in enumerate(RUNGS.items(), 1):
        count = counts[name]
        rows.append(
            [
                f"{number}. {name}: {what}",
                f"{count:,.0f}",
                "" if before is None else f"{count / before:.2f}x",
                f"{agent / count:.2f}x",
            ]
        )
        before = count
    assert before is not None
    rows.append(
        [
            f"Agent row (Agent.execute, median of {LAYOUTS} layouts)",
            f"{agent:,.0f}",
            f"{agent / before:.2f}x",
            "1.00x",
        ]
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", type=int, default=50, help="tool round trips per run")
    parser.add_argument("--repeat", type=int, default=3, help="processes per count (median)")
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="PATH",
        help="measure on this interpreter instead, in a venv of its own (repeatable)",
    )
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    pythons = [venv_for(p) for p in args.python] or [sys.executable]
    measured = {python: ladder(args.k, args.repeat, python) for python in pythons}
    header = [f"rung, K={args.k}", "instructions per model call", "÷ rung before", "Agent ÷ rung"]
    for python, counts in measured.items():
        print(f"python {_version(python)}\n")
        _table(header, _ladder_rows(counts), args.markdown)
    if measured:
        rows = [
            [
                f"python {_version(python)}",
                f"{counts['Agent']:,.0f}",
                f"{counts[DESIGN_FLOOR]:,.0f}",
                f"{counts['Agent'] / counts[DESIGN_FLOOR]:.2f}x",
                f"{counts['dicts']:,.0f}",
            ]
            for python, counts in measured.items()
        ]
        _table(
            ["interpreter", "Agent row", "design floor", "÷ floor", "dicts rung"],
            rows,
            args.markdown,
        )


if __name__ == "__main__":
    main()
