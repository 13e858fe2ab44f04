"""OpenTelemetry spans and metrics for runs, so they show next to the request that started them.

``instrument()`` turns it on for every run of a machine (an :class:`~agentfsm.Agent`'s,
a :class:`~agentfsm.modes.StandardMode`'s) started afterwards; ``uninstrument()`` turns it off.
Each run gets an ``invoke_agent`` span (``invoke_agent {name}`` for a named
:class:`~agentfsm.Agent`), a child span per state it visits, and spans for its model and
tool calls, named and described by OpenTelemetry's GenAI semantic conventions: the run's
``gen_ai.conversation.id`` is its id, the same for every run that continues it. Message
contents are recorded only when asked for (``capture_content``).

The metrics are the conventions' (``gen_ai.client.operation.duration``,
``gen_ai.client.token.usage``, ``gen_ai.invoke_agent.duration``,
``gen_ai.execute_tool.duration``). The names of earlier releases (``agentfsm.runs``,
``agentfsm.tool.duration``, ``agentfsm.tool.errors``) are still recorded, for this release
only, so dashboards can move over.

Nothing here is imported by the engine: without ``instrument()`` a run costs what it
always did. It works through the engine's public seams: a global run hook
(:func:`agentfsm.hooks.add_global_hook`) sees every new run, wraps the run's model and
tools (:class:`~agentfsm.providers.WrapperModel`, :class:`~agentfsm.tools.WrapperTool`:
by name, as they are saved, so checkpoints do not change shape) and attaches a hook of
the run's own that hears its transitions and its end.

A run that continues another (a resumed approval, a paused or restored run, on this
worker or another) links to the run span of the one it continues: every reply a traced
run receives carries that run's W3C ``traceparent`` in its metadata, which travels with
the conversation wherever it is saved (the store, an :class:`~agentfsm.AgentState`, a
durable engine's record). :func:`previous_run_link` reads it back. The replies carry
the run's conversation id too (``conversation_id``), so a run that continues one
without a store keeps its id.

One idea: instrumenting runs. The spans, the metrics and the wrapped model and tool
calls follow one set of conventions and are turned on and off together.
"""

from __future__ import annotations

import copy
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise ImportError(
        "agentfsm.otel needs the OpenTelemetry API: pip install 'agentfsm[otel]'"
    ) from exc

from agentfsm._chat_model import (
    ChatModel,
    DeltaHandler,
    ModelSettings,
    native_output,
    provider_of,
    split_model_name,
)

from ._errors import ChainError
from ._hooks import add_global_hook
from ._messages import Message, ToolCall, ToolResult
from ._results import Failed
from ._run import Run
from ._tools import Tool, ToolContext, WrapperTool
from ._trace import Transition
from .providers import WrapperModel

__all__ = ["instrument", "previous_run_link", "run_span", "uninstrument"]

#: The reply metadata key holding the W3C trace context of the run that received it.
TRACEPARENT: Final = "traceparent"
#: The reply metadata key holding the conversation id of the run that received it.
CONVERSATION_ID: Final = "conversation_id"
_CAPTURE_VARIABLE: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_SCOPE: Final = "agentfsm"
_TRACEPARENT_FORMAT: Final = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

# The GenAI semantic conventions' advice for histogram buckets.
_DURATION_BUCKETS: Final = [0.01 * 2**n for n in range(14)]
_TOKEN_BUCKETS: Final = [float(4**n) for n in range(14)]
_AGENT_BUCKETS: Final = [0.1 * 2**n for n in range(13)]
#: ``Usage`` keys and the span attributes the conventions give them.
_TOKEN_DETAILS: Final = {
    "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
    "cache_write_tokens": "gen_ai.usage.cache_creation.input_tokens",
    "reasoning_tokens": "gen_ai.usage.reasoning.output_tokens",
}
#: ``ModelSettings.extra`` keys and the request attributes the conventions give them.
_REQUEST_EXTRAS: Final = {
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "stop": "gen_ai.request.stop_sequences",
    "stop_sequences": "gen_ai.request.stop_sequences",
}


