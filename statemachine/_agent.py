"""Agent: a model, tools and middleware over the standard machine, with human approval."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ._answers import NO_INTERRUPT, Answer, check_approval, check_tool_answers
from ._approval import ANSWER, DECIDED, Approval
from ._chain import Callbacks, LLMChain
from ._errors import ChainError
from ._hooks import Hook
from ._machine import MachineTable
from ._messages import Message, Usage
from ._middleware.human_in_the_loop import check_gates
from ._modes.standard import STANDARD, STANDARD_OUTPUT, StandardMode
from ._options import (
    StandardOptions,
    check_callbacks,
    check_max_runs,
    check_model,
    check_optional,
    check_sequence,
    check_token_budget,
    check_tools,
    collapse_until_tool,
    until_targets,
)
from ._output import FINAL_RESULT, OutputTool, output_tool_of
from ._registry import fire_on_error
from ._results import Failed, Interrupted, Ok, Paused, Terminal
from ._run import Run
from ._state import AgentState
from ._sync import run_sync
from ._tools import Tool

if TYPE_CHECKING:
    from agentfsm._chat_model import ChatModel

    from .store import Store

__all__ = ["Agent", "AgentRun", "AgentState", "collapse_until_tool"]

MAX_RUNS_MESSAGE = "Max number of automated turns reached. You may continue if desired."
NO_MESSAGES_MESSAGE = (
    "The agent state has no messages and the agent no system prompt: there is nothing "
    "to send. Start from AgentState.of(prompt) or add a user message first."
)


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
            self._agent_state = self.agent._finish(self.result, self.trace.usage, self.pause_reason)
        return self._agent_state

    @property
    def output(self) -> Any:
        """The typed final answer of a run that ended ``ok`` (its agent's ``output_type``);
        None otherwise."""
        return self.agent_state.output

    def _settle(self, result: Terminal) -> Terminal:
        """A failed run fires ``on_error`` once, as ``LLMChain.run`` does."""
        return fire_on_error(result) if isinstance(result, Failed) else result


class Agent:
    """A model with tools and middleware, run on the standard machine (or ``machine``).

    ``max_runs`` bounds the model calls of one execute (default 50; an execute's
    own ``max_runs`` wins); ``token_budget`` bounds the tokens of one execute
    (none by default; past it the run ends in ``exceeded_token_budget``).
    ``machine`` is any machine the standard mode runs: one declared from the
    standard table, with a state of your own, say. ``name`` says who the agent is
    where its runs are shown (OpenTelemetry's ``invoke_agent {name}`` span): a
    non-empty string, or None.

    ``max_retry_count`` (3) is the failure budget: tool turns with an error in a row
    before the run ends in ``exceeded_failure_count``.

    ``output_type`` (an attrs class, a dataclass, a TypedDict, an enum, or a JSON
    type) makes the run's final answer a value of that type, checked:
    :mod:`agentfsm.output`. The agent then runs the
    :data:`~agentfsm.modes.standard.STANDARD_OUTPUT` machine (or ``machine``, which
    must have its ``validating_output`` state), its tools end with the
    ``final_result`` tool, and a run that ends ``ok`` holds the value in
    ``AgentState.output``. A bad answer goes back to the model at most
    ``output_retries`` times; then the run ends in error ``invalid_output``.
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
        token_budget: int | None = None,
        machine: MachineTable = STANDARD,
        name: str | None = None,
        output_type: Any = None,
        output_retries: int = 2,
        max_retry_count: int = 3,
    ) -> None:
        self.name = check_optional("name", name, str)
        if name is not None and not name.strip():
            raise ValueError("name must be a non-empty string (or None)")
        self.model = check_model(model)
        self.tools = tools
        #: The type of a run's final answer (None: the answer is the reply's text).
        self.output_type = output_type
        if output_type is not None:
            if any(t.name == FINAL_RESULT for t in self.tools):
                raise ValueError(
                    f"A tool is named {FINAL_RESULT!r}, which an agent with an output_type "
                    "gives its final answer to; rename the tool"
                )
            self.tools = (*self.tools, OutputTool.of(output_type, retries=output_retries))
            if machine is STANDARD:
                machine = STANDARD_OUTPUT
            elif "validating_output" not in machine.steps:
                raise ValueError(
                    f"An agent with an output_type checks the final answer in the "
                    f"'validating_output' state, which the {machine.name} machine lacks; "
                    "derive the machine from STANDARD_OUTPUT"
                )
        self.middleware = check_sequence("middleware", middleware)
        check_gates(self.middleware, self.tools, machine)
        self.system_prompt = check_optional("system_prompt", system_prompt, str)
        self.max_runs = None if max_runs is None else check_max_runs(max_runs)
        if isinstance(max_retry_count, bool) or not isinstance(max_retry_count, int):
            raise TypeError(f"max_retry_count is a whole number, got {max_retry_count!r}")
        if max_retry_count < 1:
            raise ValueError(f"max_retry_count must be at least 1, got {max_retry_count}")
        #: Tool turns with an error in a row before the run ends in
        #: ``exceeded_failure_count`` (the chain's ``max_retry_count``).
        self.max_retry_count = max_retry_count
        self.token_budget = check_token_budget(token_budget)
        self.callbacks = check_callbacks(callbacks)
        self.mode = StandardMode(machine)

    @property
    def tools(self) -> tuple[Tool, ...]:
        return self._tools

    @tools.setter
    def tools(self, tools: Sequence[Tool]) -> None:
        """Checked when given: a subagent that runs this agent again is refused."""
        checked = check_tools(tools)
        if any(getattr(t, "agent", None) is not None for t in checked):
            # import time: only an agent with subagents loads them
            from ._subagents import check_subagents

            check_subagents(self, checked)
        self._tools = checked

    # ------------------------------------------------------------ running

    def start(
        self,
        state: AgentState | str | Sequence[Message],
        *,
        until_tool: str | Sequence[str] | None = None,
        until_tool_success: str | Sequence[str] | None = None,
        max_runs: int | None = None,
        should_pause: Callable[[], bool | str] | None = None,
        extra_steps: Mapping[str, Sequence[Any]] | None = None,
        token_budget: int | None = None,
        hooks: Sequence[Hook] = (),
    ) -> AgentRun:
        """A run over ``state``, not yet stepped. Options are checked before anything runs.

        ``state`` is an :class:`AgentState`, a prompt (``"What is 1+2?"``: a new
        conversation) or a list of messages (the conversation so far).

        ``hooks`` observe the run (:mod:`agentfsm.hooks`), after the global ones.
        ``before_model`` hooks run first; a hook's ChainError, or a conversation
        with nothing to send (error ``no_messages``, after ``on_error`` fired),
        is raised before any model call.
        """
        options = self.options(
            until_tool=until_tool,
            until_tool_success=until_tool_success,
            max_runs=max_runs,
            should_pause=should_pause,
            extra_steps=extra_steps,
            token_budget=token_budget,
        )
        return self._begin(AgentState.given(state), options, hooks)

    def _begin(
        self,
        state: AgentState,
        options: StandardOptions,
        hooks: Sequence[Hook] = (),
        answer: Answer | None = None,
    ) -> AgentRun:
        """The run over ``state``: ``before_model`` hooks first, then the machine, entered
        where the conversation says, or where ``answer`` enters it, carrying it in."""
        for middleware in self.middleware:
            hook = getattr(middleware, "before_model", None)
            if hook is not None:
                state = hook(state)
        chain = self.build_chain(state)
        if not chain.messages:
            error = ChainError("no_messages", NO_MESSAGES_MESSAGE, retryable=False)
            chain.fire("on_error", chain, error)
            raise error
        at = None
        if answer is not None:
            carried = {ANSWER: answer.value}
            if answer.decided:
                carried[DECIDED] = dict(answer.decided)
            chain = chain.update_custom_context(carried)
            at = answer.state
        return self._start(chain, options, hooks, at=at)

    def _start(
        self,
        chain: LLMChain,
        options: StandardOptions,
        hooks: Sequence[Hook] = (),
        *,
        at: str | None = None,
    ) -> AgentRun:
        run = self.mode.start(chain, options, run_class=self.run_class, hooks=hooks, at=at)
        assert isinstance(run, AgentRun)
        run.agent = self
        return run

    async def execute(
        self, state: AgentState | str | Sequence[Message], **options: Any
    ) -> AgentState:
        """Run to a terminal and return the state to keep (see :meth:`start` for what
        ``state`` may be and for options)."""
        state = AgentState.given(state)
        try:
            run = self.start(state, **options)
        except ChainError as error:
            return attrs.evolve(state, status="error", error=error)
        del state, options  # what the run needs is in its chain: a parked run keeps no more
        await run.run()
        return run.agent_state

    def execute_sync(
        self, state: AgentState | str | Sequence[Message], **options: Any
    ) -> AgentState:
        return run_sync(self.execute(state, **options), self.model)

    def options(
        self,
        *,
        until_tool: str | Sequence[str] | None = None,
        until_tool_success: str | Sequence[str] | None = None,
        max_runs: int | None = None,
        should_pause: Callable[[], bool | str] | None = None,
        extra_steps: Mapping[str, Sequence[Any]] | None = None,
        token_budget: int | None = None,
    ) -> StandardOptions:
        """The options of a run of this agent, checked: :meth:`start`'s arguments with
        the agent's own (``max_runs``, ``token_budget``, middleware) where they are None."""
        names, require_success = until_targets(
            until_tool, until_tool_success, [t.name for t in self.tools]
        )
        check_optional("should_pause", should_pause, Callable)
        chosen: dict[str, Any] = {}
        runs = max_runs if max_runs is not None else self.max_runs
        if runs is not None:
            chosen["max_runs"] = check_max_runs(runs)
        budget = check_token_budget(token_budget)
        options = self.mode.options(
            middleware=self.middleware,
            should_pause=should_pause,
            until_tool=names,
            require_tool_success=require_success,
            extra_steps=extra_steps or {},
            token_budget=budget if budget is not None else self.token_budget,
            **chosen,
        )
        return options

    def build_chain(self, state: AgentState) -> LLMChain:
        """The chain a run over ``state`` starts from: system prompt, tools, callbacks.

        For middleware that runs tools outside the machine, as HumanInTheLoop does.
        """
        messages = state.messages
        if self.system_prompt is not None:
            messages = (Message.system(self.system_prompt), *messages)
        return LLMChain(
            self.model,
            tools=self.tools,
            messages=messages,
            custom_context={"state": dict(state.state)},
            callbacks=self.callbacks,
            max_retry_count=self.max_retry_count,
        )

    def _finish(self, result: Terminal, usage: Usage, pause_reason: Any = None) -> AgentState:
        """The state a run's ``result`` leaves the host, ``after_model`` hooks applied;
        built once with every field (``attrs.evolve`` costs more than the run's end)."""
        chain = result.chain
        output = None
        if isinstance(result, Ok):
            tool = output_tool_of(chain.tools)
            output = None if tool is None else tool.read(chain.messages)[0]
        messages: Sequence[Message] = chain.messages
        if self.system_prompt is not None and messages and messages[0].role == "system":
            messages = messages[1:]
        agent_state = chain.custom_context.get("state") or {}
        match result:
            case Ok(_, tool_result):
                state = AgentState(
                    messages,
                    agent_state,
                    status="ok",
                    tool_result=tool_result,
                    usage=usage,
                    output=output,
                )
                for middleware in reversed(self.middleware):
                    hook = getattr(middleware, "after_model", None)
                    if hook is None:
                        continue
                    try:
                        state = hook(state)
                    except ChainError as error:
                        return attrs.evolve(state, status="error", error=error, usage=usage)
                    if state.status != "ok":
                        break
                return state if state.usage is usage else attrs.evolve(state, usage=usage)
            case Paused():
                return AgentState(
                    messages, agent_state, status="paused", pause_reason=pause_reason, usage=usage
                )
            case Interrupted(_, data):
                return AgentState(
                    messages,
                    agent_state,
                    status="interrupted",
                    interrupt_data=data,
                    interrupted_at=result.state,
                    usage=usage,
                )
            case Failed(_, failure):
                # The agent's own budget reads as SPEC words it; a child machine's keeps
                # the error naming the child and where it stopped (subagents._named).
                if failure.type == "exceeded_max_runs" and "child" not in failure.details:
                    failure = ChainError(failure.type, MAX_RUNS_MESSAGE, retryable=False)
                return AgentState(messages, agent_state, status="error", error=failure, usage=usage)
        raise AssertionError(f"unexpected result {result!r}")

    # ------------------------------------------------------------ resuming

    async def resume(
        self, state: AgentState, answer: Any, *, unbound: bool = False, **options: Any
    ) -> AgentState:
        """Answer the interrupt of ``state`` and run on to a terminal.

        The answer enters the machine at the state that asked, as a new segment's
        input: for an approval, one decision per gated call in action-request order
        (``approval.requests[i].approve()``, ``.edit({...})``, ``.reject()``, or their
        dict forms carrying the request's ``"digest"``; ``unbound=True`` accepts
        decisions without one), which the approval state applies before
        ``executing`` runs what was approved; for a tool's own interrupt, the text
        that becomes the tool's result at ``propagating``. The run then goes on as
        :meth:`execute` runs it, ``before_model`` hooks included; ``options`` are
        :meth:`start`'s. Options and answers that do not fit raise ValueError
        (:class:`~agentfsm.approval.DecisionError` for decisions) and change nothing.
        :meth:`start_resume` is the same, stepped by the host.
        """
        try:
            run = await self.start_resume(state, answer, unbound=unbound, **options)
        except ChainError as error:
            return attrs.evolve(state, status="error", error=error)
        del state, answer, options  # as in ``execute``: the run's chain holds what it needs
        await run.run()
        return run.agent_state

    def resume_sync(
        self, state: AgentState, answer: Any, *, unbound: bool = False, **options: Any
    ) -> AgentState:
        return run_sync(self.resume(state, answer, unbound=unbound, **options), self.model)

    async def start_resume(
        self, state: AgentState, answer: Any, *, unbound: bool = False, **options: Any
    ) -> AgentRun:
        """:meth:`resume`, returning the run at the state that asked, for the host to step.

        A ChainError of a ``before_model`` hook is raised, as :meth:`start` raises it.
        """
        unknown = set(options) - _START_OPTIONS
        if unknown:
            raise TypeError(
                f"Unknown option(s) {sorted(unknown)}; options: {sorted(_START_OPTIONS)}"
            )
        self.options(**{k: v for k, v in options.items() if k != "hooks"})
        data = state.interrupt_data
        if not data:
            raise ValueError(NO_INTERRUPT)
        if Approval.is_approval(data):
            decisions = check_approval(state, self.tools, self.middleware, answer, unbound=unbound)
            answered = Answer(state=state.interrupted_at, value=decisions.to_data())
            return self._start_answered(state, answered, options)
        if any(getattr(t, "agent", None) is not None for t in self.tools):
            # import time: only an agent with subagents loads them
            from ._waiting_children import SUBAGENT_ANSWERS, answer_subagents

            waiting = answer_subagents(self, state, answer, unbound=unbound)
            if waiting is not None:  # the waiting calls run again, their children resumed
                ready, carried = waiting
                answered = Answer(
                    state=self.mode.table.entries["pending tool calls"],
                    value=carried,
                    decided=dict.fromkeys(carried[SUBAGENT_ANSWERS], "approve"),
                )
                return self._start_answered(ready, answered, options)
        handled = await self._handled(state, answer)
        if handled is not None:  # a middleware's own interrupt, answered its own way
            return self.start(handled, **options)
        if "tool_call_id" not in data and data.get("type") != "multiple_interrupts":
            owners = [type(m).__name__ for m in self.middleware if hasattr(m, "handle_resume")]
            raise ValueError(
                f"No middleware handled the resume for this interrupt (type "
                f"{str(data.get('type'))[:60]!r}): no tool asked it, and the agent's middleware "
                f"that can resume ({owners}) did not take it. Add the middleware that raised it."
            )
        results = check_tool_answers(state, answer)
        return self._start_answered(
            state, Answer(state=state.interrupted_at, value=results), options
        )

    def start_resume_sync(
        self, state: AgentState, answer: Any, *, unbound: bool = False, **options: Any
    ) -> AgentRun:
        """:meth:`start_resume` for scripts and tests."""
        return run_sync(self.start_resume(state, answer, unbound=unbound, **options), self.model)

    def _start_answered(
        self, state: AgentState, answer: Answer, options: Mapping[str, Any]
    ) -> AgentRun:
        """A new segment at the state that asked, carrying the answer in for it to take."""
        asked = attrs.evolve(state, status="new", interrupt_data=None, interrupted_at=None)
        checked = self.options(**{k: v for k, v in options.items() if k != "hooks"})
        return self._begin(asked, checked, options.get("hooks", ()), answer)

    async def _handled(self, state: AgentState, answer: Any) -> AgentState | None:
        """The state a middleware that owns the interrupt made of ``answer`` (an adapter
        for custom interrupts: :meth:`Middleware.handle_resume`); None when none does."""
        for middleware in self.middleware:
            hook = getattr(middleware, "handle_resume", None)
            answered = None if hook is None else await hook(self, state, answer)
            if answered is None:
                continue
            if not isinstance(answered, AgentState):
                raise TypeError(
                    f"{type(middleware).__name__}.handle_resume returned "
                    f"{type(answered).__name__}; it returns an AgentState, or None when the "
                    "interrupt is not its own"
                )
            return attrs.evolve(answered, status="new", interrupt_data=None, interrupted_at=None)
        return None

    async def resume_run(
        self,
        run_id: str,
        store: Store,
        answer: Any = None,
        *,
        should_pause: Callable[[], bool] | None = None,
        extra_steps: Mapping[str, Sequence[Any]] | None = None,
        strict: bool = True,
        unbound: bool = False,
    ) -> AgentState:
        """Continue the run saved in ``store`` and run it to a terminal.

        A run that had not ended (a crash) goes on from its last checkpoint; a
        paused one from its chain. An interrupted one needs ``answer``, taken as
        :meth:`resume` takes it (``unbound`` as there): it enters the machine at the
        state that asked, in a new segment, so approved calls run at ``executing``
        and are checkpointed like any other. The run keeps checkpointing;
        ``until_tool`` and ``max_runs`` are the saved ones. See :mod:`agentfsm.store`.

        The resume claims the run before anything runs: a run another process
        holds, or one that went on or ended since it was loaded here, is refused with
        :class:`~agentfsm.store.RunInUseError` (or its
        :class:`~agentfsm.store.RunFinishedError`) and runs nothing.
        """
        from ._resume import restore_run  # the store is imported when first used

        run = await restore_run(
            self,
            run_id,
            store,
            answer,
            should_pause=should_pause,
            extra_steps=extra_steps,
            strict=strict,
            unbound=unbound,
        )
        await run.run()
        return run.agent_state

    def resume_run_sync(
        self, run_id: str, store: Store, answer: Any = None, **options: Any
    ) -> AgentState:
        return run_sync(self.resume_run(run_id, store, answer, **options), self.model)


#: The options :meth:`Agent.start` takes, which a resume passes on to it.
_START_OPTIONS = frozenset(inspect.signature(Agent.start).parameters) - {"self", "state"}
