"""The workflow of one run: the machine steps in the workflow, its calls are activities.

A run is the Temporal workflow ``agentfsm.run``. Its body drives the agent's
machine one state at a time, as any host does, with the agent's model and tools
wrapped so that each model call and each tool call is one activity (id
``model:NAME@expanded>calling#1``, ``tool:NAME@clear>executing#2``: what it
calls, the edge into the state making it, its index in the run). Every other
state is pure: a worker that replays the history computes the same chains from
the recorded replies and results, and goes on from the first call with none.

Nothing here reads a clock, draws a random number or does I/O; agentfsm itself
is passed through the sandbox (it is imported once, outside it), so its
modules are the worker's own. The trace's step durations are the only values a
replay computes afresh, and nothing decides on them.

Decisions enter through the update ``agentfsm.decide``: compare-and-set inside
the workflow, whose handlers run one at a time, so the first decisions that fit
a wait are taken and any other is refused, and the same decisions sent again
are known as a repeat. A drain is the signal ``agentfsm.drain``: the run pauses
at its next state boundary with reason ``"draining"`` (a segment of its record)
and goes on in a new segment, on whichever worker takes its next task.

The machine the run started on is its first command, the local activity
``agentfsm.machine`` (``NAME@FINGERPRINT``): recorded once, read back on every
replay. A worker of another machine handed the history reads the recorded one
and, under the ``pinned`` policy, fails the workflow task instead of replaying
it, so the run waits for a worker of its machine. Under ``compatible`` it replays
on its own machine, which Temporal holds to the recorded calls: one that calls
otherwise fails its task as nondeterministic, and the run waits as well.

One idea: one run's workflow. Its machine marker, its update and signal handlers and
its child workflows share the run's state and are replayed together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import attrs

    from agentfsm import (
        Agent,
        AgentRun,
        AgentState,
        Approval,
        ChainError,
        LLMChain,
        Message,
        SubAgent,
        Tool,
        ToolCall,
        ToolContext,
        ToolResult,
        Trace,
    )
    from agentfsm._child_runs import children_run_by, nested
    from agentfsm._durable_shared import call_name, same_decisions
    from agentfsm._durable_shared import plain as _plain
    from agentfsm._serialization import FORMAT, check_format, converter
    from agentfsm._steps import get_run_count
    from agentfsm._tools import WrapperTool
    from agentfsm.providers import WrapperModel
    from agentfsm.store import dump, load_trace

    from ._activities import (
        MACHINE_ACTIVITY,
        MODEL_ACTIVITY,
        TOOL_ACTIVITY,
        ModelCall,
        ModelReply,
        ToolJob,
        find_agent,
        machine_marker,
    )
    from ._registry import AGENTS, HELD, SETTINGS, tell

__all__ = [
    "CHILD_SIGNAL",
    "CHILD_WORKFLOW",
    "DECIDE_UPDATE",
    "DRAIN_SIGNAL",
    "MEMO",
    "PROGRESS_QUERY",
    "WAITING_QUERY",
    "WORKFLOW",
    "RunWorkflow",
    "SubagentWorkflow",
    "bound_decisions",
    "claim_of",
    "waits_on",
]

WORKFLOW: Final = "agentfsm.run"
CHILD_WORKFLOW: Final = "agentfsm.subagent"
DECIDE_UPDATE: Final = "agentfsm.decide"
DRAIN_SIGNAL: Final = "agentfsm.drain"
WAITING_QUERY: Final = "agentfsm.waiting"
#: The run so far (its segments, the one in progress as far as it went, and its state).
PROGRESS_QUERY: Final = "agentfsm.progress"
#: A subagent's run tells its parent it waits for decisions, or goes on.
CHILD_SIGNAL: Final = "agentfsm.child"
#: The memo key a run keeps where it stands in (``running``/``waiting``, the request):
#: a client reads it from the server, with no worker up.
MEMO: Final = "agentfsm"
#: The states before which a drained run pauses (each has a ``paused`` edge).
_DRAIN_POINTS: Final = frozenset({"calling", "interrupt_check"})
_FOREVER: Final = 365 * 24 * 3600.0


def waits_on(data: Mapping[str, Any] | None) -> bool:
    """Whether a run interrupted with ``data`` waits for decisions (an approval request)."""
    return bool(data) and "hitl_tool_call_ids" in (data or {})


def claim_of(decisions: Any, claims: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
    """Of a run's ``claims`` (the decisions each wait took, newest first), the one taken
    for the wait ``decisions`` name (by call id or digest); None when they name none."""
    if not isinstance(decisions, list | tuple):
        return None
    named = {
        d.get(key)
        for d in decisions
        if isinstance(d, Mapping)
        for key in ("tool_call_id", "digest")
        if d.get(key) is not None
    }
    for claim in claims:
        if named & {c.get(k) for c in claim for k in ("tool_call_id", "digest")}:
            return claim
    return None


def bound_decisions(
    request: Mapping[str, Any], decisions: Any, *, unbound: bool = False
) -> list[dict[str, Any]]:
    """``decisions`` checked against ``request`` and bound to it (ValueError if they do not
    answer it): what the run takes."""
    if not isinstance(decisions, list | tuple):
        raise ValueError(f"decisions are a list, got {type(decisions).__name__}")
    bound: list[dict[str, Any]] = _plain(
        Approval.of(request).check(decisions, unbound=unbound).to_data()
    )
    return bound


def _options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A submission's options as :meth:`Agent.start` takes them."""
    names = list(options.get("until_tool") or ())
    key = "until_tool_success" if options.get("require_tool_success") else "until_tool"
    out: dict[str, Any] = {key: names} if names else {}
    if "max_runs" in options:
        out["max_runs"] = options["max_runs"]
    return out