# ---------------------------------------------------------------- turning it on


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    *,
    capture_content: bool | None = None,
    states: bool = True,
) -> None:
    """Trace and measure every run started from now on.

    The providers default to the global ones (``opentelemetry.trace`` and
    ``opentelemetry.metrics``). ``capture_content`` records the messages sent to and
    received from the model and tools' arguments and results; it defaults to the
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` environment variable
    (``true``), and is off otherwise: conversations often hold what should not leave
    the process. ``states=False`` leaves out the span per state (model and tool calls
    are then children of the run span): the states cost most of the spans, see
    ``benchmarks/otel.py``. Calling it again replaces the previous settings.
    """
    global _active, _remove
    if capture_content is None:
        capture_content = os.environ.get(_CAPTURE_VARIABLE, "").strip().lower() == "true"
    uninstrument()
    _active = _Telemetry(
        trace.get_tracer(_SCOPE, tracer_provider=tracer_provider),
        metrics.get_meter(_SCOPE, meter_provider=meter_provider),
        capture_content,
        states,
    )
    _remove = add_global_hook(_active)


def uninstrument() -> None:
    """Stop tracing runs started from now on (runs under way finish their spans)."""
    global _active, _remove
    if _remove is not None:
        _remove()
        _active = _remove = None


_active: _Telemetry | None = None
_remove: Callable[[], None] | None = None


def previous_run_link(messages: Sequence[Message]) -> Link | None:
    """The link to the run span of the run that received the last reply in ``messages``.

    A run over a conversation that an earlier traced run worked on (a resume after an
    approval, a paused run restored, a run restored on another worker) continues that
    run; this is how its span says so. None when the last reply carries no valid
    trace context (it was not traced, or the value was damaged).
    """
    for message in reversed(messages):
        if message.role == "assistant":
            parent = _parse(message.metadata.get(TRACEPARENT))
            if parent is None:
                return None
            return Link(parent, {"agentfsm.link": "continues"})
    return None


def run_span(run: Run) -> trace.Span | None:
    """The ``invoke_agent`` span of a traced run, for the host to add its own attributes
    (a tenant, a request id) or links; None when the run is not traced."""
    for hook in run.hooks:
        if isinstance(hook, _RunSpans):
            return hook.span
    return None


def _parse(value: Any) -> SpanContext | None:
    match = _TRACEPARENT_FORMAT.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    context = SpanContext(
        int(match[1], 16),
        int(match[2], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(match[3], 16)),
    )
    return context if context.is_valid else None


