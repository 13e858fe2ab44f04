"""The original chain's built-in modes, composed from the steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..chain import LLMChain
from ..errors import ChainError
from ..results import Continue, Failed, Ok, PipelineResult, Terminal
from ..steps import (
    call_llm,
    check_max_runs,
    check_until_tool,
    continue_or_done,
    ensure_mode_state,
    execute_step,
    execute_tool_calls,
    execute_tools,
    expand_tool_results,
    pipe,
    reset_run_count,
)

__all__ = ["SingleCall", "Step", "UntilSuccess", "UntilToolUsed", "WhileNeedsResponse"]

Opts = Mapping[str, Any] | None


def _terminal(result: PipelineResult) -> Terminal:
    if isinstance(result, Continue):  # a mode always ends on a terminal
        return Ok(result.chain)
    return result


class SingleCall:
    """One model call; tool calls in the reply are left for the host."""

    async def run(self, chain: LLMChain, opts: Opts = None) -> Terminal:
        return _terminal(await execute_step(chain))


class WhileNeedsResponse:
    """Call the model and run its tools until it answers without asking for any.

    Bounded by ``max_runs`` (default 25) model calls per run.
    """

    async def run(self, chain: LLMChain, opts: Opts = None) -> Terminal:
        return _terminal(await self._loop(reset_run_count(chain), opts))

    async def _loop(self, chain: LLMChain, opts: Opts) -> PipelineResult:
        while True:
            if not chain.needs_response:
                return Ok(chain)
            result = await pipe(
                Continue(chain),
                check_max_runs,
                execute_tools,
                expand_tool_results,
                call_llm,
                opts=opts,
            )
            if not isinstance(result, Continue):
                return result
            chain = result.chain


class UntilSuccess:
    """Call the model until a reply, or a tool message without errors, stands.

    Bounded by the chain's ``max_retry_count`` consecutive failures.
    """

    async def run(self, chain: LLMChain, opts: Opts = None) -> Terminal:
        force = bool((opts or {}).get("force_recurse", False))
        while True:
            last = chain.last_message
            if not force and last is not None:
                if chain.current_failure_count >= chain.max_retry_count:
                    return Failed(
                        chain, ChainError("exceeded_failure_count", "Exceeded max failure count")
                    )
                if last.role == "tool" and not any(r.is_error for r in last.tool_results):
                    return Ok(chain)
                if last.role == "assistant":
                    return Ok(chain)
            force = False
            stepped = await execute_step(chain)
            if isinstance(stepped, Failed):
                return stepped
            try:
                chain = await execute_tool_calls(stepped.chain)
            except ChainError as error:
                return Failed(stepped.chain, error)


class Step:
    """One step: run pending tool calls if there are any, else call the model once.

    ``should_continue(chain)`` (option) asks for another step.
    """

    async def run(self, chain: LLMChain, opts: Opts = None) -> Terminal:
        should_continue = (opts or {}).get("should_continue")
        while True:
            try:
                after_tools = await execute_tool_calls(chain)
            except ChainError as error:
                return Failed(chain, error)
            if after_tools is chain:
                stepped = await execute_step(chain)
                if isinstance(stepped, Failed):
                    return stepped
                chain = stepped.chain
            else:
                chain = after_tools
            if not (callable(should_continue) and should_continue(chain)):
                return Ok(chain)


class UntilToolUsed:
    """Loop until one of ``tool_names`` is called; Ok carries that tool's result."""

    def __init__(self, tool_names: str | Sequence[str] | None = None) -> None:
        self.tool_names = [tool_names] if isinstance(tool_names, str) else tool_names

    async def run(self, chain: LLMChain, opts: Opts = None) -> Terminal:
        opts = dict(opts or {})
        names = self.tool_names if self.tool_names is not None else opts.get("tool_names")
        if isinstance(names, str):
            names = [names]
        if not names:
            raise ValueError("until_tool_used needs tool_names: one tool name or a list")
        missing = [n for n in names if chain.tool(n) is None]
        if missing:
            quoted = ", ".join(missing)
            label = "Tool names" if len(missing) > 1 else "Tool name"
            return Failed(
                chain,
                ChainError("invalid_tool_name", f"{label} '{quoted}' not found in available tools"),
            )
        opts = {"max_runs": 25, **opts, "tool_names": list(names)}
        chain = ensure_mode_state(chain)
        while True:
            result = await pipe(
                Continue(chain),
                expand_tool_results,
                call_llm,
                execute_tools,
                check_until_tool,
                check_max_runs,
                opts=opts,
            )
            result = await continue_or_done(result, _again, opts)
            if not isinstance(result, Continue):
                return result
            chain = result.chain


async def _again(chain: LLMChain, opts: Opts) -> PipelineResult:
    """``continue_or_done``'s loop edge, unrolled into the caller's ``while``."""
    return Continue(chain)
