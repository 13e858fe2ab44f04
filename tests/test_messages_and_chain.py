"""Messages, expansions and the chain's bookkeeping (SPEC §1)."""

from __future__ import annotations

import inspect
import sys
import threading
from typing import Any

import attrs
import pytest

from agentfsm import (
    ChainError,
    ContentPart,
    LLMChain,
    Message,
    MessageExpansion,
    Thinking,
    ToolCall,
    ToolResult,
)
from agentfsm._chain import _replace
from agentfsm._messages import DEFAULT_RESULT_CONTENT, MessageLog
from agentfsm.providers import ScriptedModel


def test_needs_response_follows_the_last_message() -> None:
    chain = LLMChain(ScriptedModel([]))
    assert chain.needs_response is False and chain.last_message is None
    chain = chain.add_message(Message.user("hi"))
    assert chain.needs_response is True
    chain = chain.add_message(
        Message.assistant(None, [ToolCall(call_id="c1", name="add", arguments={})])
    )
    assert chain.needs_response is True
    chain = chain.add_message(Message.tool([ToolResult("c1", "add", "3")]))
    assert chain.needs_response is True
    chain = chain.add_message(Message.assistant("done"))
    assert chain.needs_response is False
    assert chain.last_message == Message.assistant("done")
    assert len(chain.messages) == len(chain.exchanged_messages) == 4


def test_messages_given_at_construction_set_last_message_and_needs_response() -> None:
    chain = LLMChain(ScriptedModel([]), messages=[Message.system("s"), Message.user("u")])
    assert chain.last_message == Message.user("u")
    assert chain.needs_response is True


def test_a_copied_chain_reads_needs_response_off_its_new_last_message() -> None:
    chain = LLMChain(ScriptedModel([])).add_message(Message.user("hi"))
    replied = chain.add_message(Message.assistant("hello"))
    assert (replied.last_message, replied.needs_response) == (Message.assistant("hello"), False)
    asked = replied.replace_last_message(
        Message.assistant(None, [ToolCall(call_id="c1", name="add", arguments={})])
    )
    assert asked.needs_response is True and asked.last_message is not None
    assert asked.last_message.tool_calls[0].name == "add"
    counted = _replace(asked, current_failure_count=2)
    assert (counted.last_message, counted.needs_response) == (asked.last_message, True)
    assert chain.needs_response is True  # the chain copied from is as it was


def test_a_needs_response_given_unlike_the_last_message_is_kept_until_a_message_is_added() -> None:
    model = ScriptedModel([])
    chain = LLMChain(model, messages=[Message.user("u")], needs_response=False)
    assert chain.last_message == Message.user("u") and chain.needs_response is False
    assert chain != LLMChain(model, messages=[Message.user("u")])
    kept = [
        attrs.evolve(chain, llm=ScriptedModel([])),
        chain.update_custom_context({"k": 1}),
        chain.clear_exchanged_messages(),
        _replace(chain, current_failure_count=1),
    ]
    assert [c.needs_response for c in kept] == [False] * 4
    assert chain.add_message(Message.user("again")).needs_response is True
    assert chain.replace_last_message(Message.user("u2")).needs_response is True
    # A given value that agrees with the last message is no override: the chains are equal.
    same = LLMChain(model, messages=[Message.user("u")], needs_response=True)
    assert same == attrs.evolve(chain, needs_response=True)
    assert same.needs_response is True


def test_add_message_refuses_what_is_not_a_message() -> None:
    with pytest.raises(ChainError) as info:
        LLMChain(ScriptedModel([])).add_message("hello")  # type: ignore[arg-type]
    assert info.value.type == "invalid_message"


def test_unknown_callback_names_are_refused() -> None:
    with pytest.raises(ValueError, match="on_llm_new_dleta"):
        LLMChain(ScriptedModel([]), callbacks=[{"on_llm_new_dleta": print}])


def test_content_parts_text() -> None:
    m = Message.user(
        [ContentPart.text("a"), ContentPart("image_url", "http://x"), ContentPart.text("b")]
    )
    assert m.text == "ab"


