"""The built-in steps: functions over pipeline results, each a state's work in a table.

Every step takes a pipeline result first and options second. ``Continue`` is
processed; any terminal passes through unchanged. A state lists its steps in the
machine's table; the engine runs them in order and the first terminal ends the state.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from ._approval import ANSWER, DECIDED, rejected, without_answer
from ._chain import LLMChain
from ._effects import effects
from ._errors import ChainError
from ._messages import Message, ToolCall, ToolResult
from ._options import options_of
from ._results import Continue, Failed, Interrupted, Ok, Paused, PipelineResult
from ._tools import ToolContext

__all__ = [
    "Step",
    "call_llm",
    "check_max_runs",
    "check_pause",
    "check_response_complete",
    "check_tool_interrupts",
    "check_until_tool",
    "check_until_tool_success",
    "continue_or_done",
    "ensure_mode_state",
    "execute_step",
    "execute_tool_calls",
    "execute_tools",
    "expand_tool_results",
    "failure_budget_spent",
    "get_run_count",
    "normalize_pause",
    "pending_calls",
    "pipe",
    "propagate_state",
    "deep_merge",
    "add_tool_message",
    "run_tool_calls",
    "reset_run_count",
    "take_tool_answers",
]

Opts = Mapping[str, Any] | None
Step = Callable[[PipelineResult, Opts], PipelineResult | Awaitable[PipelineResult]]


# ------------------------------------------------------------------ mode state


def ensure_mode_state(chain: LLMChain) -> LLMChain:
    """Create ``mode_state = {"run_count": 0}`` unless the chain has one."""
    if chain.custom_context.get("mode_state") is not None:
        return chain
    return chain.update_custom_context({"mode_state": {"run_count": 0}})


def reset_run_count(chain: LLMChain) -> LLMChain:
    """Set ``run_count`` to 0, keeping other ``mode_state`` keys: a run counts its own calls."""
    mode_state = chain.custom_context.get("mode_state") or {}
    return chain.update_custom_context({"mode_state": {**mode_state, "run_count": 0}})


def get_run_count(chain: LLMChain) -> int:
    """Model calls made by this run so far."""
    mode_state = chain.custom_context.get("mode_state") or {}
    return int(mode_state.get("run_count", 0))


def _counted(context: Mapping[str, Any]) -> dict[str, Any]:
    """``mode_state`` of ``context`` with one more model call in ``run_count``."""
    mode_state = context.get("mode_state") or {}
    return {**mode_state, "run_count": int(mode_state.get("run_count", 0)) + 1}


# ------------------------------------------------------------------ the model call


async def execute_step(chain: LLMChain) -> Continue | Failed:
    """One model call: the reply is added to the chain, or the failure returned.

    Refuses to call once ``current_failure_count`` reached ``max_retry_count``.
    An exception that is not a :class:`ChainError` is reported as ``model_error``.
    """
    return await _model_call(chain, count=False)


def failure_budget_spent(chain: LLMChain) -> ChainError:
    """The error of a chain whose tool turns failed ``max_retry_count`` times in a row:
    the original's words, then the numbers and what to change."""
    return ChainError(
        "exceeded_failure_count",
        f"Exceeded max failure count ({chain.current_failure_count} tool turns with an error "
        f"in a row; max_retry_count is {chain.max_retry_count}: raise it, "
        "Agent(max_retry_count=...), to allow more)",
        details={"failures": chain.current_failure_count, "max_retry_count": chain.max_retry_count},
    )