def _format(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


# ---------------------------------------------------------------- the instruments


class _Telemetry:
    """A tracer, the meters and the content switch: what one ``instrument()`` set up."""

    def __init__(
        self, tracer: trace.Tracer, meter: metrics.Meter, capture: bool, states: bool
    ) -> None:
        self.tracer = tracer
        self.capture = capture
        self.states = states
        histogram = meter.create_histogram
        self.agent_duration = histogram(
            "gen_ai.invoke_agent.duration",
            unit="s",
            description="Duration of runs, by terminal.",
            explicit_bucket_boundaries_advisory=_AGENT_BUCKETS,
        )
        self.model_duration = _seconds(meter, "gen_ai.client.operation.duration", "model calls")
        self.tool_executions = _seconds(meter, "gen_ai.execute_tool.duration", "tool calls")
        self.tokens = histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used by model calls, by token type.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        # The names of earlier releases, recorded for one more release.
        self.runs = meter.create_counter(
            "agentfsm.runs",
            unit="{run}",
            description="Runs that ended, by terminal (deprecated: gen_ai.invoke_agent.duration).",
        )
        self.tool_duration = _seconds(
            meter, "agentfsm.tool.duration", "tool calls (deprecated: gen_ai.execute_tool.duration)"
        )
        self.tool_errors = meter.create_counter(
            "agentfsm.tool.errors",
            unit="{call}",
            description="Failed tool calls (deprecated: gen_ai.execute_tool.duration, error.type).",
        )

    def run_started(self, run: Run) -> None:
        """Trace ``run``: its own hook holds its spans."""
        run.add_hook(_RunSpans(self, run))


def _seconds(meter: metrics.Meter, name: str, what: str) -> metrics.Histogram:
    """A histogram of durations with the conventions' buckets."""
    return meter.create_histogram(
        name,
        unit="s",
        description=f"Duration of {what}.",
        explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
    )


# ---------------------------------------------------------------- one run


class _RunSpans:
    """One run's spans: its own, the open state's, and the model and tool calls in it
    (the run's hook: a state's span ends at its transition, the run's at its end).

    A state's span opens when the state's first model or tool call starts (so that
    call is its child) or, for states that call nothing, when the transition out of
    it is recorded, back-dated by the time the state's work took. Either way a step
    driven by hand, with pauses between steps, does not count the pauses.

    Who runs (the agent's name) and the id the run is saved under are known only
    once the run was made (an agent names its run, a store checkpoints it, after
    ``run_started``): the run span is named and given its conversation id at the
    run's first call or transition (:meth:`identify`).
    """

    __slots__ = (
        "_context",
        "_run",
        "_started",
        "_state",
        "_state_context",
        "_states",
        "agent",
        "conversation_id",
        "span",
        "telemetry",
        "traceparent",
    )

    def __init__(self, telemetry: _Telemetry, run: Run) -> None:
        self.telemetry = telemetry
        self._run = run
        chain = run.chain
        link = previous_run_link(chain.messages)
        model = chain.llm.wrapped if isinstance(chain.llm, _TracedModel) else chain.llm
        self.span = telemetry.tracer.start_span(
            "invoke_agent",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": provider_of(model),
                "gen_ai.request.model": _request_model(model),
                "agentfsm.machine": run.table.name,
                "agentfsm.entry": run.trace.entry,
            },
            links=(link,) if link is not None else None,
        )
        self._started = time.perf_counter()
        self._context = trace.set_span_in_context(self.span)
        context = self.span.get_span_context()
        #: What the run's replies carry, so a run that continues them links back here.
        self.traceparent = _format(context) if context.is_valid else None
        #: The run's id and its agent's name, once known (:meth:`identify`).
        self.conversation_id: str | None = None
        self.agent: str | None = None
        # A run the sampler left out (or a no-op provider) gets no state spans: they
        # would be dropped, and they are most of the cost.
        self._states = telemetry.states and self.span.is_recording()
        self._state: trace.Span | None = None
        self._state_context = self._context
        run.chain = attrs.evolve(
            chain,
            llm=_TracedModel(chain.llm, self),
            tools=tuple(_TracedTool.of(t, self) for t in chain.tools),
        )

    def identify(self) -> str:
        """The run's conversation id; the first time, the run span is named too."""
        if self.conversation_id is not None:
            return self.conversation_id
        run = self._run
        self.conversation_id = _run_id(run)
        span = self.span
        span.set_attribute("gen_ai.conversation.id", self.conversation_id)
        agent = getattr(getattr(run, "agent", None), "name", None)
        if isinstance(agent, str):
            self.agent = agent
            span.update_name("invoke_agent " + agent)
            span.set_attribute("gen_ai.agent.name", agent)
        return self.conversation_id

    def state_context(self) -> otel_context.Context:
        """The context of the current state's span, opened now if it is not open yet."""
        self.identify()
        if self._state is None and self._states:
            state = self._run.state
            self._state = self.telemetry.tracer.start_span(
                "agentfsm." + state, self._context, attributes={"agentfsm.state": state}
            )
            self._state_context = trace.set_span_in_context(self._state)
        return self._state_context

    def transition(self, run: Run, transition: Transition) -> None:
        self.identify()
        if self._states:
            self._end_state(run, transition)

    def _end_state(self, run: Run, transition: Transition) -> None:
        span, end = self._state, None
        attributes = {
            "agentfsm.trigger": transition.trigger,
            "agentfsm.destination": transition.dest,
        }
        if span is None:
            end = time.time_ns()
            attributes["agentfsm.state"] = transition.source
            span = self.telemetry.tracer.start_span(
                "agentfsm." + transition.source,
                self._context,
                attributes=attributes,
                start_time=end - int(transition.elapsed * 1e9),
            )
        else:
            span.set_attributes(attributes)
            self._state = None
        result = run.result
        if isinstance(result, Failed):
            span.set_attribute("error.type", result.error.type)
            span.set_status(Status(StatusCode.ERROR, result.error.message))
        span.end(end)

    def run_ended(self, run: Run) -> None:
        span = self.span
        run_id = self.identify()
        terminal = run.state
        result = run.result
        span.set_attribute("agentfsm.terminal", terminal)
        span.set_attribute("agentfsm.run.id", run_id)
        attributes = {"agentfsm.machine": run.table.name, "agentfsm.terminal": terminal}
        if isinstance(result, Failed):
            span.set_attribute("error.type", result.error.type)
            span.set_status(Status(StatusCode.ERROR, result.error.message))
            attributes["error.type"] = result.error.type
        reason = run.chain.custom_context.get("pause_reason")
        if terminal == "paused" and reason is not None:
            span.set_attribute("agentfsm.pause_reason", str(reason))
        span.end()
        measured = {"gen_ai.operation.name": "invoke_agent", **attributes}
        if self.agent is not None:
            measured["gen_ai.agent.name"] = self.agent
        self.telemetry.agent_duration.record(time.perf_counter() - self._started, measured)
        self.telemetry.runs.add(1, attributes)