def _failed(state: AgentState, kind: str, message: str) -> AgentState:
    return attrs.evolve(state, status="error", error=ChainError(kind, message, retryable=False))


def _spent(chain: LLMChain, calls: int) -> LLMChain:
    """The chain with ``calls`` model calls already counted against ``max_runs``."""
    if not calls:
        return chain
    mode_state = dict(chain.custom_context.get("mode_state") or {})
    return chain.update_custom_context({"mode_state": {**mode_state, "run_count": calls}})


class _Execution:
    """One execution of a run (or a subagent's run) in its workflow."""

    def __init__(
        self,
        flow: _Flow,
        agent: Agent,
        *,
        name: str,
        path: Sequence[str],
        settings: Mapping[str, Any],
    ) -> None:
        self.flow = flow
        self.name = name
        self.path = tuple(path)
        self.run: AgentRun | None = None
        self.calls = 0
        self.stepped = False
        self.options: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=float(settings["call_timeout"])),
            "heartbeat_timeout": timedelta(seconds=float(settings["heartbeat"])),
            "retry_policy": RetryPolicy(
                initial_interval=timedelta(seconds=0.2),
                maximum_interval=timedelta(seconds=5),
                non_retryable_error_types=["UnknownAgent", "UnknownTool"],
            ),
        }
        self.agent = Agent(
            _ActivityModel(agent.model, self),
            [_ActivityTool.wrap(t, execution=self) for t in agent.tools],
            middleware=agent.middleware,
            system_prompt=agent.system_prompt,
            max_runs=agent.max_runs,
            callbacks=agent.callbacks,
            token_budget=agent.token_budget,
            machine=agent.mode.table,
            name=agent.name,
            max_retry_count=agent.max_retry_count,
        )

    def step_name(self, kind: str) -> str:
        """The next call's activity id: what it calls, the edge into the state making it,
        and its index in the run (``model:gpt@expanded>calling#1``)."""
        self.calls += 1
        return call_name(self.run, kind, self.calls)

    def should_pause(self) -> bool | str:
        """After a model reply: pause for a drain asked meanwhile."""
        if self.flow.drain_asked:
            self.flow.drain_asked = False
            return "draining"
        return False

    async def drive(self, run: AgentRun, traces: list[dict[str, Any]]) -> AgentState:
        """Step ``run`` to a terminal; its trace joins ``traces`` with how it ended."""
        self.run = run
        self.stepped = False
        while not run.done:
            if self.flow.drain_asked and self.stepped and run.state in _DRAIN_POINTS:
                self.flow.drain_asked = False
                run.request_pause("draining")
            await run.step()
        state = run.agent_state
        trace = dump(run.trace)
        trace["end"] = state.status if state.status != "paused" else f"paused: {state.pause_reason}"
        traces.append(trace)
        self.run = None
        self.flow.state = state
        return state

    async def segments(
        self,
        state: AgentState,
        options: Mapping[str, Any],
        traces: list[dict[str, Any]],
        decisions: Sequence[Mapping[str, Any]] | None = None,
    ) -> AgentState:
        """Segments until the run ends or waits: a drain's pause starts the next one, with
        the model calls made so far counted against ``max_runs``."""
        spent = 0
        while True:
            if decisions is not None:
                run = await self.agent.start_resume(
                    state, decisions, should_pause=self.should_pause, **options
                )
                decisions = None
            else:
                run = self.agent.start(state, should_pause=self.should_pause, **options)
            run.chain = _spent(run.chain, spent)
            state = await self.drive(run, traces)
            if state.status == "paused" and state.pause_reason == "draining":
                spent = get_run_count(run.chain)
                continue
            return state

    async def run_child(
        self, name: str, agent: Agent, task: str, max_runs: int, tokens: int | None, depth: int
    ) -> tuple[AgentState, list[Trace]]:
        """Run the subagent ``name`` as a child workflow (``RUN/tool:NAME@...#N``) and wait
        for its end: its end state and traces are the child's recorded result, so a replay
        waits on the same child and never runs it again."""
        del agent  # the child finds it from the registered agent and the path
        step = self.step_name(f"tool:{name}")
        child = {
            "format": FORMAT,
            "agent": self.name,
            "path": [*self.path, name],
            "task": task,
            "max_runs": max_runs,
            "token_budget": tokens,
            "depth": depth,
            "settings": dict(self.flow.settings),
            "decision_timeout": self.flow.decision_timeout,
        }
        output: dict[str, Any] = await workflow.execute_child_workflow(
            CHILD_WORKFLOW, child, id=f"{workflow.info().workflow_id}/{step}", result_type=dict
        )
        self.stepped = True
        if "error" in output:
            raise converter.structure(output["error"], ChainError)
        state = converter.structure(output["state"], AgentState)
        return state, [load_trace(doc, strict=False) for doc in output["traces"]]


