"""Agent: a model, tools and middleware over the standard machine, with human approval."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ._sync import run_sync
from .chain import Callbacks, LLMChain
from .errors import ChainError
from .messages import Message, ToolCall, ToolResult
from .middleware.human_in_the_loop import unanswered_calls
from .modes.standard import StandardMode
from .results import Failed, Interrupted, Ok, Paused, Terminal
from .run import Run
from .state import AgentState
from .steps import add_tool_message, run_tool_calls
from .store.base import Store
from .store.checkpoint import resume_run
from .tools import Tool

if TYPE_CHECKING:
    from agentfsm.providers.base import ChatModel

__all__ = ["Agent", "AgentRun", "AgentState", "collapse_until_tool"]

MAX_RUNS_MESSAGE = "Max number of automated turns reached. You may continue if desired."


def collapse_until_tool(
    until_tool: str | Sequence[str] | None, until_tool_success: str | Sequence[str] | None
) -> tuple[str | Sequence[str] | None, bool]:
    """The mode's ``(until_tool, require_tool_success)`` from execute's two options."""
    if until_tool_success is not None:
        return until_tool_success, True
    if until_tool is not None:
        return until_tool, False
    return None, False


class AgentRun(Run):
    """A run started by an :class:`Agent`; ``agent_state`` maps its result back."""

    agent: Agent
    _agent_state: AgentState | None = None

    @property
    def agent_state(self) -> AgentState:
        """The state the host keeps, once the run is over (after ``after_model`` hooks)."""
        if self.result is None:
            raise RuntimeError("The run is not over yet; step it to a terminal first.")
        if self._agent_state is None:
            self._agent_state = self.agent._finish(self.result)
        return self._agent_state


class Agent:
    """A model with tools and middleware, run on the standard machine.

    ``max_runs`` bounds the model calls of one execute (default 50; an execute's
    own ``max_runs`` wins).
    """

    #: The Run class of this agent's runs (restored runs too).
    run_class: ClassVar[type[AgentRun]] = AgentRun

    def __init__(
        self,
        model: ChatModel,
        tools: Sequence[Tool] = (),
        *,
        middleware: Sequence[Any] = (),
        system_prompt: str | None = None,
        max_runs: int | None = None,
        callbacks: Sequence[Callbacks] = (),
    ) -> None:
        self.model = model
        self.tools = tuple(tools)
        self.middleware = tuple(middleware)
        self.system_prompt = system_prompt
        self.max_runs = max_runs
        self.callbacks = tuple(callbacks)
        self.mode = StandardMode()
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"Tool names must be unique, got: {names}")

    # ------------------------------------------------------------ running

    def start(
        self,
        state: AgentState,
        *,
        until_tool: str | Sequence[str] | None = None,
        until_tool_success: str | Sequence[str] | None = None,
        max_runs: int | None = None,
        should_pause: Callable[[], bool] | None = None,
        extra_steps: Mapping[str, Sequence[Any]] | None = None,
    ) -> AgentRun:
        """A run over ``state``, not yet stepped. Options are checked before anything runs."""
        options = self._options(until_tool, until_tool_success, max_runs, should_pause)
        if extra_steps:
            options["extra_steps"] = extra_steps
        for middleware in self.middleware:
            hook = getattr(middleware, "before_model", None)
            if hook is not None:
                state = hook(state)
        return self._start(self._chain(state), options)

    def _start(self, chain: LLMChain, options: Mapping[str, Any]) -> AgentRun:
        run = self.mode.start(chain, options, run_class=self.run_class)
        assert isinstance(run, AgentRun)
        run.agent = self
        return run

    async def execute(self, state: AgentState, **options: Any) -> AgentState:
        """Run to a terminal and return the state to keep (see :meth:`start` for options)."""
        try:
            run = self.start(state, **options)
        except ChainError as error:
            return attrs.evolve(state, status="error", error=error)
        await run.run()
        return run.agent_state

    def execute_sync(self, state: AgentState, **options: Any) -> AgentState:
        return run_sync(self.execute(state, **options), self.model)

    def _options(
        self,
        until_tool: str | Sequence[str] | None,
        until_tool_success: str | Sequence[str] | None,
        max_runs: int | None,
        should_pause: Callable[[], bool] | None,
    ) -> dict[str, Any]:
        if until_tool is not None and until_tool_success is not None:
            raise ValueError(
                "Cannot pass both until_tool and until_tool_success; they are mutually exclusive"
            )
        key = "until_tool_success" if until_tool_success is not None else "until_tool"
        target, require_success = collapse_until_tool(until_tool, until_tool_success)
        if target is not None and not isinstance(target, str | list | tuple):
            raise ValueError(f"Invalid until_tool option: expected string or list, got: {target!r}")
        names = [target] if isinstance(target, str) else list(target or ())
        available = [t.name for t in self.tools]
        missing = [n for n in names if n not in available]
        if missing:
            raise ValueError(f"{key}: tool(s) {missing} not found. Available: {available}")
        runs = max_runs if max_runs is not None else self.max_runs
        runs = 50 if runs is None else runs
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise ValueError(f"max_runs must be a positive integer, got: {runs!r}")
        return {
            "middleware": self.middleware,
            "should_pause": should_pause,
            "max_runs": runs,
            "until_tool": names,
            "require_tool_success": require_success,
        }

    def _chain(self, state: AgentState) -> LLMChain:
        messages = state.messages
        if self.system_prompt is not None:
            messages = (Message.system(self.system_prompt), *messages)
        return LLMChain(
            self.model,
            tools=self.tools,
            messages=messages,
            custom_context={"state": dict(state.state)},
            callbacks=self.callbacks,
        )

    def _finish(self, result: Terminal) -> AgentState:
        chain = result.chain
        messages: Sequence[Message] = chain.messages
        if self.system_prompt is not None and messages and messages[0].role == "system":
            messages = messages[1:]
        state = AgentState(messages, chain.custom_context.get("state") or {})
        match result:
            case Ok(_, tool_result):
                state = attrs.evolve(state, status="ok", tool_result=tool_result)
                for middleware in reversed(self.middleware):
                    hook = getattr(middleware, "after_model", None)
                    if hook is None:
                        continue
                    try:
                        state = hook(state)
                    except ChainError as error:
                        return attrs.evolve(state, status="error", error=error)
                    if state.status != "ok":
                        break
                return state
            case Paused():
                return attrs.evolve(
                    state, status="paused", pause_reason=chain.custom_context.get("pause_reason")
                )
            case Interrupted(_, data):
                return attrs.evolve(state, status="interrupted", interrupt_data=data)
            case Failed(_, failure):
                if failure.type == "exceeded_max_runs":
                    failure = ChainError(failure.type, MAX_RUNS_MESSAGE, retryable=False)
                return attrs.evolve(state, status="error", error=failure)
        raise AssertionError(f"unexpected result {result!r}")

    # ------------------------------------------------------------ saved runs

    async def resume_run(self, run_id: str, store: Store, **options: Any) -> AgentState:
        """Continue a run saved in ``store`` from its last checkpoint (see :mod:`.store`)."""
        return await resume_run(self, run_id, store, **options)

    def resume_run_sync(self, run_id: str, store: Store, **options: Any) -> AgentState:
        return run_sync(self.resume_run(run_id, store, **options), self.model)

    # ------------------------------------------------------------ human in the loop

    async def resume(
        self, state: AgentState, decisions: Sequence[Mapping[str, Any]], **options: Any
    ) -> AgentState:
        """Apply human decisions to an interrupted state and continue the run.

        One decision per gated call, in action-request order: ``{"type":
        "approve"}``, ``{"type": "edit", "arguments": {...}}`` or ``{"type":
        "reject"}``. Approved and edited calls (and ungated siblings) run here,
        outside the machine; the run then re-enters at ``propagating``.
        Decisions that do not fit raise ValueError and change nothing.
        """
        run = await self.start_resume(state, decisions, **options)
        await run.run()
        return run.agent_state

    def resume_sync(
        self, state: AgentState, decisions: Sequence[Mapping[str, Any]], **options: Any
    ) -> AgentState:
        return run_sync(self.resume(state, decisions, **options), self.model)

    async def start_resume(
        self, state: AgentState, decisions: Sequence[Mapping[str, Any]], **options: Any
    ) -> AgentRun:
        """As :meth:`resume`, but return the run at its entry for the host to step."""
        by_id = _check_decisions(state, decisions)
        opts = self._options(
            options.get("until_tool"),
            options.get("until_tool_success"),
            options.get("max_runs"),
            options.get("should_pause"),
        )
        chain = self._chain(attrs.evolve(state, status="new", interrupt_data=None))
        calls = unanswered_calls(chain.messages)
        to_run: list[ToolCall] = []
        for call in calls:
            decision = by_id.get(call.call_id, {"type": "approve"})
            if decision["type"] == "edit":
                to_run.append(attrs.evolve(call, arguments=dict(decision["arguments"])))
            elif decision["type"] == "approve":
                to_run.append(call)
        ran = iter(await run_tool_calls(chain, to_run))
        results = [
            ToolResult(
                call.call_id,
                call.name,
                f"Tool call '{call.name}' was rejected by a human reviewer.",
            )
            if by_id.get(call.call_id, {}).get("type") == "reject"
            else next(ran)
            for call in calls
        ]
        return self._start(add_tool_message(chain, results), opts)


def _rejected(call: ToolCall) -> ToolResult:
    """Not an error: the model reads a human's no as information."""
    return ToolResult(
        call.call_id, call.name, f"Tool call '{call.name}' was rejected by a human reviewer."
    )


