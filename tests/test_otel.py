"""OpenTelemetry: the span tree of runs, their metrics, and links between runs that continue."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode

from agentfsm import (
    Agent,
    AgentState,
    HumanInTheLoop,
    LLMChain,
    Message,
    Run,
    Transition,
    otel,
    start_run,
    tool,
)
from agentfsm import store as serialization
from agentfsm._modes import StandardMode
from agentfsm.providers import (
    FallbackModel,
    ModelSettings,
    OpenAIChat,
    ScriptedModel,
    WrapperModel,
    call_tool,
    fail,
    provider_of,
    say,
)
from agentfsm.store import Checkpointer, SQLiteStore
from agentfsm.testing import assert_path
from tests.providers.fake_server import FakeServer, Reply
from tests.support import LOOP, add, boom

ROOT = Path(__file__).resolve().parent.parent
USAGE = {"usage": {"input_tokens": 12, "output_tokens": 5}}


class Telemetry:
    """An SDK tracer and meter provider whose spans and points stay in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """Spans whose parent is ``parent``, in the order they started."""
        assert parent.context is not None
        found = [s for s in self.spans if s.parent and s.parent.span_id == parent.context.span_id]
        return sorted(found, key=lambda s: s.start_time or 0)

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, point)`` of every data point of ``metric``."""
        data = self.reader.get_metrics_data()
        out = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for found in scope.metrics:
                    if found.name == metric:
                        out.extend((dict(p.attributes or {}), p) for p in found.data.data_points)
        return out


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    otel.instrument(t.tracer_provider, t.meter_provider)
    yield t
    otel.uninstrument()


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def one(spans: Sequence[ReadableSpan]) -> ReadableSpan:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def context_of(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def adder() -> Agent:
    script = [
        attrs.evolve(call_tool("add", a=1, b=2, call_id="c1"), metadata=USAGE),
        attrs.evolve(say("3"), metadata=USAGE),
    ]
    return Agent(ScriptedModel(script, model_name="acme:small"), [add])


# ---------------------------------------------------------------- the span tree


def test_a_tool_round_trip_is_a_run_span_with_a_span_per_state_and_per_call(
    telemetry: Telemetry,
) -> None:
    agent = adder()
    outer = telemetry.tracer_provider.get_tracer("host")
    with outer.start_as_current_span("POST /ask") as request:
        run = agent.start(AgentState.of("add 1 and 2"))
        run.run_sync()
    assert_path(run, f"{LOOP} {LOOP} ok")

    root = one(telemetry.named("invoke_agent"))
    assert root.parent is not None and root.parent.span_id == request.get_span_context().span_id
    run_id = attributes(root)["agentfsm.run.id"]
    assert attributes(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "acme",
        "gen_ai.request.model": "small",
        "gen_ai.conversation.id": run_id,
        "agentfsm.machine": "standard",
        "agentfsm.entry": "expanding",
        "agentfsm.terminal": "ok",
        "agentfsm.run.id": run_id,
    }
    assert root.kind is trace.SpanKind.INTERNAL
    assert len(run_id) == 32
    states = telemetry.children(root)
    assert [s.name for s in states] == [f"agentfsm.{t.source}" for t in run.trace]
    assert [
        (a["agentfsm.state"], a["agentfsm.trigger"], a["agentfsm.destination"])
        for a in map(attributes, states)
    ] == run.trace.edges
    assert all(s.status.status_code is StatusCode.UNSET for s in states)

    calls = {s.name: telemetry.children(s) for s in states if telemetry.children(s)}
    assert sorted(calls) == ["agentfsm.calling", "agentfsm.executing"]
    chats = [c for s in states for c in telemetry.children(s) if s.name == "agentfsm.calling"]
    assert [c.name for c in chats] == ["chat small", "chat small"]
    assert attributes(chats[0]) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "acme",
        "gen_ai.request.model": "small",
        "gen_ai.conversation.id": run_id,
        "gen_ai.response.model": "acme:small",
        "gen_ai.response.finish_reasons": ("tool_call",),
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 5,
    }
    assert chats[0].kind is trace.SpanKind.CLIENT
    assert attributes(chats[1])["gen_ai.response.finish_reasons"] == ("stop",)
    tool_span = one(calls["agentfsm.executing"])
    assert tool_span.name == "execute_tool add"
    assert attributes(tool_span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    # every span of the run is in the request's trace, and within its parent's time
    assert {s.context.trace_id for s in telemetry.spans if s.context} == {
        request.get_span_context().trace_id
    }
    for state in states:
        for child in telemetry.children(state):
            assert state.start_time <= child.start_time <= child.end_time <= state.end_time  # type: ignore[operator]
    # the conversation kept is the run's, with each reply naming the run that got it
    state = run.agent_state
    assert [m.role for m in state.messages] == ["user", "assistant", "tool", "assistant"]
    trace_id, span_id = context_of(root)
    assert {m.metadata.get("traceparent") for m in state.messages if m.role == "assistant"} == {
        f"00-{trace_id:032x}-{span_id:016x}-{root.context.trace_flags:02x}"  # type: ignore[union-attr]
    }


def test_runs_tool_calls_and_tokens_are_counted(telemetry: Telemetry) -> None:
    adder().execute_sync(AgentState.of("add 1 and 2"))
    broken = Agent(ScriptedModel([call_tool("boom"), say("sorry")]), [boom])
    broken.execute_sync(AgentState.of("break"))

    runs = telemetry.points("agentfsm.runs")
    assert [(a, p.value) for a, p in runs] == [
        ({"agentfsm.machine": "standard", "agentfsm.terminal": "ok"}, 2)
    ]
    durations = {
        a["gen_ai.request.model"]: p.count
        for a, p in telemetry.points("gen_ai.client.operation.duration")
    }
    assert durations == {"small": 2, "scripted": 2}
    tokens = {
        a["gen_ai.token.type"]: (p.count, p.sum)
        for a, p in telemetry.points("gen_ai.client.token.usage")
    }
    assert tokens == {"input": (2, 24), "output": (2, 10)}
    tools = {
        (a["gen_ai.tool.name"], a.get("error.type")): p.count
        for a, p in telemetry.points("agentfsm.tool.duration")
    }
    assert tools == {("add", None): 1, ("boom", "tool_error"): 1}
    errors = [(a, p.value) for a, p in telemetry.points("agentfsm.tool.errors")]
    assert errors == [({"gen_ai.tool.name": "boom", "error.type": "tool_error"}, 1)]
    failed = one(telemetry.named("execute_tool boom"))
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description is None  # the error text is content: not recorded
    assert attributes(failed)["error.type"] == "tool_error"


def test_contents_are_recorded_only_when_asked(telemetry: Telemetry) -> None:
    adder().execute_sync(AgentState.of("add 1 and 2"))
    recorded = {k for s in telemetry.spans for k in attributes(s)}
    assert not {k for k in recorded if k.endswith(("messages", "arguments", "result"))}

    telemetry.exporter.clear()
    otel.instrument(telemetry.tracer_provider, telemetry.meter_provider, capture_content=True)
    adder().execute_sync(AgentState.of("add 1 and 2"))
    first, second = telemetry.named("chat small")
    assert json.loads(attributes(first)["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "add 1 and 2"}]}
    ]
    assert json.loads(attributes(first)["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}
            ],
            "finish_reason": "tool_call",
        }
    ]
    sent = json.loads(attributes(second)["gen_ai.input.messages"])
    assert sent[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "c1", "response": "3"}],
    }
    tool_span = one(telemetry.named("execute_tool add"))
    assert json.loads(attributes(tool_span)["gen_ai.tool.call.arguments"]) == {"a": 1, "b": 2}
    assert attributes(tool_span)["gen_ai.tool.call.result"] == "3"


def test_spans_a_tool_opens_are_children_of_its_call(telemetry: Telemetry) -> None:
    host = telemetry.tracer_provider.get_tracer("host")

    @tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        with host.start_as_current_span("SELECT value"):
            return key.upper()

    agent = Agent(ScriptedModel([call_tool("lookup", key="k"), say("K")]), [lookup])
    agent.execute_sync(AgentState.of("look up k"))
    query = one(telemetry.named("SELECT value"))
    call = one(telemetry.named("execute_tool lookup"))
    assert query.parent is not None and query.parent.span_id == context_of(call)[1]


# ---------------------------------------------------------------- failures


def test_a_failed_model_call_sets_the_error_status_up_to_the_run(telemetry: Telemetry) -> None:
    agent = Agent(ScriptedModel([fail("rate_limited", "slow down")]), [add])
    state = agent.execute_sync(AgentState.of("hi"))
    assert state.status == "error" and state.error is not None
    assert state.error.type == "rate_limited"

    chat = one(telemetry.named("chat scripted"))
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.status.description == "slow down"
    assert attributes(chat)["error.type"] == "rate_limited"
    calling = one(telemetry.named("agentfsm.calling"))
    assert (attributes(calling)["agentfsm.trigger"], attributes(calling)["error.type"]) == (
        "failed",
        "rate_limited",
    )
    assert calling.status.status_code is StatusCode.ERROR
    root = one(telemetry.named("invoke_agent"))
    assert attributes(root)["agentfsm.terminal"] == "error"
    assert attributes(root)["error.type"] == "rate_limited"
    assert root.status.status_code is StatusCode.ERROR
    assert [(a, p.value) for a, p in telemetry.points("agentfsm.runs")] == [
        (
            {
                "agentfsm.machine": "standard",
                "agentfsm.terminal": "error",
                "error.type": "rate_limited",
            },
            1,
        )
    ]
    [(point_attributes, _)] = telemetry.points("gen_ai.client.operation.duration")
    assert point_attributes["error.type"] == "rate_limited"


async def test_a_model_call_refused_over_http_is_an_error_span_of_the_provider(
    telemetry: Telemetry,
) -> None:
    server = FakeServer("/v1")
    server.push(
        Reply(400, {"error": {"message": "no such model", "type": "invalid_request_error"}})
    )
    model = OpenAIChat("gpt-test", api_key="sk-test", base_url=server.url)
    try:
        state = await Agent(model).execute(AgentState.of("hi"))
    finally:
        await model.aclose()
        server.close()
    assert state.status == "error" and state.error is not None
    chat = one(telemetry.named("chat gpt-test"))
    assert attributes(chat)["gen_ai.provider.name"] == "openai"
    assert attributes(chat)["error.type"] == state.error.type
    assert chat.status.status_code is StatusCode.ERROR
    assert "no such model" in (chat.status.description or "")


# ---------------------------------------------------------------- runs that continue


@tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    return f"wrote {path}"


def test_an_interrupted_run_resumed_links_to_the_run_it_continues(telemetry: Telemetry) -> None:
    agent = Agent(
        ScriptedModel([call_tool("write_file", path="a.txt", text="hi"), say("written")]),
        [write_file],
        middleware=[HumanInTheLoop({"write_file": True})],
    )
    first = agent.start(AgentState.of("write a.txt"))
    first.run_sync()
    assert_path(first, "expanding calling interrupt_check interrupted")
    interrupted = one(telemetry.named("invoke_agent"))
    assert attributes(interrupted)["agentfsm.terminal"] == "interrupted"
    assert interrupted.status.status_code is StatusCode.UNSET
    assert not interrupted.links

    second = agent.resume_sync(first.agent_state, [{"type": "approve"}], unbound=True)
    assert second.status == "ok"
    resumed = [s for s in telemetry.named("invoke_agent") if s is not interrupted]
    resumed_run = one(resumed)
    assert attributes(resumed_run)["agentfsm.entry"] == "interrupt_check"
    link = one(resumed_run.links)  # type: ignore[arg-type]
    assert (link.context.trace_id, link.context.span_id) == context_of(interrupted)
    assert dict(link.attributes or {}) == {"agentfsm.link": "continues"}
    states = [s.name for s in telemetry.children(resumed_run)]
    # The approved call runs in the resumed run, as its own state's span.
    assert states[:4] == [
        "agentfsm.interrupt_check",
        "agentfsm.executing",
        "agentfsm.propagating",
        "agentfsm.until_check",
    ]
    executing = telemetry.children(resumed_run)[1]
    assert [s.name for s in telemetry.children(executing)] == ["execute_tool write_file"]


class _DrainAfterExecuted:
    def transition(self, run: Run, transition: Transition) -> None:
        if transition.trigger == "executed":
            run.request_pause("draining")


def test_a_paused_run_restored_from_the_store_links_to_the_run_it_continues(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    run = start_run(adder(), AgentState.of("add 1 and 2"), store, run_id="r1")
    run.add_hook(_DrainAfterExecuted())
    run.run_sync()
    assert run.trace.terminal == "paused"
    paused = one(telemetry.named("invoke_agent"))
    assert attributes(paused)["agentfsm.pause_reason"] == "draining"
    assert attributes(paused)["agentfsm.run.id"] == Checkpointer.of(run).run_id == "r1"

    # another worker: a fresh agent, the store reopened
    state = adder().resume_run_sync("r1", SQLiteStore(tmp_path / "runs.db"))
    assert state.status == "ok"
    restored = one([s for s in telemetry.named("invoke_agent") if s is not paused])
    assert attributes(restored)["agentfsm.run.id"] == "r1"
    link = one(restored.links)  # type: ignore[arg-type]
    assert (link.context.trace_id, link.context.span_id) == context_of(paused)
    # both are the saved run's conversation, and so are their model calls
    assert attributes(paused)["gen_ai.conversation.id"] == "r1"
    assert attributes(restored)["gen_ai.conversation.id"] == "r1"
    assert {attributes(c)["gen_ai.conversation.id"] for c in telemetry.named("chat small")} == {
        "r1"
    }


def test_a_run_resumed_in_another_process_links_to_the_killed_processes_run(
    tmp_path: Path,
) -> None:
    db, log = tmp_path / "runs.db", tmp_path / "tools.log"

    def worker(mode: str, spans: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tests._otel_worker", str(spans), mode, str(db), str(log)]
        return subprocess.run([*argv, "r1"], cwd=ROOT, capture_output=True, text=True, timeout=60)

    def read(spans: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in spans.read_text().splitlines()]

    killed = worker("kill-after-executed", tmp_path / "first.jsonl")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    first = read(tmp_path / "first.jsonl")
    # the killed run's span never ended; its states' spans did and name it as their parent
    assert "invoke_agent" not in [s["name"] for s in first]
    states = [s for s in first if s["name"].startswith("agentfsm.")]
    assert [s["name"] for s in states] == [
        "agentfsm.expanding",
        "agentfsm.calling",
        "agentfsm.interrupt_check",
        "agentfsm.executing",
    ]
    killed_run = {(s["trace_id"], s["parent"]) for s in states}
    assert len(killed_run) == 1

    resumed = worker("resume", tmp_path / "second.jsonl")
    assert resumed.returncode == 0, resumed.stderr
    second = read(tmp_path / "second.jsonl")
    [run] = [s for s in second if s["name"] == "invoke_agent"]
    assert run["attributes"]["agentfsm.run.id"] == "r1"
    assert run["attributes"]["agentfsm.entry"] == "propagating"
    assert run["attributes"]["agentfsm.terminal"] == "ok"
    assert {tuple(link) for link in run["links"]} == killed_run


def test_a_damaged_trace_context_in_a_saved_reply_is_no_link(telemetry: Telemetry) -> None:
    damaged = attrs.evolve(call_tool("add", a=1, b=1), metadata={"traceparent": "00-zz-1-01"})
    assert otel.previous_run_link([damaged]) is None
    assert otel.previous_run_link([Message.user("hi")]) is None
    chain = LLMChain(ScriptedModel([say("2")]), tools=[add]).add_messages(
        [Message.user("1+1?"), damaged, Message.tool([])]
    )
    result = StandardMode().start(chain).run_sync()
    assert type(result).__name__ == "Ok"
    assert not one(telemetry.named("invoke_agent")).links


# ---------------------------------------------------------------- off


def test_after_uninstrument_runs_make_no_spans(telemetry: Telemetry) -> None:
    otel.uninstrument()
    state = adder().execute_sync(AgentState.of("add 1 and 2"))
    assert state.status == "ok"
    assert telemetry.spans == []
    assert all("traceparent" not in m.metadata for m in state.messages)


def test_the_engine_never_imports_opentelemetry() -> None:
    code = """if True:
        import sys
        import agentfsm._cli._main, agentfsm.store
        from agentfsm import Agent, AgentState
        from agentfsm.providers import ScriptedModel, say
        state = Agent(ScriptedModel([say("hi")])).execute_sync(AgentState.of("hi"))
        assert state.status == "ok", state
        print(sorted(m for m in sys.modules if m.startswith(("opentelemetry", "agentfsm.otel"))))
    """
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_without_state_spans_calls_are_children_of_the_run(telemetry: Telemetry) -> None:
    otel.instrument(telemetry.tracer_provider, telemetry.meter_provider, states=False)
    adder().execute_sync(AgentState.of("add 1 and 2"))
    root = one(telemetry.named("invoke_agent"))
    assert [s.name for s in telemetry.children(root)] == [
        "chat small",
        "execute_tool add",
        "chat small",
    ]
    assert len(telemetry.spans) == 4
    assert attributes(root)["agentfsm.terminal"] == "ok"


def test_the_docs_example_prints_the_runs_spans() -> None:
    page = (ROOT / "docs" / "observability.md").read_text()
    (code,) = re.findall(r"## OpenTelemetry\n.*?```python\n(.*?)```", page, re.S)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    names = re.findall(r'"name": "([^"]+)"', out.stdout)
    assert names.count("invoke_agent") == 1
    assert names.count("chat scripted") == 2
    assert names.count("execute_tool add") == 1


def test_a_traced_runs_chain_is_saved_and_copied_like_any_other(telemetry: Telemetry) -> None:
    agent = adder()
    run = agent.start(AgentState.of("add 1 and 2"))
    run.run_sync()
    document = serialization.dump(run.chain)
    loaded = serialization.load(document, LLMChain, models={"acme:small": agent.model}, tools=[add])
    assert loaded.llm is agent.model and loaded.tools == (add,)
    assert [m.text for m in loaded.messages] == [m.text for m in run.chain.messages]
    copied = copy.deepcopy(run.chain)
    assert copied.llm.name == "acme:small"
    assert [t.name for t in copied.tools] == ["add"]


def test_the_host_tags_a_runs_span(telemetry: Telemetry) -> None:
    run = adder().start(AgentState.of("add 1 and 2"))
    span = otel.run_span(run)
    assert span is not None
    span.set_attribute("tenant", "acme")
    run.run_sync()
    assert attributes(one(telemetry.named("invoke_agent")))["tenant"] == "acme"
    otel.uninstrument()
    assert otel.run_span(adder().start(AgentState.of("x"))) is None


async def test_concurrent_runs_on_one_model_keep_their_own_trees(telemetry: Telemetry) -> None:
    def script(messages: Sequence[Message]) -> Message:
        if messages[-1].role == "user":
            return call_tool("add", a=len(messages[-1].text), b=0)
        return say("done")

    agent = Agent(ScriptedModel(script, delay=0.01), [add])
    await asyncio.gather(agent.execute(AgentState.of("one")), agent.execute(AgentState.of("three")))
    roots = telemetry.named("invoke_agent")
    assert len(roots) == 2
    for root in roots:
        states = telemetry.children(root)
        assert len(states) == 14
        calls = [c.name for s in states for c in telemetry.children(s)]
        assert calls == ["chat scripted", "execute_tool add", "chat scripted"]
    assert len(telemetry.spans) == 2 + 2 * (14 + 3)


def test_a_run_the_sampler_leaves_out_is_still_counted() -> None:
    t = Telemetry()
    t.tracer_provider = TracerProvider(sampler=ALWAYS_OFF)
    t.tracer_provider.add_span_processor(SimpleSpanProcessor(t.exporter))
    otel.instrument(t.tracer_provider, t.meter_provider)
    try:
        state = adder().execute_sync(AgentState.of("add 1 and 2"))
    finally:
        otel.uninstrument()
    assert state.status == "ok"
    assert t.spans == []
    assert [p.value for _, p in t.points("agentfsm.runs")] == [1]
    assert [p.count for _, p in t.points("agentfsm.tool.duration")] == [1]


def test_a_fallback_models_call_names_the_model_that_answered(telemetry: Telemetry) -> None:
    model = FallbackModel(
        ScriptedModel([fail("server_error")], model_name="acme:big"),
        ScriptedModel([say("hi")], model_name="acme:small"),
    )
    assert Agent(model).execute_sync(AgentState.of("hi")).status == "ok"
    chat = one(telemetry.named("chat fallback(acme:big, acme:small)"))
    assert attributes(chat)["gen_ai.provider.name"] == "acme"  # the provider they share
    assert attributes(chat)["gen_ai.response.model"] == "acme:small"
    mixed = FallbackModel(ScriptedModel([say("hi")], model_name="acme:big"), ScriptedModel([]))
    assert provider_of(mixed) == "agentfsm.fallback"


# ---------------------------------------------------------------- the GenAI conventions


def test_a_named_agents_run_is_an_invoke_agent_span_of_its_name(telemetry: Telemetry) -> None:
    agent = Agent(ScriptedModel([call_tool("add", a=1, b=2), say("3")]), [add], name="Math Tutor")
    agent.execute_sync(AgentState.of("add 1 and 2"))
    root = one(telemetry.named("invoke_agent Math Tutor"))
    conversation = attributes(root)["gen_ai.conversation.id"]
    assert attributes(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "Math Tutor",
        "gen_ai.provider.name": "agentfsm.scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.conversation.id": conversation,
        "agentfsm.machine": "standard",
        "agentfsm.entry": "expanding",
        "agentfsm.terminal": "ok",
        "agentfsm.run.id": conversation,
    }
    assert {attributes(c)["gen_ai.conversation.id"] for c in telemetry.named("chat scripted")} == {
        conversation
    }
    [(point, duration)] = telemetry.points("gen_ai.invoke_agent.duration")
    assert point == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "Math Tutor",
        "agentfsm.machine": "standard",
        "agentfsm.terminal": "ok",
    }
    assert duration.count == 1 and duration.sum > 0
    [(tool_point, tool_duration)] = telemetry.points("gen_ai.execute_tool.duration")
    assert tool_point == {
        "gen_ai.tool.name": "add",
        "gen_ai.tool.type": "function",
        "gen_ai.agent.name": "Math Tutor",
    }
    assert tool_duration.count == 1
    # the names of the earlier release are still recorded, for one release
    assert [p.value for _, p in telemetry.points("agentfsm.runs")] == [1]
    assert [p.count for _, p in telemetry.points("agentfsm.tool.duration")] == [1]


def test_an_agents_name_is_a_non_empty_string() -> None:
    model = ScriptedModel([say("hi")])
    assert Agent(model).name is None
    assert Agent(model, name="helper").name == "helper"
    with pytest.raises(TypeError, match="name must be str"):
        Agent(model, name=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        Agent(model, name=" ")


def test_a_failed_tool_call_is_an_error_of_the_tool_duration(telemetry: Telemetry) -> None:
    Agent(ScriptedModel([call_tool("boom"), say("sorry")]), [boom]).execute_sync(
        AgentState.of("break")
    )
    [(point, _)] = telemetry.points("gen_ai.execute_tool.duration")
    assert point == {
        "gen_ai.tool.name": "boom",
        "gen_ai.tool.type": "function",
        "error.type": "tool_error",
    }


def test_a_resumed_run_keeps_the_conversation_id(telemetry: Telemetry) -> None:
    agent = Agent(
        ScriptedModel([call_tool("write_file", path="a.txt", text="hi"), say("written")]),
        [write_file],
        middleware=[HumanInTheLoop({"write_file": True})],
        name="writer",
    )
    first = agent.execute_sync(AgentState.of("write a.txt"))
    assert first.status == "interrupted"
    second = agent.resume_sync(first, [{"type": "approve"}], unbound=True)
    assert second.status == "ok"
    first_span, second_span = sorted(
        telemetry.named("invoke_agent writer"), key=lambda s: s.start_time or 0
    )
    conversation = attributes(first_span)["gen_ai.conversation.id"]
    assert attributes(second_span)["gen_ai.conversation.id"] == conversation
    assert attributes(second_span)["agentfsm.run.id"] == conversation
    assert {m.metadata["conversation_id"] for m in second.messages if m.role == "assistant"} == {
        conversation
    }
    # a new conversation is a new id
    Agent(ScriptedModel([say("hi")]), name="writer").execute_sync(AgentState.of("hi"))
    third = [
        s for s in telemetry.named("invoke_agent writer") if s not in (first_span, second_span)
    ]
    assert attributes(one(third))["gen_ai.conversation.id"] != conversation


class _Configured(WrapperModel):
    """A model with settings, as the HTTP providers have them."""

    def __init__(self, model: ScriptedModel, settings: ModelSettings) -> None:
        super().__init__(model)
        self.settings = settings


def test_token_details_and_request_settings_are_described(telemetry: Telemetry) -> None:
    usage = {
        "input_tokens": 100,
        "output_tokens": 40,
        "cache_read_tokens": 60,
        "cache_write_tokens": 25,
        "reasoning_tokens": 30,
    }
    model = _Configured(
        ScriptedModel([attrs.evolve(say("hi"), metadata={"usage": usage})]),
        ModelSettings(
            temperature=0,
            max_tokens=512,
            extra={"top_p": 0.9, "seed": 7, "stop": "END", "frequency_penalty": 0.5, "user": "u"},
        ),
    )
    Agent(model).execute_sync(AgentState.of("hi"))
    chat = attributes(one(telemetry.named("chat scripted")))
    assert {k: v for k, v in chat.items() if k.startswith(("gen_ai.usage", "gen_ai.request"))} == {
        "gen_ai.request.model": "scripted",
        "gen_ai.request.temperature": 0.0,
        "gen_ai.request.max_tokens": 512,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.seed": 7,
        "gen_ai.request.stop_sequences": ("END",),
        "gen_ai.request.frequency_penalty": 0.5,
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 60,
        "gen_ai.usage.cache_creation.input_tokens": 25,
        "gen_ai.usage.reasoning.output_tokens": 30,
    }
    tokens = {
        a["gen_ai.token.type"]: p.sum for a, p in telemetry.points("gen_ai.client.token.usage")
    }
    assert tokens == {"input": 100, "output": 40}


class _OwnModel:
    """A model of the host's own: a name and a call, nothing else."""

    name = "house-model"

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Any], **kw: Any
    ) -> Message:
        return say("hi")


