"""Bad input and faults: each ends in a defined terminal, with the chain kept.

One row per case: what goes wrong, the terminal the run must reach, and the
error type (for ``error``) or the tool result the model reads (for a loop that
goes on). The docs' "When things go wrong" (docs/failures.md) is checked against
this table (``test_readme_lists_every_row``).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import re
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from agentfsm import (
    STANDARD,
    Agent,
    AgentState,
    HumanInTheLoop,
    Message,
    ToolCall,
    start_run,
    tool,
)
from agentfsm.providers import (
    FallbackModel,
    Limits,
    OpenAIChat,
    RetryPolicy,
    ScriptedModel,
    call_tool,
    fail,
    say,
)
from agentfsm.providers._model import tool_call
from agentfsm.store import SQLiteStore, load_run, loads
from tests.providers.fake_server import FakeServer, Reply
from tests.support import add, boom, edit_saved, registered_runs, submit


@tool(timeout=0.05)
async def hangs() -> str:
    """Never answers."""
    await asyncio.sleep(30)
    return "late"


GATED_RUNS: list[str] = []


@tool
def gated(path: str) -> str:
    """Needs approval."""
    GATED_RUNS.append(path)
    return path


@tool(timeout=0.05)
def hangs_sync() -> str:
    """Blocks its thread past the timeout."""
    time.sleep(0.3)
    return "late"


@attrs.frozen
class Line:
    sku: str
    qty: int


@tool
def order(lines: list[Line]) -> str:
    """Order lines of goods."""
    return f"{len(lines)} line(s)"


@tool
def opaque() -> object:
    """Returns an object with no JSON form."""
    return object()


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


def _openai(server: FakeServer, *replies: Reply, **options: Any) -> OpenAIChat:
    """A real provider over loopback, answering with ``replies`` (each retry takes one)."""
    server.push(*replies)
    return OpenAIChat(
        "gpt-test",
        **{
            "api_key": "sk-test-reliability-key",
            "base_url": server.url,
            "timeout": 0.5,
            "retry": RetryPolicy(attempts=3, backoff=0.001),
            **options,
        },
    )


def _echo_key(request: Any) -> Reply:
    """A server that puts the request's Authorization header into its error."""
    return Reply(400, _error(f"bad request with {request.headers.get('authorization')}"))


def _endless(server: FakeServer) -> Any:
    while not server.stopping.wait(0.02):
        yield b": keep-alive\n\n"


def _tool_call_costing(tokens: int) -> Reply:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
    }
    return Reply(
        json={
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                }
            ],
            "usage": {
                "prompt_tokens": tokens,
                "completion_tokens": 10,
                "total_tokens": tokens + 10,
            },
        }
    )


def _reply_then_ok(reply: Message) -> ScriptedModel:
    return ScriptedModel([reply, say("recovered")])


@attrs.frozen
class Case:
    name: str
    #: The model, given a loopback server a real provider may talk to.
    model: Callable[[FakeServer], Any]
    terminal: str
    error_type: str | None = None
    tool_text: str | None = None  # the start of the error result the model reads
    options: dict[str, Any] = attrs.field(factory=dict)