def _run_id(run: Run) -> str:
    """The id the run is saved under (its checkpointer's); else the one the run it
    continues gave its replies; else a fresh one."""
    for hook in run.hooks:
        run_id = getattr(hook, "run_id", None)
        if isinstance(run_id, str):
            return run_id
    for message in reversed(run.chain.messages):
        if message.role == "assistant":
            carried = message.metadata.get(CONVERSATION_ID)
            if isinstance(carried, str) and carried:
                return carried
            break
    return uuid.uuid4().hex


def _request_model(model: ChatModel) -> str:
    """The model asked for: its own ``model``, else the model part of its name."""
    own = getattr(model, "model", None)
    return own if isinstance(own, str) else split_model_name(model.name)[1]


def _output_type(tools: Sequence[Tool]) -> dict[str, str]:
    """``gen_ai.output.type`` of a call that asks for a typed final answer (JSON)."""
    return {"gen_ai.output.type": "json"} if native_output(tools)[1] is not None else {}


def _request_attributes(model: ChatModel) -> dict[str, Any]:
    """What the model's address and settings say of its calls, as the conventions name it."""
    attributes: dict[str, Any] = {}
    address = getattr(model, "server_address", None)
    if isinstance(address, str) and address:
        attributes["server.address"] = address
        port = getattr(model, "server_port", None)
        if isinstance(port, int):
            attributes["server.port"] = port
    settings = getattr(model, "settings", None)
    if not isinstance(settings, ModelSettings):
        return attributes
    if settings.temperature is not None:
        attributes["gen_ai.request.temperature"] = float(settings.temperature)
    if settings.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = settings.max_tokens
    for key, name in _REQUEST_EXTRAS.items():
        value = settings.extra.get(key)
        if isinstance(value, str) and key.startswith("stop"):
            value = (value,)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = tuple(value)
        if isinstance(value, int | float | tuple) and not isinstance(value, bool):
            attributes[name] = value
    return attributes


# ---------------------------------------------------------------- the calls


class _TracedModel(WrapperModel):
    """The run's model: each call a ``chat`` span of the state making it."""

    __slots__ = ("_attributes", "_name", "_request", "_spans")

    def __init__(self, model: ChatModel, spans: _RunSpans) -> None:
        # A chain that a traced run already worked on carries a traced model: unwrap it.
        super().__init__(model.wrapped if isinstance(model, _TracedModel) else model)
        self._spans = spans
        request_model = _request_model(self.wrapped)
        request = _request_attributes(self.wrapped)
        self._name = "chat " + request_model
        self._attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_of(self.wrapped),
            "gen_ai.request.model": request_model,
            **{k: v for k, v in request.items() if k.startswith("server.")},
        }
        self._request = request

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        spans = self._spans
        telemetry = spans.telemetry
        attributes = dict(self._attributes)
        context = spans.state_context()
        span = telemetry.tracer.start_span(
            self._name,
            context,
            kind=SpanKind.CLIENT,
            attributes={
                **attributes,
                **self._request,
                **_output_type(tools),
                "gen_ai.conversation.id": spans.identify(),
            },
            record_exception=False,
        )
        if telemetry.capture:
            span.set_attribute("gen_ai.input.messages", _json(_wire(m) for m in messages))
        token = otel_context.attach(trace.set_span_in_context(span))
        started = time.perf_counter()
        try:
            reply: Message = await self.wrapped.complete(messages, tools, on_delta=on_delta)
        except BaseException as exc:
            if isinstance(exc, ChainError):
                error_type, message = exc.type, exc.message
            else:
                error_type, message = type(exc).__qualname__, str(exc)
            attributes["error.type"] = error_type
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, message))
            raise
        else:
            if isinstance(reply, Message):
                reply = self._received(span, attributes, reply)
            return reply
        finally:
            otel_context.detach(token)
            span.end()
            telemetry.model_duration.record(time.perf_counter() - started, attributes)

    def _received(self, span: trace.Span, attributes: dict[str, Any], reply: Message) -> Message:
        """Describe the reply on the span, count its tokens, and stamp it with the run."""
        telemetry = self._spans.telemetry
        metadata = reply.metadata
        answered = metadata.get("response_model") or metadata.get("model")
        described: dict[str, Any] = {"gen_ai.response.finish_reasons": (_finish_reason(reply),)}
        if isinstance(answered, str):
            described["gen_ai.response.model"] = attributes["gen_ai.response.model"] = answered
        response_id = metadata.get("response_id")
        if isinstance(response_id, str):
            described["gen_ai.response.id"] = response_id
        usage = metadata.get("usage")
        if isinstance(usage, Mapping):
            for kind in ("input", "output"):
                count = usage.get(kind + "_tokens")
                if isinstance(count, int):
                    described[f"gen_ai.usage.{kind}_tokens"] = count
                    telemetry.tokens.record(count, {**attributes, "gen_ai.token.type": kind})
            for key, name in _TOKEN_DETAILS.items():
                count = usage.get(key)
                if isinstance(count, int) and count:
                    described[name] = count
        if telemetry.capture:
            described["gen_ai.output.messages"] = _json([_wire(reply)])
        span.set_attributes(described)
        traceparent = self._spans.traceparent
        if traceparent is None:
            return reply
        stamp = {TRACEPARENT: traceparent, CONVERSATION_ID: self._spans.identify()}
        return attrs.evolve(reply, metadata={**metadata, **stamp})

    def __deepcopy__(self, memo: dict[int, Any]) -> _TracedModel:
        """A copy of the model, still traced as this run's (a span is not copied)."""
        return _TracedModel(copy.deepcopy(self.wrapped, memo), self._spans)

    def __repr__(self) -> str:
        return f"<traced {self.wrapped!r}>"