async def _model_call(chain: LLMChain, *, count: bool) -> Continue | Failed:
    """``execute_step``; with ``count``, a reply also adds one to ``run_count``."""
    try:
        if chain.current_failure_count >= chain.max_retry_count:
            chain.fire("on_retries_exceeded", chain)
            return Failed(chain=chain, error=failure_budget_spent(chain))
        on_delta = _deltas_to(chain) if chain.callbacks else None
        try:
            reply = await chain.llm.complete(chain.messages, chain.tools, on_delta=on_delta)
        except ChainError as exc:
            return _model_failed(chain, exc)
        except Exception as exc:  # a provider's bug must not crash the host
            return _model_failed(
                chain, ChainError("model_error", f"{type(exc).__name__}: {exc}", retryable=False)
            )
        if not isinstance(reply, Message) or reply.role != "assistant":
            return _model_failed(
                chain,
                ChainError(
                    "invalid_response", f"The model returned {reply!r}, not an assistant Message"
                ),
            )
        # An assistant reply (checked above) asks for tools when it has calls.
        changes: dict[str, Any] = {} if reply.tool_calls else {"current_failure_count": 0}
        if not chain.callbacks:
            if count:  # no callback sees the chain before it is counted: one copy
                context = chain.custom_context
                changes["custom_context"] = {**context, "mode_state": _counted(context)}
            return Continue(chain=chain.add_message(reply, **changes))
        chain = chain.add_message(reply, **changes)
        chain.fire("on_llm_new_message", chain, reply)
        for call in reply.tool_calls:
            chain.fire("on_tool_call_identified", chain, call)
        chain.fire("on_message_processed", chain, reply)
        if "usage" in reply.metadata:
            chain.fire("on_llm_token_usage", chain, reply.metadata["usage"])
        if count:
            chain = chain.update_custom_context({"mode_state": _counted(chain.custom_context)})
        return Continue(chain=chain)
    except ChainError as error:  # a callback raised
        return Failed(chain=chain, error=error)


def _deltas_to(chain: LLMChain) -> Callable[[Any], None]:
    """What the model is given to stream its reply's pieces to ``chain``'s callbacks (made
    here, not in the model call: a closure there makes every call keep a cell, and every
    parked run hold it)."""

    def on_delta(delta: Any) -> None:
        chain.fire("on_llm_new_delta", chain, delta)

    return on_delta


def _model_failed(chain: LLMChain, error: ChainError) -> Failed:
    chain.fire("on_llm_error", chain, error)
    return Failed(chain=chain, error=error)