def test_every_model_names_a_provider(telemetry: Telemetry) -> None:
    assert provider_of(ScriptedModel([])) == "agentfsm.scripted"
    assert provider_of(ScriptedModel([], model_name="acme:small")) == "acme"
    assert provider_of(_OwnModel()) == "agentfsm.custom"
    assert provider_of(OpenAIChat("gpt-test", api_key="sk-test")) == "openai"
    Agent(_OwnModel()).execute_sync(AgentState.of("hi"))
    chat = attributes(one(telemetry.named("chat house-model")))
    assert chat["gen_ai.provider.name"] == "agentfsm.custom"
    [(point, _)] = telemetry.points("gen_ai.client.operation.duration")
    assert point == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "agentfsm.custom",
        "gen_ai.request.model": "house-model",
    }


async def test_a_model_over_http_names_its_server(telemetry: Telemetry) -> None:
    server = FakeServer("/v1")
    server.push(
        Reply(
            200,
            {
                "id": "chatcmpl-1",
                "model": "gpt-test-0601",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hi"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": 20,
                    "completion_tokens": 8,
                    "prompt_tokens_details": {"cached_tokens": 16},
                    "completion_tokens_details": {"reasoning_tokens": 4},
                },
            },
        )
    )
    model = OpenAIChat(
        "gpt-test",
        api_key="sk-test",
        base_url=server.url,
        settings=ModelSettings(temperature=0.2, max_tokens=64),
    )
    try:
        state = await Agent(model, name="greeter").execute(AgentState.of("hi"))
    finally:
        await model.aclose()
        server.close()
    assert state.status == "ok", state.error
    host, port = server.url.split("//")[1].split("/")[0].split(":")
    chat = attributes(one(telemetry.named("chat gpt-test")))
    conversation = attributes(one(telemetry.named("invoke_agent greeter")))[
        "gen_ai.conversation.id"
    ]
    assert chat == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "server.address": host,
        "server.port": int(port),
        "gen_ai.conversation.id": conversation,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.response.model": "gpt-test-0601",
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 8,
        "gen_ai.usage.cache_read.input_tokens": 16,
        "gen_ai.usage.reasoning.output_tokens": 4,
    }
    [(point, _)] = telemetry.points("gen_ai.client.operation.duration")
    assert point == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.response.model": "gpt-test-0601",
        "server.address": host,
        "server.port": int(port),
    }