CASES = [
    Case(
        "malformed tool-call JSON",
        lambda _: _reply_then_ok(Message.assistant(None, [ToolCall("c", "add", {}, '{"a": 1,')])),
        "ok",
        tool_text="Invalid JSON in arguments for tool 'add'",
    ),
    Case(
        "arguments that break the schema",
        lambda _: _reply_then_ok(call_tool("add", a="one", b=2)),
        "ok",
        tool_text="Invalid arguments for tool 'add': parameter 'a' must be integer",
    ),
    Case(
        "unknown tool",
        lambda _: _reply_then_ok(call_tool("nope")),
        "ok",
        tool_text="Tool call made to nope but tool not found",
    ),
    Case(
        "tool raising",
        lambda _: _reply_then_ok(call_tool("boom")),
        "ok",
        tool_text="ERROR: RuntimeError: kaput",
    ),
    Case(
        "tool hanging past its timeout",
        lambda _: _reply_then_ok(call_tool("hangs")),
        "ok",
        tool_text="ERROR: TimeoutError: tool 'hangs' did not finish within 0.05s",
    ),
    Case(
        "nested tool arguments of the wrong type",
        lambda _: _reply_then_ok(call_tool("order", lines=[{"sku": "a", "qty": "2"}])),
        "ok",
        tool_text="Invalid arguments for tool 'order': parameter 'lines[0].qty' must be integer",
    ),
    Case(
        "deeply nested tool-call JSON",
        lambda _: _reply_then_ok(Message.assistant(None, [tool_call("c", "add", "[" * 50_000)])),
        "ok",
        tool_text="Invalid JSON in arguments for tool 'add'",
    ),
    Case(
        "a sync tool hanging past its timeout",
        lambda _: _reply_then_ok(call_tool("hangs_sync")),
        "ok",
        tool_text="ERROR: TimeoutError: tool 'hangs_sync' did not finish within 0.05s. It runs "
        "in a thread Python cannot stop, so it may still finish and its effects may still happen",
    ),
    Case(
        "a tool returning a value with no JSON form",
        lambda _: _reply_then_ok(call_tool("opaque")),
        "ok",
        tool_text="ERROR: tool 'opaque' returned a value with no JSON form (object at $)",
    ),
    Case(
        "model returning an empty message",
        lambda _: ScriptedModel([say("")]),
        "error",
        "empty_response",
    ),
    Case(
        "reply cut off at the token limit",
        lambda _: ScriptedModel([say("half", status="length")]),
        "error",
        "response_truncated",
    ),
    Case(
        "model error on every fallback",
        lambda _: FallbackModel(
            ScriptedModel([fail("rate_limited", "429")], model_name="a"),
            ScriptedModel([fail("server_error", "500")], model_name="b"),
        ),
        "error",
        "server_error",
    ),
    Case(
        "provider 401",
        lambda _: ScriptedModel([fail("authentication", "bad key")]),
        "error",
        "authentication",
    ),
    Case(
        "provider 429",
        lambda _: ScriptedModel([fail("rate_limited", "slow down")]),
        "error",
        "rate_limited",
    ),
    Case(
        "provider 500",
        lambda _: ScriptedModel([fail("server_error", "oops")]),
        "error",
        "server_error",
    ),
    Case(
        "provider timeout",
        lambda _: ScriptedModel([fail("timeout", "read timed out")]),
        "error",
        "timeout",
    ),
    Case(
        "a provider bug (any exception)",
        lambda _: ScriptedModel([KeyError("choices")]),
        "error",
        "model_error",
    ),
    Case(
        "the model never calls the until tool",
        lambda _: ScriptedModel([say("done")]),
        "error",
        "until_tool_not_called",
        options={"until_tool": "submit"},
    ),
    Case(
        "the model loops past max_runs",
        lambda _: ScriptedModel(lambda m: call_tool("add", a=1, b=1)),
        "error",
        "exceeded_max_runs",
        options={"max_runs": 2},
    ),
    Case(
        "three tool failures in a row",
        lambda _: ScriptedModel(lambda m: call_tool("boom")),
        "error",
        "exceeded_failure_count",
    ),
    Case(
        "a provider error echoing the API key",
        lambda server: _openai(server, _echo_key),  # type: ignore[arg-type]
        "error",
        "bad_request",
    ),
    Case(
        "an event-stream line that never ends",
        lambda server: _openai(
            server,
            Reply(events=[b"data: ", b"x" * 4096, b"x" * 4096]),
            stream=True,
            limits=Limits(max_line_bytes=4096),
        ),
        "error",
        "response_too_large",
    ),
    Case(
        "a reply larger than max_response_bytes",
        lambda server: _openai(
            server,
            Reply(body=b'{"p": "' + b"z" * 5000 + b'"}'),
            limits=Limits(max_response_bytes=1000),
        ),
        "error",
        "response_too_large",
    ),
    Case(
        "a stream that never ends",
        lambda server: _openai(
            server,
            Reply(events=_endless(server)),
            stream=True,
            limits=Limits(max_stream_seconds=0.2),
        ),
        "error",
        "timeout",
    ),
    Case(
        "an HTML page where an event stream was expected",
        lambda server: _openai(
            server,
            Reply(body=b"<html>sign in</html>", headers={"content-type": "text/html"}),
            stream=True,
        ),
        "error",
        "invalid_response",
    ),
    Case(
        "the run passes its token budget",
        lambda server: _openai(server, _tool_call_costing(40), _tool_call_costing(40)),
        "error",
        "exceeded_token_budget",
        options={"token_budget": 90},
    ),
    Case(
        "a call that needs approval",
        lambda _: ScriptedModel([call_tool("gated", path="x")]),
        "interrupted",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_fault_ends_in_its_terminal(case: Case) -> None:
    server = FakeServer()
    model = case.model(server)
    agent = Agent(
        model,
        [add, boom, submit, hangs, gated, hangs_sync, order, opaque],
        middleware=[HumanInTheLoop({"gated": True})],
    )
    start = AgentState.of("go")
    run = agent.start(start, **case.options)
    try:
        await run.run()
    finally:
        server.close()
        if hasattr(model, "aclose"):
            await model.aclose()
    states, triggers = run.trace.states, run.trace.triggers
    assert states[-1] == case.terminal, run.trace.path
    assert STANDARD.is_path(states, triggers)
    state = run.agent_state
    assert state.messages[: len(start.messages)] == start.messages  # nothing lost
    if case.error_type is not None:
        assert state.error is not None and state.error.type == case.error_type
        assert state.error.message  # a message for the user
        assert "sk-test-reliability-key" not in state.error.message + repr(state.error.details)
    if case.tool_text is not None:
        tool_message = next(m for m in state.messages if m.role == "tool")
        (result,) = tool_message.tool_results
        assert result.is_error and str(result.content).startswith(case.tool_text)
        assert state.messages[-1].text == "recovered"


INVALID_OPTIONS = [
    ({"max_runs": -1}, "max_runs must be a positive integer"),
    ({"token_budget": 0}, "token_budget must be a positive integer"),
    ({"until_tool": "nonexistent"}, "until_tool: tool(s) ['nonexistent'] not found"),
    ({"until_tool": "submit", "until_tool_success": "submit"}, "Cannot pass both"),
    ({"until_tool": {"submit": 1}}, "Invalid until_tool option"),
]


@pytest.mark.parametrize(("options", "message"), INVALID_OPTIONS)
def test_invalid_options_are_a_value_error_before_anything_runs(
    options: dict[str, Any], message: str
) -> None:
    model = ScriptedModel([say("x")])
    with pytest.raises(ValueError, match=re.escape(message)):
        Agent(model, [add, submit]).start(AgentState.of("go"), **options)
    assert model.calls == 0


async def test_cancelled_mid_tool_pauses_and_the_resume_runs_the_tool_again() -> None:
    calls: list[int] = []
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Slow."""
        calls.append(1)
        started.set()
        if len(calls) == 1:
            await asyncio.sleep(30)
        return "finished"

    agent = Agent(ScriptedModel([call_tool("slow"), say("done")]), [slow])
    run = agent.start(AgentState.of("go"))
    task = asyncio.create_task(run.run())
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    paused = run.agent_state
    assert (paused.status, paused.pause_reason) == ("paused", "cancelled")
    resumed = await agent.execute(paused)
    assert resumed.status == "ok" and len(calls) == 2  # at-least-once for a tool cut off mid-way
    assert [m.role for m in resumed.messages] == ["user", "assistant", "tool", "assistant"]


async def test_a_thousand_runs_share_one_machine() -> None:
    async def one(n: int) -> tuple[int, Any]:
        async def script(messages: Any) -> Message:
            await asyncio.sleep(0)
            if len(messages) < 1 + 2 * (n % 3):
                return call_tool("add", a=n, b=1)
            return say(f"answer {n}")

        run = Agent(ScriptedModel(script), [add]).start(AgentState.of(f"q{n}"))
        await run.run()
        return n, run

    models_before = registered_runs(STANDARD)
    runs = await asyncio.gather(*(one(n) for n in range(1000)))
    for n, run in runs:
        assert run.trace.states.count("calling") == n % 3 + 1
        assert run.chain.last_message is not None
        assert run.chain.last_message.text == f"answer {n}"
        assert run.chain.messages[0].text == f"q{n}"
        assert [r.content for m in run.chain.messages for r in m.tool_results] == [str(n + 1)] * (
            n % 3
        )
    assert registered_runs(STANDARD) == models_before


@attrs.frozen
class Refusal:
    """A case where nothing runs: the error raised, and what it says."""

    name: str
    #: The exception's class name as docs/failures.md writes it, or the status the run ends in.
    outcome: str
    #: In the exception's message, or in the ended run's interrupt data.
    message: str
    attempt: Callable[[pathlib.Path], Any]


def _saved_interrupt(tmp: pathlib.Path) -> tuple[Any, Any]:
    store = SQLiteStore(tmp / "runs.db")
    agent = Agent(
        ScriptedModel([call_tool("gated", path="/etc/passwd")]),
        [gated],
        middleware=[HumanInTheLoop({"gated": True})],
    )
    start_run(agent, AgentState.of("go"), store, run_id="r").run_sync()
    return store, agent


def _edit(store: Any, *statements: str) -> None:
    con = sqlite3.connect(store.path)
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()


def _skip_the_approval(tmp: pathlib.Path) -> Any:
    store, agent = _saved_interrupt(tmp)
    edit_saved(store.path, "transitions", 2, lambda t: t.update(trigger="clear", dest="executing"))
    _edit(store, "UPDATE runs SET result = NULL")
    return agent.resume_run_sync("r", store)


def _forged_decision(tmp: pathlib.Path) -> Any:
    store, agent = _saved_interrupt(tmp)
    # Both copies of the interrupt (the result's and the agent state's): one alone is
    # refused as it loads, as a copy that is not the log's.
    _edit(
        store,
        "UPDATE runs SET agent_state = json_set(agent_state, "
        "'$.interrupt_data.action_requests[0].arguments.path', 'notes.txt')",
        "UPDATE runs SET result = json_set(result, "
        "'$.data.action_requests[0].arguments.path', 'notes.txt')",
    )
    return agent.resume_run_sync("r", store, [{"type": "approve"}], unbound=True)


def _made_up_state(tmp: pathlib.Path) -> Any:
    store, _ = _saved_interrupt(tmp)
    edit_saved(store.path, "transitions", 2, lambda t: t.update(dest="owned"))
    return load_run(store, "r", tools=[gated])


def _deep_document(tmp: pathlib.Path) -> Any:
    return loads("[" * 100_000, AgentState)


def _bad_agent(tmp: pathlib.Path) -> Any:
    return Agent(ScriptedModel([]), [print])  # type: ignore[list-item]


def _bad_tool(tmp: pathlib.Path) -> Any:
    def anything(*args: int) -> str:
        return ""

    return tool(anything)


REFUSALS = [
    Refusal(
        "a checkpoint edited to skip an approval",
        "interrupted",  # the approval is asked again
        "'tool_name': 'gated'",
        _skip_the_approval,
    ),
    Refusal(
        "HITL decisions for calls that are not the pending ones",
        "InvariantError",
        "is not a pending call of the conversation as it stands",
        _forged_decision,
    ),
    Refusal(
        "a saved run naming a state the machine lacks",
        "FormatError",
        "is not a move of the standard machine",
        _made_up_state,
    ),
    Refusal(
        "deeply nested JSON in a saved document",
        "FormatError",
        "nested too deeply",
        _deep_document,
    ),
    Refusal(
        "invalid Agent arguments",
        "TypeError",
        "tools[0] must be a Tool, got <built-in function print>",
        _bad_agent,
    ),
    Refusal(
        "a tool the model cannot call",
        "TypeError",
        "Tool 'anything' takes *args",
        _bad_tool,
    ),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.name for r in REFUSALS])
def test_refusal_names_the_problem_and_runs_nothing(
    refusal: Refusal, tmp_path: pathlib.Path
) -> None:
    gated_before = len(GATED_RUNS)
    if refusal.outcome[0].isupper():
        with pytest.raises(Exception, match=re.escape(refusal.message)) as raised:
            refusal.attempt(tmp_path)
        assert type(raised.value).__name__ == refusal.outcome
    else:
        state = refusal.attempt(tmp_path)
        assert state.status == refusal.outcome
        assert refusal.message in str(state.interrupt_data)
    assert len(GATED_RUNS) == gated_before  # the approval-gated tool never ran


def test_docs_list_every_row() -> None:
    page = (pathlib.Path(__file__).parent.parent / "docs" / "failures.md").read_text()
    section = page.split("# When things go wrong", 1)[-1]
    for case in CASES:
        assert case.name in section, f"docs/failures.md does not mention {case.name!r}"
        if case.error_type:
            assert f"`{case.error_type}`" in section
    for refusal in REFUSALS:
        assert refusal.name in section, f"docs/failures.md does not mention {refusal.name!r}"
        assert f"`{refusal.outcome}`" in section


def test_a_checkpoint_store_that_fails_on_write_pauses_the_run(tmp_path: pathlib.Path) -> None:
    from agentfsm import start_run
    from agentfsm.store import SQLiteStore, load_run
    from tests.test_store import FlakyStore

    store = FlakyStore(SQLiteStore(tmp_path / "runs.db"), fail_at=3)
    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add])
    run = start_run(agent, AgentState.of("go"), store, run_id="r")
    run.run_sync()
    assert run.agent_state.status == "paused"
    assert run.agent_state.pause_reason == "checkpoint_failed: OperationalError: disk I/O error"
    assert STANDARD.is_path(run.trace.states, run.trace.triggers)
    assert load_run(store, "r", tools=[add]).trace == run.trace  # nothing lost


async def test_hitl_decisions_that_do_not_fit_change_nothing() -> None:
    model = ScriptedModel([call_tool("gated", path="x")])
    agent = Agent(model, [gated], middleware=[HumanInTheLoop({"gated": True})])
    state = await agent.execute(AgentState.of("go"))
    with pytest.raises(ValueError, match=re.escape("Decision count (2) does not match")):
        await agent.resume(state, [{"type": "approve"}, {"type": "approve"}], unbound=True)
    assert state.status == "interrupted" and model.calls == 1


async def test_a_run_restored_after_a_crash_keeps_counting_toward_its_token_budget(
    tmp_path: pathlib.Path,
) -> None:
    from agentfsm import start_run
    from agentfsm.store import SQLiteStore

    server = FakeServer()
    model = _openai(
        server, _tool_call_costing(40), _tool_call_costing(40), Reply(json=_completion_text())
    )
    agent = Agent(model, [add], token_budget=90)
    store = SQLiteStore(tmp_path / "runs.db", lease=0)  # the abandoned run stands for a dead one
    try:
        run = start_run(agent, AgentState.of("go"), store, run_id="r")
        while run.state != "deciding":  # the first call (50 tokens) and its tool, then a crash
            await run.step()
        state = await agent.resume_run("r", store)
    finally:
        server.close()
        await model.aclose()
    assert state.status == "error" and state.error is not None
    assert state.error.type == "exceeded_token_budget"
    assert state.error.details["usage"]["input_tokens"] == 80
    assert len(server.requests) == 2


def _completion_text() -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "3"}}
        ],
    }


# ---------------------------------------------------------------- the command line on bad input


def _store_with_a_run(path: pathlib.Path) -> None:
    from agentfsm import start_run
    from agentfsm.store import SQLiteStore

    with SQLiteStore(path) as store:
        start_run(Agent(ScriptedModel([say("hi")]), []), AgentState.of("go"), store, run_id="r")


def _foreign(path: pathlib.Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (text TEXT)")
    con.execute("INSERT INTO notes VALUES ('mine')")
    con.commit()
    con.close()


def _not_sqlite(path: pathlib.Path) -> None:
    path.write_text("a shopping list, not a database\n" * 20)


def _truncated(path: pathlib.Path) -> None:
    _store_with_a_run(path)
    with path.open("r+b") as file:
        file.truncate(path.stat().st_size // 2)


def _corrupt(path: pathlib.Path) -> None:
    _store_with_a_run(path)
    with path.open("r+b") as file:
        file.seek(4096)
        file.write(b"\xff" * 8192)


@attrs.frozen
class BadFile:
    name: str
    make: Callable[[pathlib.Path], None]
    message: str
    #: SQLite in WAL mode may add its -wal/-shm files beside the store when reading.
    wal: bool = False


BAD_FILES = [
    BadFile(
        "`--db` naming a file that is not an agentfsm store",
        _foreign,
        "is not an agentfsm store (it has no agentfsm tables)",
    ),
    BadFile(
        "`--db` naming a file that is not an agentfsm store",
        _not_sqlite,
        "is not an agentfsm store, or a damaged one: file is not a database",
    ),
    BadFile("a truncated or corrupt store file", _truncated, "or a damaged one", wal=True),
    BadFile("a truncated or corrupt store file", _corrupt, "or a damaged one", wal=True),
]
#: Rows of docs/failures.md's table about text from a run reaching a terminal.
TERMINAL_ROWS = ["escape sequences or markup in text from a model, a tool or a file"]


@pytest.mark.parametrize("bad", BAD_FILES, ids=lambda b: b.make.__name__.strip("_"))
@pytest.mark.parametrize(
    "command",
    [["runs", "list"], ["runs", "show", "r"], ["view", "r"], ["runs", "resume", "r"], ["demo"]],
    ids=" ".join,
)
def test_a_bad_store_file_is_refused_and_left_as_it_was(
    bad: BadFile,
    command: list[str],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agentfsm._cli._main import main

    path = tmp_path / "runs.db"
    bad.make(path)
    before, listing = path.read_bytes(), sorted(os.listdir(tmp_path))
    monkeypatch.chdir(tmp_path)
    decision = ["--approve"] if command == ["demo"] else []
    assert main([*command, *decision, "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert bad.message in err and err.count("\n") == 1, err
    assert path.read_bytes() == before  # read commands never write; nothing else wrote either
    if not bad.wal:
        assert sorted(os.listdir(tmp_path)) == listing


def test_escape_sequences_and_markup_reach_the_terminal_spelled_out(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm import start_run
    from agentfsm._cli._main import main
    from agentfsm.store import SQLiteStore

    text = "\x1b]0;title\x07\x1b[2J[red]markup[/red]"
    with SQLiteStore(tmp_path / "runs.db") as store:
        agent = Agent(ScriptedModel([say(text)]), [])
        start_run(agent, AgentState.of(text), store, run_id="r").run_sync()
    assert main(["runs", "show", "r", "--db", str(tmp_path / "runs.db")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\u001b]0;title\\u0007\\u001b[2J[red]markup[/red]" in out


def test_docs_list_every_command_line_row() -> None:
    page = (pathlib.Path(__file__).parent.parent / "docs" / "failures.md").read_text()
    section = page.split("# When things go wrong", 1)[-1].split("\n## ")[0]
    for name in [*{b.name for b in BAD_FILES}, *TERMINAL_ROWS]:
        assert name in section, f"docs/failures.md does not mention {name!r}"


# ---------------------------------------------------------------- damaged store files


def _damaged_store(tmp_path: pathlib.Path, how: str) -> pathlib.Path:
    from agentfsm import start_run
    from agentfsm.store import SQLiteStore

    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    start_run(Agent(ScriptedModel([say("hi")])), AgentState.of("x"), store, run_id="r").run_sync()
    store._con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 3]
    elif how == "bit-flipped header":
        data[0] ^= 0xFF
    else:  # a page of the runs table overwritten
        data[4096 : 4096 + 200] = b"\xff" * 200
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("how", ["truncated", "bit-flipped header", "overwritten page"])
def test_a_damaged_store_file_is_a_typed_store_error(tmp_path: pathlib.Path, how: str) -> None:
    from agentfsm import StoreError
    from agentfsm.store import SQLiteStore, load_run

    path = _damaged_store(tmp_path, how)
    with pytest.raises(StoreError, match=r"runs\.db") as caught:
        store = SQLiteStore(path)
        load_run(store, "r")
        store.runs()
    assert "damaged" in str(caught.value) or "cannot be used" in str(caught.value)
