"""Round trips of every serialized value, and the documents' format guarantees."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    Agent,
    AgentState,
    ChainError,
    ContentPart,
    Failed,
    FormatError,
    Interrupted,
    LLMChain,
    Message,
    MessageExpansion,
    Ok,
    Paused,
    ToolCall,
    ToolResult,
    Trace,
    Transition,
    UnknownToolError,
)
from agentfsm._errors import RETRYABLE_TYPES
from agentfsm._messages import DEFAULT_RESULT_CONTENT, MessageLog
from agentfsm._results import Terminal
from agentfsm._serialization import (
    FORMAT,
    Binder,
    Packer,
    UnboundModel,
    Unpacker,
    compact_json,
    converter,
    dump_trace,
)
from agentfsm.providers import ScriptedModel, call_tool, say
from agentfsm.steps import Continue, PipelineResult
from agentfsm.store import dump, dumps, load, load_trace, loads
from tests.support import add, search, submit

MODELS = {"alpha": ScriptedModel([], model_name="alpha"), "beta": ScriptedModel([], "beta")}
TOOLS = (add, search, submit)
CALLBACKS = ({"on_error": lambda *_: None},)
BIND: dict[str, Any] = {"models": MODELS, "tools": TOOLS, "callbacks": CALLBACKS}

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- strategies

text = st.text(max_size=8)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
json_objects = st.dictionaries(text, json_values, max_size=3)

parts = st.builds(
    ContentPart,
    type=st.sampled_from(["text", "image_url", "file"]),
    content=text,
    options=json_objects,
)
contents = st.none() | text | st.lists(parts, max_size=3).map(tuple)
tool_calls = st.builds(
    ToolCall,
    call_id=st.text(min_size=1, max_size=6),
    name=st.sampled_from(["add", "search", "nope"]),
    arguments=json_objects,
    invalid_arguments=st.none() | text,
)
roles = st.sampled_from(["system", "user", "assistant", "tool"])
statuses = st.sampled_from(["complete", "cancelled", "length", "filtered"])
plain_messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant"]),
    content=contents,
    status=statuses,
    metadata=json_objects,
)
expansions = st.builds(
    MessageExpansion,
    messages=st.lists(plain_messages, min_size=1, max_size=2).map(tuple),
    result_content=contents | st.just(DEFAULT_RESULT_CONTENT),
)
tool_results = st.builds(
    ToolResult,
    tool_call_id=text,
    name=text,
    content=contents,
    is_error=st.booleans(),
    is_interrupt=st.booleans(),
    interrupt_data=st.none() | json_objects,
    state_updates=st.none() | json_objects,
    expansion=st.none() | expansions,
)
messages = st.builds(
    Message,
    role=roles,
    content=contents,
    tool_calls=st.lists(tool_calls, max_size=2).map(tuple),
    tool_results=st.lists(tool_results, max_size=2).map(tuple),
    status=statuses,
    metadata=json_objects,
)
errors = st.builds(
    lambda kind, message, retryable, details: ChainError(
        kind, message, retryable=retryable, details=details
    ),
    st.sampled_from(["until_tool_not_called", "exceeded_max_runs", *sorted(RETRYABLE_TYPES)]),
    text,
    st.none() | st.booleans(),
    json_objects,
)


@st.composite
def chains(draw: st.DrawFn, base: LLMChain | None = None) -> LLMChain:
    msgs = draw(st.lists(messages, max_size=4))
    if base is None:
        chain = LLMChain(
            draw(st.sampled_from(list(MODELS.values()))),
            tools=draw(st.lists(st.sampled_from(TOOLS), unique_by=lambda t: t.name, max_size=3)),
            callbacks=CALLBACKS,
        )
    else:
        chain = base
    chain = chain.add_messages(msgs)
    if draw(st.booleans()):
        chain = chain.clear_exchanged_messages()
    if chain.messages and draw(st.booleans()):
        chain = chain.replace_last_message(draw(messages))
    if draw(st.booleans()):
        chain = chain.update_custom_context(draw(json_objects))
    return LLMChain(
        chain.llm,
        tools=chain.tools,
        messages=chain.messages,
        exchanged_messages=chain.exchanged_messages,
        last_message=draw(st.none() | st.sampled_from([*chain.messages, *msgs] or [None])),
        needs_response=draw(st.booleans()),
        custom_context=chain.custom_context,
        callbacks=chain.callbacks,
        current_failure_count=draw(st.integers(0, 5)),
        max_retry_count=draw(st.integers(0, 5)),
    )


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    chain = draw(chains())
    transitions = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            chain = draw(chains(base=chain))
        transitions.append(
            Transition(
                draw(st.sampled_from(["expanding", "calling", "executing"])),
                draw(st.sampled_from(["expanded", "called", "paused"])),
                draw(st.sampled_from(["calling", "ok", "paused"])),
                chain,
                draw(st.floats(0, 10)),
                draw(st.none() | json_objects),
            )
        )
    return Trace(draw(st.sampled_from(["expanding", "propagating"])), transitions)


@st.composite
def results(draw: st.DrawFn) -> PipelineResult:
    chain = draw(chains())
    kind = draw(st.sampled_from(["continue", "ok", "paused", "interrupted", "failed"]))
    if kind == "continue":
        return Continue(chain)
    if kind == "ok":
        return Ok(chain, draw(st.none() | tool_results))
    if kind == "paused":
        return Paused(chain, draw(json_values))
    if kind == "interrupted":
        return Interrupted(chain, draw(json_objects))
    return Failed(chain, draw(errors))


agent_states = st.builds(
    AgentState,
    messages=st.lists(messages, max_size=3).map(tuple),
    state=json_objects,
    status=st.sampled_from(["new", "ok", "paused", "interrupted", "error"]),
    interrupt_data=st.none() | json_objects,
    pause_reason=json_values,
    error=st.none() | errors,
    tool_result=st.none() | tool_results,
)


def round_trip(value: Any, kind: Any = None) -> Any:
    text = dumps(value)
    json.loads(text)  # plain JSON
    return loads(text, kind or type(value), **BIND)


def same_error(a: ChainError | None, b: ChainError | None) -> None:
    assert a == b
    if a is not None and b is not None:
        assert (a.retryable, dict(a.details)) == (b.retryable, dict(b.details))


# ---------------------------------------------------------------- round trips


@SETTINGS
@given(st.one_of(parts, tool_calls, tool_results, expansions, messages))
def test_message_values_round_trip(value: Any) -> None:
    assert round_trip(value) == value


@SETTINGS
@given(errors)
def test_chain_error_round_trips_with_retryable_and_details(error: ChainError) -> None:
    same_error(round_trip(error), error)


@SETTINGS
@given(chains())
def test_chain_round_trips(chain: LLMChain) -> None:
    loaded = round_trip(chain)
    assert loaded == chain
    assert loaded.llm is chain.llm
    assert loaded.callbacks == CALLBACKS


@SETTINGS
@given(agent_states)
def test_agent_state_round_trips(state: AgentState) -> None:
    loaded = round_trip(state)
    assert loaded == state
    same_error(loaded.error, state.error)


@SETTINGS
@given(results())
def test_every_pipeline_result_round_trips(result: PipelineResult) -> None:
    loaded = round_trip(result, PipelineResult)
    assert type(loaded) is type(result)
    assert loaded == result
    if isinstance(result, Failed):
        assert isinstance(loaded, Failed)
        same_error(loaded.error, result.error)


@SETTINGS
@given(traces())
def test_trace_round_trips_with_every_chain(trace: Trace) -> None:
    loaded = load_trace(json.loads(json.dumps(dump_trace(trace))), **BIND)
    assert loaded == trace
    for got, want in zip(loaded, trace, strict=True):
        assert (got.chain, got.elapsed, got.detail) == (want.chain, want.elapsed, want.detail)


@SETTINGS
@given(traces())
def test_a_transition_alone_round_trips(trace: Trace) -> None:
    for transition in trace:
        loaded = round_trip(transition)
        assert (loaded, loaded.chain, loaded.detail) == (
            transition,
            transition.chain,
            transition.detail,
        )


@SETTINGS
@given(st.lists(messages, max_size=4))
def test_a_message_row_is_the_converters_text_to_the_byte(values: list[Message]) -> None:
    """The store writes messages without the converter where it can: the text is the same."""
    packer = Packer()
    for message in values:
        packer.message(message)
    assert packer.message_texts() == [
        compact_json(converter.unstructure(m, Message)) for m in values
    ]


@pytest.mark.parametrize(
    "metadata",
    [{"t": (1, 2)}, {"s": {3}}, {"b": b"raw"}, {"p": ContentPart.text("x")}, {1: "int key"}],
)
def test_a_message_whose_values_are_not_json_is_written_as_the_converter_writes_it(
    metadata: dict[Any, Any],
) -> None:
    values = [
        Message.assistant("hi", metadata=metadata),
        Message.assistant(None, [ToolCall("c", "add", metadata)]),
        Message.tool([ToolResult("c", "add", "2", is_error=True)]),
    ]
    texts = Packer()
    for message in values:
        texts.message(message)
    assert texts.message_texts() == [
        compact_json(converter.unstructure(m, Message)) for m in values
    ]


@SETTINGS
@given(st.lists(chains(), min_size=1, max_size=3))
def test_a_chain_record_is_the_records_text_to_the_byte(values: list[LLMChain]) -> None:
    texts, docs = Packer(), Packer()
    for chain in [*values, *values]:  # again: the tables already hold every part
        assert texts.chain_text(chain) == compact_json(docs.chain(chain))
    assert texts.message_texts() == [compact_json(d) for d in docs.message_docs()]


@st.composite
def runs_of_chains(draw: st.DrawFn) -> list[LLMChain]:
    """The chains of a run's transitions: each the one before, kept or grown as a run
    grows it (messages appended, context, counters), or changed another way."""
    chain = draw(chains())
    values = [chain]
    for _ in range(draw(st.integers(1, 8))):
        step = draw(
            st.sampled_from(["same", "add", "apart", "context", "failures", "flag", "other"])
        )
        if step == "add":
            chain = chain.add_messages(draw(st.lists(messages, min_size=1, max_size=2)))
        elif step == "apart":  # the two logs grow by different messages
            said, kept = draw(messages), draw(messages)
            chain = chain._replace(
                messages=chain.messages.append(said),
                exchanged_messages=chain.exchanged_messages.append(kept),
                last_message=said,
            )
        elif step == "context":
            chain = chain.update_custom_context(draw(json_objects))
        elif step == "failures":
            chain = chain._replace(current_failure_count=draw(st.integers(0, 5)))
        elif step == "flag":
            chain = chain._replace(needs_response=not chain.needs_response)
        elif step == "other":
            chain = draw(chains(base=chain))
        values.append(chain)
    return values


@SETTINGS
@given(runs_of_chains(), st.data())
def test_transition_rows_read_back_chain_for_chain(
    values: list[LLMChain], data: st.DataObject
) -> None:
    transitions = [Transition("a", "b", "c", chain, 0.5) for chain in values]
    packer = Packer()
    rows = packer.transition_rows(transitions, 0)
    cut = data.draw(st.integers(0, len(transitions)))  # as two checkpoints write them
    again = Packer()
    assert (
        again.transition_rows(transitions, 0)[:cut] + again.transition_rows(transitions, cut)
        == rows
    )
    records = [json.loads(text) for _, text in rows]
    assert "llm" in records[0]["chain"]
    binder = Binder(MODELS, TOOLS, CALLBACKS, strict=True)
    unpacker = Unpacker(packer.message_docs(), packer.context_docs(), binder)
    read = unpacker.transitions(records)
    for index, (written, back) in enumerate(zip(transitions, read, strict=True)):
        before, chain, loaded = values[index - 1], written.chain, back.chain
        if index > 0 and chain is before:  # one chain, as the run carried it
            assert records[index]["chain"] == {} and loaded is read[index - 1].chain
        assert (loaded.llm.name, [t.name for t in loaded.tools]) == (
            chain.llm.name,
            [t.name for t in chain.tools],
        )
        assert tuple(loaded.messages) == tuple(chain.messages)
        assert tuple(loaded.exchanged_messages) == tuple(chain.exchanged_messages)
        assert loaded.last_message == chain.last_message
        assert loaded.needs_response == chain.needs_response
        assert loaded.custom_context == chain.custom_context
        assert loaded.current_failure_count == chain.current_failure_count
        assert loaded.max_retry_count == chain.max_retry_count


def test_a_grown_chain_is_written_as_what_it_changed() -> None:
    chain = LLMChain(MODELS["alpha"], tools=TOOLS).add_message(Message.user("hi"))
    reply = chain.add_message(Message.assistant("hello")).update_custom_context({"k": 1})
    packer = Packer()
    rows = packer.transition_rows([Transition("a", "b", "c", c) for c in (chain, chain, reply)], 0)
    assert [json.loads(text)["chain"] for _, text in rows][1:] == [
        {},
        {"add": [1], "needs_response": False, "context": 1},
    ]
    with pytest.raises(FormatError, match="Malformed LLMChain"):  # nothing before to grow from
        loads(
            json.dumps({"format": FORMAT, "type": "LLMChain", "value": {"add": []}}),
            LLMChain,
            **BIND,
        )


# ---------------------------------------------------------------- real runs


def looping_agent(turns: int) -> Agent:
    def script(msgs: Any) -> Message:
        done = sum(m.role == "tool" for m in msgs)
        return call_tool("add", a=done, b=1) if done < turns else say("finished")

    return Agent(ScriptedModel(script, model_name="alpha"), [add], max_runs=turns + 1)


@pytest.mark.parametrize("stored", [True, False])
def test_a_stored_needs_response_loads_as_stored_whatever_the_last_message(stored: bool) -> None:
    """A record's ``needs_response`` is the chain's, even where the last message says
    otherwise, and it is written back the same."""
    chain = LLMChain(MODELS["alpha"]).add_message(Message.user("hi"))
    for last in (Message.user("go on"), say("done")):
        doc = json.loads(dumps(chain.add_message(last)))
        doc["value"]["needs_response"] = stored
        loaded = loads(json.dumps(doc), LLMChain, **BIND)
        assert loaded.last_message == last and loaded.needs_response is stored
        assert json.loads(dumps(loaded))["value"] == doc["value"]
        assert loaded.add_message(Message.user("more")).needs_response is True


def test_a_long_trace_keeps_each_message_once() -> None:
    run = looping_agent(28).start(AgentState.of("count"))
    run.run_sync()
    assert len(run.trace) >= 196
    doc = dump_trace(run.trace)
    assert len(doc["messages"]) == len(run.chain.messages) == 58
    conversation = len(json.dumps(doc["messages"]))
    per_transition = (len(json.dumps(doc)) - conversation) / len(run.trace)
    # A small record each (~0.3 kB), far from a copy of the conversation (~6 kB at the end).
    assert per_transition < 400 < conversation / 10
    loaded = load_trace(doc, models=[run.chain.llm], tools=[add])
    assert [t.chain for t in loaded] == [t.chain for t in run.trace]
    assert loaded.transitions[-1].chain.messages[0] is loaded.transitions[0].chain.messages[0]


def test_a_run_result_and_agent_state_round_trip() -> None:
    run = looping_agent(2).start(AgentState.of("count"))
    run.run_sync()
    assert run.result is not None
    assert loads(dumps(run.result), Terminal, models=[run.chain.llm], tools=[add]) == run.result
    assert loads(dumps(run.agent_state), AgentState) == run.agent_state


# ---------------------------------------------------------------- binding


def test_a_model_not_passed_loads_unbound_and_says_how_to_bind_it() -> None:
    chain = LLMChain(MODELS["alpha"]).add_message(Message.user("hi"))
    loaded = loads(dumps(chain), LLMChain)
    assert loaded.llm == UnboundModel("alpha")
    result = loaded.run_sync()
    assert isinstance(result, Failed)
    assert result.error.type == "unbound_model"
    assert "models={'alpha':" in result.error.message


def test_an_unknown_tool_is_refused_unless_not_strict() -> None:
    chain = LLMChain(ScriptedModel([call_tool("add", a=1, b=2), say("ok")]), tools=[add])
    text = dumps(chain.add_message(Message.user("add")))
    with pytest.raises(UnknownToolError, match=r"\['add'\].*strict=False"):
        loads(text, LLMChain)
    loaded = loads(text, LLMChain, models=[chain.llm], strict=False)
    assert loaded.tool_names == ["add"]
    result = loaded.run_sync("while_needs_response")
    tool_message = result.chain.messages[2]
    assert tool_message.tool_results[0].is_error
    assert "unbound_tool" in tool_message.tool_results[0].text


def test_bad_callbacks_are_the_callers_value_error() -> None:
    with pytest.raises(ValueError, match="Unknown callback"):
        loads(dumps(LLMChain(MODELS["alpha"])), LLMChain, callbacks=[{"on_nothing": print}])


# ---------------------------------------------------------------- the format


def test_every_document_names_its_format_and_type() -> None:
    for value in (Message.user("x"), ChainError("t", "m"), LLMChain(MODELS["alpha"])):
        doc = dump(value)
        assert doc["format"] == FORMAT == "agentfsm/1"
        assert doc["type"] == type(value).__name__


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d.update(format="agentfsm/2"), r"newer agentfsm.*Upgrade"),
        (lambda d: d.update(format="agentfsm/x"), "Unknown document format"),
        (lambda d: d.pop("format"), "Not an agentfsm document"),
        (lambda d: d.update(type="Banana"), "Unknown document type"),
        (lambda d: d.update(type="Message"), "holds a Message, not a LLMChain"),
        (lambda d: d["value"].pop("llm"), "Malformed LLMChain document: missing 'llm'"),
        (lambda d: d["value"].update(messages=[[5, 2]]), "outside the message table"),
        (lambda d: d["messages"][0].update(role="robot"), "Message 0 of the document"),
    ],
)
def test_documents_that_cannot_be_read_are_refused(
    change: Callable[[dict[str, Any]], Any], match: str
) -> None:
    doc = dump(LLMChain(MODELS["alpha"]).add_message(Message.user("hi")))
    change(doc)
    with pytest.raises(FormatError, match=match):
        load(doc, LLMChain)


def test_text_that_is_not_json_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="Not JSON"):
        loads("{nope", Message)
    assert issubclass(FormatError, ValueError)


def test_values_that_are_not_serialized_are_refused() -> None:
    with pytest.raises(TypeError, match="does not serialize"):
        dumps(object())  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=12),
    seen_first=st.lists(st.integers(min_value=0, max_value=11), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=12), max_size=4),
)
def test_packed_runs_spell_out_every_log_whatever_was_indexed_before(
    size: int, seen_first: list[int], cuts: list[int]
) -> None:
    """A log packed after some of its messages were indexed (out of order, say) and
    after shorter logs of its own list were packed reads back as the same messages."""
    messages = [Message.user(f"m{n}") for n in range(size)]
    packer = Packer()
    for n in seen_first:
        if n < size:
            packer.message(messages[n])
    log = MessageLog()
    logs = []
    for message in messages:
        log = log.append(message)
        logs.append(log)
    for cut in [*sorted(c for c in cuts if c <= size), size]:
        if cut == 0:
            continue
        grown = logs[cut - 1]
        runs = packer.runs(grown)
        spelled = [packer.messages[start + i] for start, count in runs for i in range(count)]
        assert all(a is b for a, b in zip(spelled, grown, strict=True))
        assert all(count > 0 for _, count in runs)
        assert all(a[0] + a[1] != b[0] for a, b in itertools.pairwise(runs))  # stretches merged
