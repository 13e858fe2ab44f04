"""agentfsm.mcp against real MCP servers built with the SDK (tests/_mcp_server.py):
over stdio (a child process) and over streamable HTTP on loopback (a free port, a
server process started and stopped here), in agent runs with approval."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types

from agentfsm import Agent, AgentState, Approval, ContentPart, HumanInTheLoop, ToolCall, ToolContext
from agentfsm.mcp import StreamableHTTP, mcp_tools, result_content, stdio
from agentfsm.providers import ScriptedModel, call_tool, call_tools, say
from agentfsm.testing import assert_path
from tests._mcp_server import PDF, PIXEL
from tests.support import LOOP

ROOT = Path(__file__).resolve().parent.parent
#: Two model calls with one round of tools between them.
ONE_ROUND = f"{LOOP} {LOOP} ok"
CONTEXT = ToolContext(state={}, custom_context={}, tool_call_id="c")


def _server_stdio() -> object:
    return stdio(sys.executable, "-m", "tests._mcp_server", "stdio", cwd=str(ROOT))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    """The test server on streamable HTTP at a free loopback port, stopped at the end."""
    with _http_server() as (url, _):
        yield url


@contextlib.contextmanager
def _http_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests._mcp_server", "http", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the MCP test server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---------------------------------------------------------------- stdio


async def test_stdio_tools_keep_the_servers_schemas_and_answer() -> None:
    async with mcp_tools(_server_stdio()) as tools:
        by_name = {t.name: t for t in tools}
        assert sorted(by_name) == [
            "add",
            "broken",
            "crash",
            "picture",
            "pid",
            "shout",
            "write_note",
        ]
        add = by_name["add"]
        assert add.description == "Add two numbers."
        assert add.parameters == {
            "type": "object",
            "properties": {
                "a": {"title": "A", "type": "integer"},
                "b": {"title": "B", "type": "integer"},
            },
            "required": ["a", "b"],
            "title": "addArguments",
        }
        result = await add.invoke(ToolCall("c", "add", {"a": 2, "b": 3}), CONTEXT)
        assert (result.content, result.is_error) == ("5", False)
        failed = await by_name["broken"].invoke(ToolCall("c", "broken", {"reason": "x"}), CONTEXT)
        assert failed.is_error
        assert "broken on purpose: x" in failed.text
        picture = await by_name["picture"].invoke(ToolCall("c", "picture", {}), CONTEXT)
        assert picture.content == (
            ContentPart.text("a red dot"),
            ContentPart("image", PIXEL, {"media_type": "image/png"}),
            ContentPart("file", PDF, {"media_type": "application/pdf", "filename": "notes.pdf"}),
        )
        # arguments that do not fit the schema never reach the server
        wrong = await add.invoke(ToolCall("c", "add", {"a": 1}), CONTEXT)
        assert wrong.is_error and "missing required parameter(s) ['b']" in wrong.text
    # the connection closed with the block: a call now fails as an error result
    late = await add.invoke(ToolCall("c", "add", {"a": 2, "b": 3}), CONTEXT)
    assert late.is_error


async def test_a_filter_and_a_prefix_in_an_agent_run() -> None:
    model = ScriptedModel(
        [
            call_tools(
                ("calc_add", {"a": 20, "b": 22}), ("calc_shout", {"text": "hi", "times": 2})
            ),
            say("done"),
        ]
    )
    async with mcp_tools(_server_stdio(), tool_filter={"add", "shout"}, prefix="calc_") as tools:
        assert [t.name for t in tools] == ["calc_add", "calc_shout"]
        run = Agent(model, tools).start(AgentState.of("go"))
        await run.run()
    assert_path(run, ONE_ROUND)
    results = run.agent_state.messages[2].tool_results
    assert [(r.name, r.content) for r in results] == [("calc_add", "42"), ("calc_shout", "HI HI")]
    offered = [t.name for t in model.requests[0].tools]
    assert offered == ["calc_add", "calc_shout"]


async def test_a_filter_may_be_a_test_of_each_tool() -> None:
    def without_side_effects(item: mcp_types.Tool) -> bool:
        return item.name not in ("write_note", "broken", "crash", "pid")

    async with mcp_tools(_server_stdio(), tool_filter=without_side_effects) as tools:
        assert sorted(t.name for t in tools) == ["add", "picture", "shout"]


async def test_approval_gates_an_mcp_tool_like_any_other() -> None:
    hitl = HumanInTheLoop({"notes_write_note": True})

    async def ask(tools: list[Any], text: str, kind: str) -> AgentState:
        model = ScriptedModel([call_tool("notes_write_note", text=text), say("ok")])
        agent = Agent(model, tools, middleware=[hitl])
        run = agent.start(AgentState.of(f"note {text}"))
        await run.run()
        assert_path(run, "expanding calling interrupt_check interrupted")
        assert run.agent_state.interrupt_data is not None
        (request,) = Approval.of(run.agent_state.interrupt_data).requests
        assert request.tool_name == "notes_write_note"
        decision = request.approve() if kind == "approve" else request.reject()
        return await agent.resume(run.agent_state, [decision])

    async with mcp_tools(_server_stdio(), prefix="notes_") as tools:
        approved = await ask(tools, "milk", "approve")
        assert approved.status == "ok"
        assert approved.messages[2].tool_results[0].content == "noted: milk (1 notes)"
        rejected = await ask(tools, "eggs", "reject")
        assert rejected.status == "ok"
        assert "noted" not in rejected.messages[2].tool_results[0].text
        # the rejected call never reached the server: this is its second note
        again = await ask(tools, "tea", "approve")
        assert again.messages[2].tool_results[0].content == "noted: tea (2 notes)"


# ---------------------------------------------------------------- streamable HTTP


async def test_streamable_http_on_loopback(http_server: str) -> None:
    model = ScriptedModel([call_tool("add", a=1, b=2), say("three")])
    async with mcp_tools(http_server, tool_filter=["add"]) as tools:
        run = Agent(model, tools).start(AgentState.of("1+2?"))
        await run.run()
    assert_path(run, ONE_ROUND)
    assert run.agent_state.messages[2].tool_results[0].content == "3"


async def test_streamable_http_with_headers(http_server: str) -> None:
    server = StreamableHTTP(http_server, headers={"x-test": "1"})
    async with mcp_tools(server) as tools:
        by_name = {t.name: t for t in tools}
        failed = await by_name["broken"].invoke(ToolCall("c", "broken", {"reason": "y"}), CONTEXT)
        assert failed.is_error and "broken on purpose: y" in failed.text


# ---------------------------------------------------------------- results


def test_result_content_of_each_kind_of_block() -> None:
    structured = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    assert result_content(structured) == '{"n": 1}'
    mixed = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="a"),
            mcp_types.TextContent(type="text", text="b"),
            mcp_types.ResourceLink(type="resource_link", name="log", uri="file:///log.txt"),
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.TextResourceContents(uri="file:///x.txt", text="inside"),
            ),
            mcp_types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
        ]
    )
    assert result_content(mixed) == (
        "a\nb\n[resource log at file:///log.txt]\ninside\n"
        "[audio (audio/wav) the model cannot be sent]"
    )


# ---------------------------------------------------------------- a server that goes away


@pytest.mark.parametrize("over", ["stdio", "http"])
@pytest.mark.parametrize("dies", ["during a call", "between calls"])
async def test_a_server_that_dies_fails_its_calls_as_results_and_the_run_goes_on(
    over: str, dies: str
) -> None:
    """Over stdio and streamable HTTP alike: each call to a dead server is an error
    result naming it, the model reads it, the run ends ok, and the block exits quietly."""
    with contextlib.ExitStack() as stack:
        if over == "http":
            server: Any
            server, _ = stack.enter_context(_http_server())
            named = server
        else:
            server = _server_stdio()
            named = shlex.join([server.command, *server.args])
        first = call_tool("crash") if dies == "during a call" else call_tool("add", a=1, b=1)
        model = ScriptedModel([first, call_tool("add", a=2, b=3), say("the server is gone")])
        async with mcp_tools(server, tool_filter=["add", "crash", "pid"]) as tools:
            if dies == "between calls":
                by_name = {t.name: t for t in tools}
                alive = await by_name["pid"].invoke(ToolCall("c", "pid", {}), CONTEXT)
                os.kill(int(alive.text), signal.SIGKILL)
            run = Agent(model, tools).start(AgentState.of("add"))
            result = await run.run()
        # leaving the block raised nothing
    assert type(result).__name__ == "Ok"
    assert_path(run, f"{LOOP} {LOOP} {LOOP} ok")
    state = run.agent_state
    assert state.status == "ok" and state.messages[-1].text == "the server is gone"
    results = [r for m in state.messages for r in m.tool_results]
    assert [(r.name, r.is_error) for r in results] == [
        (first.tool_calls[0].name, True),
        ("add", True),
    ]
    prefix = f"The MCP server {named} failed the call to "
    if over == "stdio":
        assert [r.text for r in results] == [
            f"{prefix}{first.tool_calls[0].name}: Connection closed",
            f"{prefix}add: Connection closed",
        ]
    else:
        # which transport error a call meets (a kept-alive connection reset or cut, or
        # the closed port refusing a new one) is the kernel's to say
        errors = "ConnectError|ReadError|RemoteProtocolError|WriteError"
        gone = rf"no answer over HTTP \(({errors})(: .+)?\)"
        for result, name in zip(results, (first.tool_calls[0].name, "add"), strict=True):
            assert re.fullmatch(re.escape(f"{prefix}{name}: ") + gone, result.text), result.text