class TestExpand:
    def test_expand_builds_a_result_with_fallback_content_and_expansion(self) -> None:
        result = MessageExpansion.expand("fallback", [Message.user("material")])
        assert result.content == "fallback"
        assert result.expansion is not None
        assert result.expansion.messages == (Message.user("material"),)
        assert result.expansion.result_content == DEFAULT_RESULT_CONTENT
        assert result.expandable

    def test_explicit_none_keeps_the_fallback(self) -> None:
        result = MessageExpansion.expand("fb", [Message.user("m")], result_content=None)
        assert result.expansion is not None and result.expansion.result_content is None

    def test_empty_expansion(self) -> None:
        with pytest.raises(ChainError) as info:
            MessageExpansion.expand("fb", [])
        assert info.value.type == "empty_expansion"
        assert info.value.message.startswith("An expansion needs at least one message")

    @pytest.mark.parametrize("bad", ["text", Message.user("x"), None])
    def test_not_a_list(self, bad: object) -> None:
        with pytest.raises(ChainError) as info:
            MessageExpansion.expand("fb", bad)  # type: ignore[arg-type]
        assert info.value.type == "invalid_expansion"

    def test_element_not_a_message(self) -> None:
        with pytest.raises(ChainError) as info:
            MessageExpansion.expand("fb", [Message.user("ok"), "nope"])  # type: ignore[list-item]
        assert info.value.type == "invalid_expansion"

    @pytest.mark.parametrize("role", ["system", "tool"])
    def test_role_not_allowed(self, role: str) -> None:
        message = Message.system("s") if role == "system" else Message.tool([])
        with pytest.raises(ChainError) as info:
            MessageExpansion.expand("fb", [message])
        assert info.value.type == "invalid_expansion_role"
        assert info.value.message == (
            f"Cannot expand into a message with role {role}. Supported roles: user, assistant."
        )

    def test_an_interrupt_is_not_expandable(self) -> None:
        result = MessageExpansion.expand("fb", [Message.user("m")])
        from attrs import evolve

        assert not evolve(result, is_interrupt=True).expandable


def test_chain_error_equality_and_retryable() -> None:
    assert ChainError("rate_limited", "x").retryable
    assert not ChainError("bad_request", "x").retryable
    assert ChainError("a", "b") == ChainError("a", "b")
    assert ChainError("timeout", "t", retryable=False).retryable is False


def test_a_message_log_is_never_changed_by_appends_to_it_or_its_branches() -> None:
    base = MessageLog([Message.user("hi")])
    first = base.append(Message.assistant("a"))
    second = base.append(Message.assistant("b"))  # a branch: copies the prefix
    assert [m.text for m in base] == ["hi"]
    assert [m.text for m in first] == ["hi", "a"]
    assert [m.text for m in second] == ["hi", "b"]
    assert [m.text for m in first.append(Message.user("c"))] == ["hi", "a", "c"]


def test_a_log_grown_by_the_message_its_list_goes_on_with_shares_the_list() -> None:
    base = MessageLog([Message.user("hi")])
    reply = Message.assistant("a")
    grown = base.append(reply)
    again = base.append(reply)  # the same message after the same prefix: one list
    assert again.added_since(base) == [reply] and again.added_since(grown) == []
    other = base.append(Message.assistant("a"))  # an equal message is another one
    assert other.added_since(grown) is None and list(other) == list(grown)
    assert [m.text for m in grown.append(Message.user("c"))] == ["hi", "a", "c"]


def test_message_logs_appended_to_from_many_threads_keep_their_own_messages() -> None:
    latest = [MessageLog([Message.user("hi")])]  # threads race to grow the newest log
    grown: list[tuple[MessageLog, Message, MessageLog]] = []

    def append(worker: int) -> None:
        for i in range(500):
            log = latest[0]
            message = Message.user(f"{worker}:{i}")
            new = latest[0] = log.append(message)
            grown.append((log, message, new))

    threads = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, in the middle of appends too
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(grown) == 2000
    for log, message, new in grown:
        assert list(new) == [*log, message]


def test_the_chain_copy_writes_every_field_of_the_chain() -> None:
    """``_replace`` is ``attrs.evolve`` written out: a field added to LLMChain goes there too."""
    assert list(inspect.signature(_replace).parameters)[1:] == [
        field.name for field in attrs.fields(LLMChain)
    ]
    chain = LLMChain(ScriptedModel([]), custom_context={"k": 1}).add_message(Message.user("hi"))
    changes: dict[str, Any] = {"current_failure_count": 2, "custom_context": {"k": 2}}
    copied = _replace(chain, **changes)
    assert type(copied) is LLMChain and copied is not chain
    for field in attrs.fields(LLMChain):
        expected = changes.get(field.name, getattr(chain, field.name))
        assert getattr(copied, field.name) is expected, field.name
    with pytest.raises(TypeError):
        _replace(chain, unknown=1)  # type: ignore[call-arg]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copied.max_retry_count = 5  # type: ignore[misc]


async def test_a_scripted_reply_keeps_its_thinking_when_the_model_names_itself() -> None:
    thought = Thinking("first, add", signature="sig")
    model = ScriptedModel([Message.assistant("3", thinking=[thought])], model_name="m")
    reply = await model.complete([Message.user("1 + 2?")], [])
    assert (reply.text, reply.thinking, reply.metadata) == ("3", (thought,), {"model": "m"})