class _ActivityModel(WrapperModel):
    """A model whose every call is one activity: the reply (or error) is recorded."""

    __slots__ = ("execution",)

    def __init__(self, wrapped: Any, execution: _Execution) -> None:
        super().__init__(wrapped)
        self.execution = execution

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, on_delta: Any = None
    ) -> Message:
        ex = self.execution
        job = ModelCall(ex.name, ex.path, tuple(messages), tuple(t.name for t in tools))
        reply = await workflow.execute_activity(
            MODEL_ACTIVITY,
            job,
            result_type=ModelReply,
            activity_id=ex.step_name(f"model:{self.name}"),
            **ex.options,
        )
        ex.stepped = True
        if reply.error is not None:
            raise reply.error
        message: Message | None = reply.message
        assert message is not None, "a reply holds a message or an error"
        return message


@attrs.frozen
class _ActivityTool(WrapperTool):
    """A tool whose every call is one activity (a subagent's, a child workflow)."""

    execution: _Execution = attrs.field(kw_only=True, eq=False, repr=False)

    async def invoke(self, call: ToolCall, context: ToolContext) -> ToolResult:
        ex = self.execution
        if isinstance(self.wrapped, SubAgent):  # a child workflow, not an activity
            with children_run_by(ex.run_child):
                return await self.wrapped.invoke(call, context)
        job = ToolJob(
            ex.name,
            ex.path,
            call,
            _plain(dict(context.state)),
            _plain(dict(context.custom_context)),
        )
        result: ToolResult = await workflow.execute_activity(
            TOOL_ACTIVITY,
            job,
            result_type=ToolResult,
            activity_id=ex.step_name(f"tool:{self.name}"),
            **ex.options,
        )
        ex.stepped = True
        return result