def _finish_reason(reply: Message) -> str:
    if reply.status == "length":
        return "length"
    if reply.status == "filtered":
        return "content_filter"
    return "tool_call" if reply.tool_calls else "stop"


@attrs.frozen
class _TracedTool(WrapperTool):
    """The run's tool: each call an ``execute_tool`` span of the state making it."""

    spans: _RunSpans | None = attrs.field(default=None, kw_only=True, repr=False, eq=False)

    @classmethod
    def of(cls, tool: Tool, spans: _RunSpans) -> _TracedTool:
        # A chain that a traced run already worked on carries traced tools: unwrap them.
        return cls.wrap(tool.wrapped if isinstance(tool, _TracedTool) else tool, spans=spans)

    def __deepcopy__(self, memo: dict[int, Any]) -> _TracedTool:
        return self  # a frozen value; its run's spans are not to be copied

    async def invoke(self, call: ToolCall, context: ToolContext) -> ToolResult:
        spans = self.spans
        assert spans is not None
        telemetry = spans.telemetry
        attributes = {"gen_ai.tool.name": self.name}
        parent = spans.state_context()
        measured = {**attributes, "gen_ai.tool.type": "function"}
        if spans.agent is not None:
            measured["gen_ai.agent.name"] = spans.agent
        span = telemetry.tracer.start_span(
            "execute_tool " + self.name,
            parent,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": self.name,
                "gen_ai.tool.call.id": call.call_id,
                "gen_ai.tool.type": "function",
            },
        )
        if telemetry.capture:
            span.set_attribute("gen_ai.tool.call.arguments", _json(call.arguments))
        token = otel_context.attach(trace.set_span_in_context(span))
        started = time.perf_counter()
        try:
            result = await super().invoke(call, context)
        except BaseException as exc:  # cancellation: the tool did not finish
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR, "the tool call did not finish"))
            span.end()
            raise
        finally:
            otel_context.detach(token)
        if telemetry.capture:
            span.set_attribute("gen_ai.tool.call.result", result.text)
        if result.is_interrupt:
            span.set_attribute("agentfsm.tool.interrupt", True)
        if result.is_error:
            # The error text is the tool's output: content, recorded only when asked for.
            span.set_attribute("error.type", "tool_error")
            span.set_status(
                Status(StatusCode.ERROR, result.text[:500] if telemetry.capture else None)
            )
            attributes["error.type"] = measured["error.type"] = "tool_error"
            telemetry.tool_errors.add(1, attributes)
        span.end()
        took = time.perf_counter() - started
        telemetry.tool_executions.record(took, measured)
        telemetry.tool_duration.record(took, attributes)
        return result


# ---------------------------------------------------------------- content


def _wire(message: Message) -> dict[str, Any]:
    """A message as the GenAI conventions write ``gen_ai.input.messages`` entries."""
    parts: list[dict[str, Any]] = []
    if message.text:
        parts.append({"type": "text", "content": message.text})
    parts.extend(
        {"type": "tool_call", "id": c.call_id, "name": c.name, "arguments": c.arguments}
        for c in message.tool_calls
    )
    parts.extend(
        {"type": "tool_call_response", "id": r.tool_call_id, "response": r.text}
        for r in message.tool_results
    )
    wire: dict[str, Any] = {"role": message.role, "parts": parts}
    if message.role == "assistant":
        wire["finish_reason"] = _finish_reason(message)
    return wire


def _json(value: Iterable[Any] | Mapping[str, Any]) -> str:
    if not isinstance(value, Mapping | list):
        value = list(value)
    return json.dumps(value, ensure_ascii=False, default=str)