def test_a_typed_answer_is_asked_for_as_json(telemetry: Telemetry) -> None:
    model = ScriptedModel([call_tool("final_result", result=42)])
    state = Agent(model, output_type=int, name="counter").execute_sync(AgentState.of("count"))
    assert state.output == 42
    chat = attributes(one(telemetry.named("chat scripted")))
    assert chat["gen_ai.output.type"] == "json"
    root = one(telemetry.named("invoke_agent counter"))
    assert attributes(root)["agentfsm.machine"] == "standard_output"
    assert [s.name for s in telemetry.children(root)][-2:] == [
        "agentfsm.deciding",
        "agentfsm.validating_output",
    ]
    tool_span = one(telemetry.named("execute_tool final_result"))
    assert attributes(tool_span)["gen_ai.tool.name"] == "final_result"


def test_a_subagents_run_span_nests_under_the_tool_call_that_ran_it(telemetry: Telemetry) -> None:
    from agentfsm import SubAgent

    child = Agent(ScriptedModel([say("found it")]), [], name="researcher")
    parent = Agent(
        ScriptedModel([call_tool("research", task="look"), say("done")]),
        [SubAgent("research", "finds things", child)],
        name="coordinator",
    )
    assert parent.execute_sync(AgentState.of("go")).status == "ok"
    coordinator = one(telemetry.named("invoke_agent coordinator"))
    researcher = one(telemetry.named("invoke_agent researcher"))
    call = one(telemetry.named("execute_tool research"))
    assert researcher.parent is not None and call.context is not None
    assert researcher.parent.span_id == call.context.span_id
    assert call.parent is not None and coordinator.context is not None
    executing = [s for s in telemetry.children(coordinator) if s.name == "agentfsm.executing"]
    assert call.parent.span_id in {s.context.span_id for s in executing if s.context}
    assert researcher.context is not None and coordinator.context is not None
    assert researcher.context.trace_id == coordinator.context.trace_id  # one trace, one tree