class _Flow:
    """What a run's workflow and a subagent's keep between their handlers: the wait for
    decisions, the decisions taken (compare-and-set), a drain."""

    def __init__(self) -> None:
        self.drain_asked = False
        self.settings: dict[str, Any] = {"call_timeout": 600.0, "heartbeat": 10.0}
        #: Seconds a wait for decisions lasts (None: no limit), the run's and its subagents'.
        self.decision_timeout: float | None = None
        #: The subagents down to this run (empty for a run's own workflow).
        self.path: list[str] = []
        #: The open wait: ``{"segment", "interrupt"}``, or None.
        self._waiting: dict[str, Any] | None = None
        #: Decisions taken for the open wait, not yet read by the run.
        self._inbox: list[dict[str, Any]] | None = None
        #: Every wait's decisions, newest first.
        self._claims: list[list[dict[str, Any]]] = []
        #: The run's ended segments, its execution and its newest state (the progress query's).
        self.traces: list[dict[str, Any]] = []
        self.execution: _Execution | None = None
        self.state: AgentState | None = None

    async def waits(
        self,
        execution: _Execution,
        state: AgentState,
        options: Mapping[str, Any],
        traces: list[dict[str, Any]],
        wait: float,
        decisions: Sequence[Mapping[str, Any]] | None = None,
    ) -> AgentState:
        """Segments to the run's end, waiting for decisions wherever it asks for them
        (up to ``wait`` seconds each time; then it ends ``interrupted``)."""
        while True:
            state = await execution.segments(state, options, traces, decisions)
            if state.status != "interrupted" or not waits_on(state.interrupt_data):
                return state
            decisions = await self._decisions(state, len(traces), wait)
            if decisions is None:
                return state

    async def _decisions(
        self, state: AgentState, segment: int, wait: float
    ) -> list[dict[str, Any]] | None:
        """Wait up to ``wait`` seconds for decisions; None when none came in time."""
        interrupt = _plain(dict(state.interrupt_data or {}))
        self._waiting = {"segment": segment, "interrupt": interrupt}
        await self._tell({"status": "waiting", **self._waiting})
        try:
            await workflow.wait_condition(lambda: self._inbox is not None, timeout=wait)
        except TimeoutError:
            self._waiting = None
            await self._tell({"status": "running"})
            return None
        decisions, self._inbox, self._waiting = self._inbox, None, None
        await self._tell({"status": "running", "decided": decisions})
        return decisions

    async def _tell(self, standing: dict[str, Any]) -> None:
        """Say where the run stands: a run in its memo; a subagent's run to its parent,
        which tells the run at the top (a reviewer answers the subagent that asks)."""
        parent = workflow.info().parent
        if parent is None:
            standing.pop("decided", None)
            workflow.upsert_memo({MEMO: standing})
            return
        message = {**standing, "workflow": workflow.info().workflow_id, "path": self.path}
        await workflow.get_external_workflow_handle(parent.workflow_id).signal(
            CHILD_SIGNAL, message
        )

    @workflow.signal(name=CHILD_SIGNAL)
    async def child(self, message: dict[str, Any]) -> None:
        """A subagent's run waits for decisions, or goes on: the run at the top shows its
        request as its own (``child_path`` naming the subagents), and keeps the decisions
        it took, so the same ones sent again are known as a repeat."""
        parent = workflow.info().parent
        if parent is not None:
            await workflow.get_external_workflow_handle(parent.workflow_id).signal(
                CHILD_SIGNAL, message
            )
            return
        if message.get("decided"):
            self._claims.insert(0, list(message["decided"]))
        if message.get("status") == "waiting":
            request = dict(message.get("interrupt") or {})
            request["child_path"] = list(message.get("path") or [])
            workflow.upsert_memo(
                {MEMO: {"status": "waiting", "interrupt": request, "child": message["workflow"]}}
            )
        elif self._waiting is None:
            workflow.upsert_memo({MEMO: {"status": "running"}})

    @workflow.query(name=WAITING_QUERY)
    def waiting(self) -> dict[str, Any] | None:
        """The approval request the run waits on, or None."""
        return None if self._waiting is None else dict(self._waiting["interrupt"])

    @workflow.query(name=PROGRESS_QUERY)
    def progress(self) -> dict[str, Any]:
        """The run so far: its ended segments, the one in progress as far as it went (its
        end ``running``), and the newest state (a run waiting for decisions: the state
        that asked; one in a segment: status ``new``, the conversation so far)."""
        traces = list(self.traces)
        state = self.state
        run = self.execution.run if self.execution is not None else None
        if run is not None and run.trace.transitions:
            trace = dump(run.trace)
            trace["end"] = "running"
            traces.append(trace)
            if state is not None:  # not ended ("new"), the conversation as far as it got
                state = attrs.evolve(
                    state,
                    messages=tuple(run.chain.messages),
                    status="new",
                    interrupt_data=None,
                    interrupted_at=None,
                )
        return {
            "format": FORMAT,
            "state": None if state is None else converter.unstructure(state, AgentState),
            "traces": traces,
        }

    @workflow.signal(name=DRAIN_SIGNAL)
    def drain(self, worker: str) -> None:
        """Pause at the next state boundary (a run waiting for decisions keeps waiting)."""
        del worker  # in the history, beside the signal: who drained
        if self._waiting is None:
            self.drain_asked = True

    def _judge(self, message: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The bound decisions the run takes from ``message``, None for a repeat of ones it
        took; refused (an ApplicationError naming the agentfsm error) otherwise."""
        decisions = message.get("decisions")
        unbound = bool(message.get("unbound"))
        waiting = self._waiting
        if waiting is not None and self._inbox is None:
            try:
                return bound_decisions(waiting["interrupt"], decisions, unbound=unbound)
            except ValueError as exc:
                if self._repeated(decisions, unbound=False):
                    return None
                won = self._claim_of(decisions)
                if won is None:  # they answer no wait of this run
                    raise _refuse("ValueError", str(exc)) from None
                raise self._conflict(won) from None  # an earlier wait's, answered otherwise
        if self._repeated(decisions, unbound=unbound):
            return None
        if self._claims:
            raise self._conflict(self._claim_of(decisions) or self._claims[0])
        raise _refuse(
            "ResumeError",
            f"Run {workflow.info().workflow_id!r} is not waiting for decisions",
        )

    def _claim_of(self, decisions: Any) -> list[dict[str, Any]] | None:
        """The decisions taken for the wait ``decisions`` name (by call id or digest)."""
        return claim_of(decisions, self._claims)

    def _conflict(self, won: list[dict[str, Any]]) -> ApplicationError:
        return _refuse(
            "DecisionConflictError",
            f"Run {workflow.info().workflow_id!r} took other decisions first: "
            f"{json.dumps(won)[:300]}; these were not sent.",
            won,
        )

    def _repeated(self, decisions: Any, *, unbound: bool) -> bool:
        if not isinstance(decisions, list | tuple) or not decisions:
            return False
        bound = all(isinstance(d, Mapping) and d.get("digest") is not None for d in decisions)
        claims = self._claims[: None if bound else 1]
        return any(same_decisions(decisions, claim, unbound=unbound) for claim in claims)

    @workflow.update(name=DECIDE_UPDATE)
    def decide(self, message: dict[str, Any]) -> dict[str, Any]:
        """Take decisions for the open wait: the first that fit win (compare-and-set)."""
        taken = self._judge(message)
        if taken is None:
            return {"taken": False, "decisions": self._claims[0] if self._claims else []}
        self._inbox = taken
        self._claims.insert(0, taken)
        return {"taken": True, "decisions": taken}

    @decide.validator
    def _check_decide(self, message: dict[str, Any]) -> None:
        """Refuse decisions before they reach the history: nothing is recorded for them."""
        self._judge(message)


class _OtherMachineError(RuntimeError):
    """This worker's machine is not the one the history was recorded on."""


def _result_doc(
    state: AgentState,
    traces: Sequence[Any],
    claims: Sequence[Any] = (),
    submission: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run's result; with what a continuation needs to go on from it (its options)."""
    kept = ("agent", "options", "decision_timeout", "settings")
    return {
        "format": FORMAT,
        "state": converter.unstructure(state, AgentState),
        "traces": list(traces),
        "decided": list(claims),
        "submission": {k: v for k, v in (submission or {}).items() if k in kept},
    }


def _refuse(kind: str, message: str, details: Any = None) -> ApplicationError:
    extra = () if details is None else (details,)
    return ApplicationError(message, *extra, type=kind, non_retryable=True)


@workflow.defn(name=WORKFLOW)
class RunWorkflow(_Flow):
    """One run, from its submission to a terminal (waiting for decisions where asked)."""

    @workflow.run
    async def run(self, submission: dict[str, Any]) -> dict[str, Any]:
        run_id = workflow.info().workflow_id
        agent = str(submission.get("agent"))
        HELD.enter(run_id)
        if not workflow.unsafe.is_replaying():  # a log line, never part of the run
            tell("start", run_id, {"agent": agent})
        try:
            out = await self._run(submission)
        finally:
            HELD.leave(run_id)
        if not workflow.unsafe.is_replaying():
            tell("end", run_id, {"agent": agent, "status": out["state"].get("status")})
        return out

    async def _run(self, submission: Mapping[str, Any]) -> dict[str, Any]:
        check_format(submission)
        self.settings.update(submission.get("settings") or {})
        state = converter.structure(submission["state"], AgentState)
        # a continuation (``RUN/resume-N``) carries the segments and decisions before it
        traces: list[dict[str, Any]] = list(submission.get("earlier") or [])
        self._claims = list(submission.get("claims") or [])
        name = str(submission["agent"])
        agent = AGENTS.get(name)
        if agent is None:
            return _result_doc(
                _failed(
                    state,
                    "unknown_agent",
                    f"No agent is registered under {name!r} on this worker (registered: "
                    f"{sorted(AGENTS)}); register it before starting the worker.",
                ),
                traces,
            )
        mine = machine_marker(agent)
        recorded = await workflow.execute_local_activity(
            MACHINE_ACTIVITY, name, result_type=str, start_to_close_timeout=timedelta(seconds=30)
        )
        if recorded != mine and SETTINGS.get("policy", "pinned") == "pinned":
            raise _OtherMachineError(
                f"run {workflow.info().workflow_id!r} was recorded on the machine {recorded}, "
                f"this worker runs {mine}: a worker of its machine finishes it (policy pinned)"
            )
        execution = _Execution(self, agent, name=name, path=(), settings=self.settings)
        self.traces, self.execution, self.state = traces, execution, state
        options = _options(submission.get("options") or {})
        timeout = submission.get("decision_timeout")
        self.decision_timeout = None if timeout is None else float(timeout)
        wait = _FOREVER if timeout is None else float(timeout)
        decisions: Sequence[Mapping[str, Any]] | None = submission.get("decisions")
        if decisions is not None:
            self._claims.insert(0, [dict(d) for d in decisions])
        workflow.upsert_memo({MEMO: {"status": "running"}})
        try:
            state = await self.waits(execution, state, options, traces, wait, decisions)
        except ValueError as exc:  # options the agent refuses
            state = _failed(state, "invalid_options", str(exc))
        workflow.upsert_memo({MEMO: {"status": state.status}})
        return _result_doc(state, traces, self._claims, submission)


@workflow.defn(name=CHILD_WORKFLOW)
class SubagentWorkflow(_Flow):
    """A subagent's run, to its end: its parent's tool call, as a child workflow."""

    @workflow.run
    async def run(self, child: dict[str, Any]) -> dict[str, Any]:
        with children_run_by(None), nested(int(child["depth"])):
            return await self._run(child)

    async def _run(self, child: Mapping[str, Any]) -> dict[str, Any]:
        check_format(child)
        self.settings.update(child.get("settings") or {})
        name, path = str(child["agent"]), [str(p) for p in child["path"]]
        self.path = path
        agent = find_agent(name, path)
        if agent is None:
            error = ChainError(
                "unknown_agent", f"No subagent {' -> '.join([name, *path])!r}", retryable=False
            )
            return {"error": converter.unstructure(error, ChainError)}
        execution = _Execution(self, agent, name=name, path=path, settings=self.settings)
        options = {"max_runs": int(child["max_runs"]), "token_budget": child["token_budget"]}
        traces: list[dict[str, Any]] = []
        timeout = child.get("decision_timeout")
        self.decision_timeout = None if timeout is None else float(timeout)
        wait = _FOREVER if timeout is None else float(timeout)
        try:
            state = await self.waits(
                execution, AgentState.of(str(child["task"])), options, traces, wait
            )
        except ChainError as error:
            return {"error": converter.unstructure(error, ChainError)}
        return {
            "format": FORMAT,
            "state": converter.unstructure(state, AgentState),
            "traces": traces,
        }