@effects("model")
async def call_llm(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """One model call; on success ``run_count += 1``, on failure ``Failed``, count kept."""
    if not isinstance(result, Continue):
        return result
    return await _model_call(result.chain, count=True)


@effects()
def check_response_complete(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """A reply cut off at the token limit, filtered, or empty ends the run before its tools run."""
    if not isinstance(result, Continue):
        return result
    last = result.chain.last_message
    if last is None or last.role != "assistant":
        return result
    if last.status == "length":
        return Failed(
            result.chain,
            ChainError(
                "response_truncated",
                "The model's reply was cut off at its token limit; its tool calls were not "
                "run. Raise the model's max_tokens or ask for a shorter answer.",
            ),
        )
    if last.status == "filtered":
        return Failed(
            result.chain,
            ChainError(
                "content_filtered",
                "The provider's content filter stopped the model's reply; its tool calls "
                "were not run.",
            ),
        )
    if not last.tool_calls and not last.text.strip() and not _has_media(last):
        return Failed(
            result.chain,
            ChainError(
                "empty_response",
                "The model returned an empty reply (no text and no tool calls). Retry the "
                "run, or give the model a fallback (agentfsm.providers.FallbackModel).",
            ),
        )
    return result


def _has_media(message: Message) -> bool:
    """Whether the content has a part that is not text (an image, a file): a reply too."""
    content = message.content
    return isinstance(content, tuple) and any(part.type != "text" for part in content)


# ------------------------------------------------------------------ tools


def pending_calls(last: Message | None) -> tuple[ToolCall, ...]:
    """The calls ``executing`` runs: those of ``last``, a complete reply asking for tools."""
    if last is None or last.role != "assistant" or last.status != "complete":
        return ()
    return last.tool_calls


async def run_tool_calls(chain: LLMChain, calls: Sequence[ToolCall]) -> list[ToolResult]:
    """Run ``calls`` and return one result per call, in call order.

    Async tools of one turn run concurrently; plain functions run in turn.
    Unknown tools become error results; raising tools error results with the
    exception's text. Cancellation propagates.
    """
    state = chain.custom_context.get("state") or {}
    results: list[ToolResult | None] = [None] * len(calls)
    waiting: list[tuple[int, Awaitable[ToolResult]]] = []
    for index, call in enumerate(calls):
        tool = chain.tool(call.name)
        if tool is None:
            results[index] = ToolResult(
                tool_call_id=call.call_id,
                name=call.name,
                content=f"Tool call made to {call.name} but tool not found",
                is_error=True,
            )
            continue
        if chain.callbacks:
            chain.fire("on_tool_execution_started", chain, call, tool)
        context = ToolContext(
            state=state, custom_context=chain.custom_context, tool_call_id=call.call_id
        )
        invocation: Awaitable[ToolResult] = tool.invoke(call, context)
        if tool.is_async or tool.timeout is not None:
            waiting.append((index, invocation))
        else:
            results[index] = await invocation
    if len(waiting) == 1:
        index, invocation = waiting[0]
        results[index] = await invocation
    elif waiting:
        done = await asyncio.gather(*(invocation for _, invocation in waiting))
        for (index, _), value in zip(waiting, done, strict=True):
            results[index] = value
    final = [r for r in results if r is not None]
    if chain.callbacks:
        for call, tool_result in zip(calls, final, strict=True):
            if tool_result.is_interrupt:
                chain.fire("on_tool_interrupted", chain, tool_result)
            elif tool_result.is_error:
                chain.fire("on_tool_execution_failed", chain, call, tool_result)
            else:
                chain.fire("on_tool_execution_completed", chain, call, tool_result)
    return final


def add_tool_message(chain: LLMChain, results: Sequence[ToolResult]) -> LLMChain:
    """Append one tool message; an error among the results counts as a failure."""
    message = Message(role="tool", tool_results=tuple(results))
    failures = 0
    for tool_result in results:
        if tool_result.is_error:
            failures = chain.current_failure_count + 1
            break
    chain = chain.add_message(message, current_failure_count=failures)
    if chain.callbacks:
        chain.fire("on_tool_response_created", chain, message)
        chain.fire("on_message_processed", chain, message)
    return chain


async def execute_tool_calls(chain: LLMChain) -> LLMChain:
    """Run the last reply's tool calls and add their tool message; no calls, no change."""
    calls = pending_calls(chain.last_message)
    if not calls:
        return chain
    return add_tool_message(chain, await run_tool_calls(chain, calls))


@effects("tools")
async def execute_tools(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """Run pending tool calls; never fails the pipeline (a raising callback aside)."""
    if not isinstance(result, Continue):
        return result
    chain = result.chain
    calls = pending_calls(chain.last_message)
    context = chain.custom_context
    if DECIDED in context or ANSWER in context:  # a batch a resume brought back
        return await _execute_resumed(chain, calls)
    if not calls:
        return result
    try:  # what execute_tool_calls does, without a coroutine of its own
        return Continue(chain=add_tool_message(chain, await run_tool_calls(chain, calls)))
    except ChainError as error:
        return Failed(chain, error)


async def _execute_resumed(chain: LLMChain, calls: Sequence[ToolCall]) -> PipelineResult:
    """A batch a resume brought back: the calls a reviewer decided (an edit is in the
    call already; a rejected one gets its rejection result, not a run) and the calls of
    the last reply still without a result (a waiting subagent's, run again with the
    answer in their context). One tool message holds every result in call order; the
    answer and the decisions are taken."""
    decided = chain.custom_context.get(DECIDED) or {}
    last = chain.last_message
    have: dict[str, ToolResult] = {}
    reply = last
    if not calls:
        messages = chain.messages
        reply = (
            messages[-2] if last is not None and last.role == "tool" and len(messages) > 1 else None
        )
        if reply is None or not reply.tool_calls:
            return Continue(chain=_resumed(chain))
        have = {r.tool_call_id: r for r in last.tool_results}  # type: ignore[union-attr]
    assert reply is not None
    waiting = [
        c for c in reply.tool_calls if c.call_id not in have and decided.get(c.call_id) != "reject"
    ]
    try:
        ran = {r.tool_call_id: r for r in await run_tool_calls(chain, waiting)}
    except ChainError as error:
        return Failed(chain=chain, error=error)
    results = [have.get(c.call_id) or ran.get(c.call_id) or rejected(c) for c in reply.tool_calls]
    chain = _resumed(chain)
    if not have:
        return Continue(chain=add_tool_message(chain, results))
    assert last is not None
    failures = chain.current_failure_count + 1 if any(r.is_error for r in results) else 0
    chain = chain.replace_last_message(attrs.evolve(last, tool_results=tuple(results)))
    return Continue(chain=attrs.evolve(chain, current_failure_count=failures))


def _resumed(chain: LLMChain) -> LLMChain:
    """``chain`` once its resumed batch ran: the answer and the decisions taken."""
    context = {k: v for k, v in chain.custom_context.items() if k not in (ANSWER, DECIDED)}
    return attrs.evolve(chain, custom_context=context)


# ------------------------------------------------------------------ checks


@effects("bound")
def check_max_runs(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """``run_count >= max_runs`` (``Options.max_runs``) fails the run with ``exceeded_max_runs``."""
    if not isinstance(result, Continue):
        return result
    maximum = options_of(opts).max_runs
    count = get_run_count(result.chain)
    if count >= maximum:
        return Failed(
            result.chain,
            ChainError("exceeded_max_runs", f"Exceeded maximum number of runs ({count}/{maximum})"),
        )
    return result


@effects()
def check_pause(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """``should_pause()`` true pauses the run (reason None); a string is the pause reason."""
    if not isinstance(result, Continue):
        return result
    should_pause = options_of(opts).should_pause
    answer = should_pause() if should_pause is not None else False
    if answer:
        return Paused(result.chain, answer if isinstance(answer, str) else None)
    return result


def _last_tool_message(messages: Sequence[Message]) -> Message | None:
    for message in reversed(messages):
        if message.role == "tool":
            return message
    return None


def _interrupt_data(results: Sequence[ToolResult]) -> dict[str, Any]:
    def one(r: ToolResult) -> dict[str, Any]:
        return {**(r.interrupt_data or {}), "tool_call_id": r.tool_call_id}

    if len(results) == 1:
        return one(results[0])
    return {"type": "multiple_interrupts", "interrupts": [one(r) for r in results]}


@effects()
def check_tool_interrupts(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """Interrupting results in the most recent tool message stop the run as Interrupted."""
    if not isinstance(result, Continue):
        return result
    message = _last_tool_message(result.chain.messages)
    if message is None:
        return result
    interrupted = [r for r in message.tool_results if r.is_interrupt]
    if not interrupted:
        return result
    return Interrupted(result.chain, _interrupt_data(interrupted))


def _until(result: PipelineResult, opts: Opts, *, success_only: bool) -> PipelineResult:
    if not isinstance(result, Continue):
        return result
    names = options_of(opts).tool_names
    last = result.chain.last_message
    if not names or last is None or last.role != "tool":
        return result
    for tool_result in last.tool_results:
        if tool_result.name in names and not (success_only and tool_result.is_error):
            return Ok(result.chain, tool_result)
    return result


@effects()
def check_until_tool(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """A result of a tool in ``tool_names`` (error or not) ends the run Ok with it."""
    return _until(result, opts, success_only=False)


@effects()
def check_until_tool_success(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """As ``check_until_tool``, but only a non-error result counts."""
    return _until(result, opts, success_only=True)


# ------------------------------------------------------------------ expansion


@effects()
def expand_tool_results(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """Apply the expansions the last tool message's results asked for.

    Each expandable result's content becomes its ``result_content`` (unless
    None) and its expansion is cleared, so a second application inserts nothing;
    the expansion messages, in result order, are then appended. Inserted
    messages fire no callbacks. Anything but a ``Continue`` ending in a tool
    message passes untouched.
    """
    if not isinstance(result, Continue):
        return result
    chain = result.chain
    last = chain.last_message
    if last is None or last.role != "tool":
        return result
    for tool_result in last.tool_results:
        if tool_result.expansion is not None and tool_result.expandable:
            break
    else:  # most turns: no result carries an expansion, and no property is called
        return result
    inserted: list[Message] = []
    rewritten: list[ToolResult] = []
    for tool_result in last.tool_results:
        expansion = tool_result.expansion
        if expansion is None or not tool_result.expandable:
            rewritten.append(tool_result)
            continue
        inserted.extend(expansion.messages)
        content = (
            tool_result.content if expansion.result_content is None else (expansion.result_content)
        )
        rewritten.append(attrs.evolve(tool_result, content=content, expansion=None))
    chain = chain.replace_last_message(attrs.evolve(last, tool_results=tuple(rewritten)))
    return Continue(chain.add_messages(inserted))


# ------------------------------------------------------------------ the loop boundary


async def continue_or_done(
    result: PipelineResult,
    run_fn: Callable[[LLMChain, Opts], Awaitable[PipelineResult]],
    opts: Opts = None,
) -> PipelineResult:
    """Loop while the chain needs a response; done when it does not; terminals as they are."""
    if not isinstance(result, Continue):
        return result
    if result.chain.needs_response:
        return await run_fn(result.chain, opts)
    return Ok(result.chain)


def normalize_pause(result: PipelineResult) -> PipelineResult:
    """Fold a step-level pause reason into ``custom_context["pause_reason"]``.

    The result keeps the ``Paused(chain)`` shape a mode returns; a reasonless
    pause keeps ``pause_reason`` None.
    """
    if isinstance(result, Paused) and result.reason is not None:
        chain = result.chain.update_custom_context({"pause_reason": result.reason})
        return Paused(chain)
    return result


async def pipe(result: PipelineResult, *steps: Step, opts: Opts = None) -> PipelineResult:
    """Pass ``result`` through ``steps`` in order, each with ``opts``; async steps awaited."""
    for step in steps:
        out = step(result, opts)
        result = await out if inspect.isawaitable(out) else out
    return result


# ------------------------------------------------------------------ agent state


def deep_merge(base: Mapping[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``delta`` merged in: mappings merge key by key, other values replace."""
    merged = dict(base)
    for key, value in delta.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged


@effects()
def propagate_state(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """Merge the last tool message's ``state_updates`` into ``custom_context["state"]``.

    In call order, interrupting results skipped; later tools of the run read
    the merged state through their ``ToolContext``.
    """
    if not isinstance(result, Continue):
        return result
    last = result.chain.last_message
    if last is None or last.role != "tool":
        return result
    state: Mapping[str, Any] | None = None
    for tool_result in last.tool_results:
        delta = tool_result.state_updates
        if delta and not tool_result.is_interrupt:
            if state is None:
                state = result.chain.custom_context.get("state") or {}
            state = deep_merge(state, delta)
    if state is None:
        return result
    return Continue(result.chain.update_custom_context({"state": state}))


def _answered(waiting: ToolResult, data: Mapping[str, Any]) -> ToolResult:
    return ToolResult(
        tool_call_id=waiting.tool_call_id,
        name=waiting.name,
        content=str(data.get("content", "")),
        is_error=bool(data.get("is_error", False)),
        state_updates=data.get("state_updates"),
    )


@effects()
def take_tool_answers(result: PipelineResult, opts: Opts = None) -> PipelineResult:
    """The answers a resume brought to this turn's tool interrupts become their results.

    The first step of ``propagating``: it runs before the state updates are merged and
    interrupts checked, so an answer's updates merge and an answered tool no longer
    interrupts. A run with no answer passes unchanged.
    """
    if not isinstance(result, Continue):
        return result
    chain = result.chain
    answers = chain.custom_context.get(ANSWER)
    if answers is None:
        return result
    chain = without_answer(chain)
    last: Message | None = chain.last_message
    if last is None or last.role != "tool" or not isinstance(answers, list | tuple):
        return Continue(chain=chain)
    by_id = {a.get("tool_call_id"): a for a in answers if isinstance(a, Mapping)}
    results = tuple(
        _answered(r, by_id[r.tool_call_id]) if r.is_interrupt and r.tool_call_id in by_id else r
        for r in last.tool_results
    )
    return Continue(chain=chain.replace_last_message(attrs.evolve(last, tool_results=results)))