def _check_decisions(
    state: AgentState, decisions: Sequence[Mapping[str, Any]]
) -> dict[str, Mapping[str, Any]]:
    data = state.interrupt_data
    if not data:
        raise ValueError(
            "No interrupt data found in state. Cannot process decisions without interrupt context."
        )
    if "hitl_tool_call_ids" not in data:
        raise ValueError(
            f"The state's interrupt is not a tool approval (type {data.get('type')!r}); "
            "resume takes decisions for HumanInTheLoop interrupts only."
        )
    ids = list(data["hitl_tool_call_ids"])
    requests = list(data.get("action_requests", ()))
    configs = data.get("review_configs", {})
    if not isinstance(decisions, list | tuple):
        raise ValueError(f"Decisions must be a list, got: {type(decisions).__name__}")
    if len(decisions) != len(ids):
        raise ValueError(
            f"Decision count ({len(decisions)}) does not match HITL tool count ({len(ids)})"
        )
    by_id: dict[str, Mapping[str, Any]] = {}
    for index, (decision, request) in enumerate(zip(decisions, requests, strict=True)):
        if not isinstance(decision, Mapping):
            raise ValueError(f"Decision at index {index} is not a map")
        kind = decision.get("type")
        if kind is None:
            raise ValueError(
                f"Decision at index {index} has no type; use 'approve', 'edit' or 'reject'"
            )
        tool_name = request["tool_name"]
        allowed = list(configs.get(tool_name, {}).get("allowed_decisions", ()))
        if kind not in allowed:
            raise ValueError(
                f"Decision type '{kind}' not allowed for tool '{tool_name}'. Allowed: {allowed}"
            )
        if kind == "edit" and not isinstance(decision.get("arguments"), Mapping):
            raise ValueError(
                f"Edit decision at index {index} needs 'arguments': a map of the new arguments"
            )
        named = decision.get("tool_call_id")
        if named is not None and named != request["tool_call_id"]:
            raise ValueError(
                f"Decision at index {index} names tool call {named!r}, but action request "
                f"{index} is {request['tool_call_id']!r}; decisions go in action-request order"
            )
        by_id[request["tool_call_id"]] = decision
    return by_id
