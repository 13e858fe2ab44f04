"""The workflow of one run: model and tool calls are DBOS steps, every other state replays.

A run is the DBOS workflow ``agentfsm.run``. Its body drives the standard
machine one state at a time, as any host does; the agent it drives has its
model and tools wrapped so that each model call and each tool call is one
recorded step whose output is an agentfsm JSON document. When DBOS runs the
workflow again (another worker, after a crash or a drain), recorded steps
return their documents instead of running, the pure states compute the same
chains again, and the run goes on from its first unrecorded step.

Draining is decided where it can be replayed: a step that finishes on a
draining worker records ``"draining": true``, and the run pauses at the next
state boundary with reason ``"draining"`` (after a model reply through
``should_pause``, after a tool turn by a requested pause). A run between two
steps on a draining worker (before a model call, or between a reply and its
tools) records the step ``agentfsm.drain`` and pauses there; a worker replaying
the run finds that step where it was recorded and pauses at the same state, so
every drain is a ``paused: draining`` segment of the run's record. A paused run goes
on in a new segment, whose first step is never started on a draining worker:
the run parks there (nothing more is recorded) and the worker hands it back to
the queue. The model calls a drained segment made count against the next
one's ``max_runs``.

Decisions on the run's own approval enter the machine in a new segment at the state
that asked (``interrupt_check``), whose gate applies them; the approved calls run at
``executing`` as the run's recorded tool steps (``tool:NAME@clear>executing#N``), like
any other. A run whose wait for decisions timed out ends ``interrupted``; the engine
resumes it as a DBOS fork of the workflow from that wait, which replays every
step before it and receives the decisions there.

A subagent's call is a DBOS child workflow (``agentfsm.subagent``, id
``RUN/tool:NAME@...#N``): the child agent, found from the run's registered agent by
the path of subagent names, runs there with what the parent has left of ``max_runs``
and ``token_budget``, each of its model and tool calls a recorded step of the child
workflow (its own subagents are child workflows of it). The parent records the child's
end state and traces as the workflow's result and adopts the traces from there, so a
replay nests them (and counts their calls and tokens) as the first execution did; it
is parked while it waits, so a drain does not wait on it. A subagent's approval
request makes the run wait as its own does; the decisions go down to the waiting child
in one recorded step of the parent (``subagent:NAME@resume#N``) that resumes the child
to its end inside it and records the parent's answered state: the child's calls after
an answer run again if the worker dies before that step is recorded.

One idea: one run's DBOS workflow. Its recorded steps, its drain marker and its child
workflows are replayed together, and what one records the others read back.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs
from dbos import DBOS, SetWorkflowID
from dbos._context import get_local_dbos_context
from dbos._dbos import _get_dbos_instance

from agentfsm._chat_model import ChatModel, DeltaHandler

from .._agent import Agent, AgentRun
from .._chain import LLMChain
from .._durable_shared import call_name
from .._errors import ChainError
from .._messages import Message, ToolCall, ToolResult
from .._resume import execute_options
from .._run import current_run
from .._serialization import FORMAT, check_format, converter, dump, load_trace
from .._state import AgentState
from .._steps import get_run_count
from .._subagents import SubAgent, children_run_by, nested, resume_subagents
from .._tools import Tool, ToolContext, WrapperTool
from .._trace import Trace
from ..providers import WrapperModel
from . import _answers

__all__ = [
    "AGENTS",
    "CHILD_WORKFLOW",
    "DECISIONS_TOPIC",
    "Listener",
    "WAITING_EVENT",
    "WORKER",
    "WORKFLOW",
    "result_doc",
    "run_workflow",
]

WORKFLOW: Final = "agentfsm.run"
#: The workflow of a subagent's run, a child of its parent's (never listed as a run).
CHILD_WORKFLOW: Final = "agentfsm.subagent"
#: The step a drain between two steps records, where the run paused.
DRAIN_STEP: Final = "agentfsm.drain"
#: The states before which a run drained between two steps pauses (each has a
#: ``paused`` edge, and the next segment enters the machine at the same point).
_DRAIN_POINTS: Final = frozenset({"calling", "interrupt_check"})
#: The event a run sets while it waits for decisions: ``{"segment", "interrupt"}``.
WAITING_EVENT: Final = "agentfsm.waiting"
DECISIONS_TOPIC: Final = "agentfsm.decisions"
#: "No timeout" for a decision wait: a year, in seconds.
_FOREVER: Final = 365 * 24 * 3600.0

#: Agents by the stable name runs are submitted under (bound by name, never pickled).
AGENTS: dict[str, Agent] = {}


#: A listener of a worker's runs: ``(event, run_id, detail)``, event ``start``, ``end`` or
#: ``stop`` (the run left this worker unfinished: drained, or the worker shut down).
Listener = Callable[[str, str, Mapping[str, Any]], None]


class _Worker:
    """This process's runs: which are inside a step, which are parked at a boundary."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.draining = False
        self._working: dict[str, int] = {}
        self._parked: set[str] = set()
        self.listeners: list[Listener] = []

    def tell(self, event: str, run_id: str, detail: Mapping[str, Any]) -> None:
        """Tell the listeners; one that fails never fails the run."""
        for listener in list(self.listeners):
            try:
                listener(event, run_id, detail)
            except Exception:  # a log line is not worth a run
                continue

    def enter(self, run_id: str) -> None:
        with self._lock:
            self._working[run_id] = self._working.get(run_id, 0) + 1

    def leave(self, run_id: str) -> None:
        with self._lock:
            left = self._working.get(run_id, 1) - 1
            if left:
                self._working[run_id] = left
            else:
                self._working.pop(run_id, None)

    def park(self, run_id: str) -> None:
        with self._lock:
            self._parked.add(run_id)

    def unpark(self, run_id: str) -> None:
        with self._lock:
            self._parked.discard(run_id)

    def busy(self) -> list[str]:
        """Runs inside a step or between boundaries, not parked."""
        with self._lock:
            return [r for r in self._working if r not in self._parked]

    def parked(self) -> list[str]:
        with self._lock:
            return sorted(self._parked)

    def reset(self) -> None:
        with self._lock:
            self.draining = False
            self._working.clear()
            self._parked.clear()


WORKER: Final = _Worker()


async def _park(run_id: str) -> None:
    """Stop here for good: the draining worker hands the run back to the queue."""
    WORKER.park(run_id)
    await asyncio.Event().wait()  # cancelled when the worker shuts down


class _Execution:
    """One execution of a run's workflow on this worker."""

    def __init__(self, run_id: str, agent: Agent, *, name: str, path: Sequence[str] = ()) -> None:
        self.run_id = run_id
        #: The registered agent's name and the subagents down to the one this run is.
        self.name = name
        self.path = tuple(path)
        #: Child workflows this execution waits on (parked while any is).
        self.awaiting = 0
        #: A recorded step of the current turn finished on a draining worker.
        self.drain_seen = False
        self._model_draining = False
        #: The run being stepped (None between segments, while a subagent's answer is
        #: handed down), and the recorded steps of this execution so far: together they
        #: name each step.
        self.run: AgentRun | None = None
        self.calls = 0
        #: A recorded step ran in the current segment (its first boundary is not a drain point).
        self.stepped = False
        #: The operation ids of the run's recorded drains, and the newest recorded operation.
        self.drains: set[int] = set()
        self.recorded = -1
        self.agent = _StepAgent(
            _StepModel(agent.model, self),
            [_StepTool.wrap(t, execution=self) for t in agent.tools],
            middleware=agent.middleware,
            system_prompt=agent.system_prompt,
            max_runs=agent.max_runs,
            callbacks=agent.callbacks,
            token_budget=agent.token_budget,
            machine=agent.mode.table,
            name=agent.name,
        )

    async def boundary(self) -> None:
        """Before a step: a draining worker starts nothing new."""
        if WORKER.draining:
            await _park(self.run_id)

    def step_name(self, kind: str) -> str:
        """The next recorded step's name: what it calls, the edge into the state making the
        call, and its index in the run (``model:gpt@expanded>calling#1``); a step taken
        between segments, outside any transition, is ``@resume`` (``subagent:NAME@resume#3``).
        A changed machine that replays a recorded run meets a step it does not expect as
        DBOS's error naming both, never as another call's output."""
        self.calls += 1
        return call_name(self.run, kind, self.calls)

    def should_pause(self) -> bool | str:
        if self._model_draining:
            self._model_draining = False
            return "draining"
        return False

    def saw(self, output: Mapping[str, Any], *, model: bool) -> None:
        if output.get("draining"):
            if model:
                self._model_draining = True
            else:
                self.drain_seen = True

    async def load(self) -> None:
        """Read the run's recorded operations: where its drains are, how far it got."""
        sys_db = _get_dbos_instance()._sys_db
        steps = await asyncio.to_thread(sys_db.list_workflow_steps, self.run_id, load_output=False)
        self.drains = {s["function_id"] for s in steps if s["function_name"] == DRAIN_STEP}
        self.recorded = max((s["function_id"] for s in steps), default=-1)

    async def drained_here(self) -> bool:
        """Whether the run pauses for a drain here: one recorded here, or a new one on a
        draining worker past the recorded operations (never inside the replayed ones)."""
        ctx = get_local_dbos_context()
        assert ctx is not None
        next_id = ctx.function_id + 1
        if next_id in self.drains or (WORKER.draining and next_id > self.recorded):
            await DBOS.run_step_async({"name": DRAIN_STEP}, _drain_marker)
            return True
        return False

    async def drive(self, run: AgentRun, traces: list[Any]) -> AgentState:
        self.run = run
        self.stepped = False
        while not run.done:
            if self.stepped and run.state in _DRAIN_POINTS and await self.drained_here():
                run.request_pause("draining")
            await run.step()
            if self.drain_seen and not run.done:
                run.request_pause("draining")
            self.drain_seen = False
        state = run.agent_state
        trace = dump(run.trace)
        trace["end"] = state.status if state.status != "paused" else f"paused: {state.pause_reason}"
        traces.append(trace)
        return state

    async def run_child(
        self, name: str, agent: Agent, task: str, max_runs: int, tokens: int | None, depth: int
    ) -> tuple[AgentState, list[Trace]]:
        """Run the subagent ``name`` as a child workflow and wait for its end, parked (a
        drain hands both runs back); its result is recorded, so a replay waits on the
        same child and never runs it again."""
        del agent  # the child finds it from the registered agent and the path
        await self.boundary()
        step = self.step_name(f"tool:{name}")
        child = {
            "format": FORMAT,
            "agent": self.name,
            "path": [*self.path, name],
            "task": task,
            "max_runs": max_runs,
            "token_budget": tokens,
            "depth": depth,
        }
        with SetWorkflowID(f"{self.run_id}/{step}"):
            handle = await DBOS.start_workflow_async(child_workflow, child)
        self.awaiting += 1
        WORKER.park(self.run_id)
        try:
            output = await handle.get_result()
        finally:
            self.awaiting -= 1
            if not self.awaiting:
                WORKER.unpark(self.run_id)
        self.saw(output, model=False)
        self.stepped = True
        if "error" in output:
            raise converter.structure(output["error"], ChainError)
        state = converter.structure(output["state"], AgentState)
        return state, [load_trace(doc, strict=False) for doc in output["traces"]]

    async def answer_subagent(
        self,
        agent: Agent,
        state: AgentState,
        decisions: Sequence[Mapping[str, Any]],
        options: Mapping[str, Any],
    ) -> AgentRun | AgentState:
        """The run that goes on once the subagent ``state`` waits on took ``decisions``,
        or the failed state when it could not take them.

        Handing them down is one recorded step (``subagent:NAME@resume#N``): the waiting
        child resumes and runs to its end inside it (its own calls are not recorded one
        by one), and the step records the parent's answered state and the children's
        traces, so a replay never resumes the child again.
        """
        await self.boundary()
        name = str((state.interrupt_data or {}).get("subagent"))
        output = await DBOS.run_step_async(
            {"name": self.step_name(f"subagent:{name}")},
            _answered,
            agent,
            state,
            decisions,
        )
        self.saw(output, model=False)
        self.stepped = True
        if "error" in output:
            error = converter.structure(output["error"], ChainError)
            return attrs.evolve(state, status="error", error=error)
        ready = converter.structure(output["state"], AgentState)
        run = self.agent.start(ready, should_pause=self.should_pause, **options)
        for doc in output["children"]:
            run.adopt(load_trace(doc, strict=False))
        return run


async def _answered(
    agent: Agent, state: AgentState, decisions: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The recorded step of a subagent's answer: the parent's state with the child's
    final answer as its tool result, ready to run on, and the resumed children's traces."""
    try:
        resumed = await resume_subagents(agent, state, decisions)
    except (ChainError, ValueError) as exc:
        failure = ChainError("resume_failed", f"{type(exc).__name__}: {exc}", retryable=False)
        return {"error": converter.unstructure(failure, ChainError), "draining": WORKER.draining}
    assert resumed is not None, "the run waits on a subagent"
    ready, children = resumed
    ready = attrs.evolve(ready, status="new", interrupt_data=None)
    return {
        "state": converter.unstructure(ready, AgentState),
        "children": [dump(child) for child in children],
        "draining": WORKER.draining,
    }


#: The child traces a recorded tool step's run adopted, while the step runs.
_ADOPTED: contextvars.ContextVar[list[Trace] | None] = contextvars.ContextVar(
    "agentfsm_durable_adopted", default=None
)


class _StepRun(AgentRun):
    """A run whose children started inside a recorded step are recorded with it: the
    step's output carries their traces, and the run adopts them from there, so a replay
    nests them (and counts their calls and tokens) as the first execution did."""

    def adopt(self, child: Trace) -> None:
        adopted = _ADOPTED.get()
        if adopted is not None:
            adopted.append(child)
        else:
            super().adopt(child)


class _StepAgent(Agent):
    run_class = _StepRun


class _StepModel(WrapperModel):
    """A model whose every call is one recorded step: the reply (or error) as a document."""

    __slots__ = ("execution",)

    def __init__(self, wrapped: ChatModel, execution: _Execution) -> None:
        super().__init__(wrapped)
        self.execution = execution

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool],
        *,
        on_delta: DeltaHandler | None = None,
    ) -> Message:
        await self.execution.boundary()
        output = await DBOS.run_step_async(
            {"name": self.execution.step_name(f"model:{self.name}")},
            self._call,
            messages,
            tools,
            on_delta,
        )
        self.execution.saw(output, model=True)
        self.execution.stepped = True
        if "error" in output:
            raise converter.structure(output["error"], ChainError)
        return converter.structure(output["message"], Message)

    async def _call(
        self, messages: Sequence[Message], tools: Sequence[Tool], on_delta: DeltaHandler | None
    ) -> dict[str, Any]:
        out: dict[str, Any]
        try:
            reply = await self.wrapped.complete(messages, tools, on_delta=on_delta)
            if not isinstance(reply, Message):
                raise TypeError(f"the model returned {reply!r}, not a Message")
            out = {"message": converter.unstructure(reply, Message)}
        except ChainError as error:
            out = {"error": converter.unstructure(error, ChainError)}
        except Exception as exc:
            failure = ChainError("model_error", f"{type(exc).__name__}: {exc}", retryable=False)
            out = {"error": converter.unstructure(failure, ChainError)}
        out["draining"] = WORKER.draining
        return out


@attrs.frozen
class _StepTool(WrapperTool):
    """A tool whose every call is one recorded step: the ToolResult as a document."""

    execution: _Execution = attrs.field(kw_only=True, eq=False, repr=False)

    async def invoke(self, call: ToolCall, context: ToolContext) -> ToolResult:
        if isinstance(self.wrapped, SubAgent):  # a child workflow, not a step
            with children_run_by(self.execution.run_child):
                return await self.wrapped.invoke(call, context)
        await self.execution.boundary()
        output = await DBOS.run_step_async(
            {"name": self.execution.step_name(f"tool:{self.name}")},
            self._call,
            self.wrapped,
            call,
            context,
        )
        self.execution.saw(output, model=False)
        self.execution.stepped = True
        children = output.get("children", ())
        if children:  # nested under the executing transition that ran the call
            run = current_run()
            assert run is not None, "a tool step runs inside its run's executing"
            for doc in children:
                run.adopt(load_trace(doc, strict=False))
        return converter.structure(output["result"], ToolResult)

    @staticmethod
    async def _call(inner: Tool, call: ToolCall, context: ToolContext) -> dict[str, Any]:
        adopted: list[Trace] = []
        token = _ADOPTED.set(adopted)
        try:
            result = await inner.invoke(call, context)
        finally:
            _ADOPTED.reset(token)
        out = {"result": converter.unstructure(result, ToolResult), "draining": WORKER.draining}
        if adopted:  # a subagent's: its trace is recorded with its result
            out["children"] = [dump(child) for child in adopted]
        return out


async def _drain_marker() -> dict[str, Any]:
    return {"draining": True}


def _spent(chain: LLMChain, calls: int) -> LLMChain:
    """The chain with ``calls`` model calls already counted against ``max_runs``."""
    if not calls:
        return chain
    mode_state = dict(chain.custom_context.get("mode_state") or {})
    return chain.update_custom_context({"mode_state": {**mode_state, "run_count": calls}})


def _failed(state: AgentState, kind: str, message: str) -> AgentState:
    return attrs.evolve(state, status="error", error=ChainError(kind, message, retryable=False))


def result_doc(state: AgentState, traces: Sequence[Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "state": converter.unstructure(state, AgentState),
        "traces": list(traces),
    }


@DBOS.workflow(name=WORKFLOW)
async def run_workflow(submission: dict[str, Any]) -> dict[str, Any]:
    """One run, from its submission to a terminal (waiting for decisions where asked)."""
    run_id = DBOS.workflow_id
    assert run_id is not None
    WORKER.enter(run_id)
    agent = str(submission.get("agent"))
    WORKER.tell("start", run_id, {"agent": agent})
    try:
        out = await _run(run_id, submission)
    except BaseException:
        WORKER.tell("stop", run_id, {"agent": agent})
        raise
    else:
        state = out["state"]
        WORKER.tell("end", run_id, {"agent": agent, "status": state.get("status")})
        return out
    finally:
        WORKER.unpark(run_id)
        WORKER.leave(run_id)


async def _run(run_id: str, submission: Mapping[str, Any]) -> dict[str, Any]:
    check_format(submission)
    state = converter.structure(submission["state"], AgentState)
    traces: list[Any] = []
    name = str(submission["agent"])
    agent = AGENTS.get(name)
    if agent is None:
        return result_doc(
            _failed(
                state,
                "unknown_agent",
                f"No agent is registered under {name!r} on worker {DBOS.executor_id!r} "
                f"(registered: {sorted(AGENTS)}); register it before launching the worker.",
            ),
            traces,
        )
    execution = _Execution(run_id, agent, name=name)
    await execution.load()
    options = execute_options(submission.get("options") or {})
    timeout = submission.get("decision_timeout")
    wait = _FOREVER if timeout is None else float(timeout)
    decisions: Sequence[Mapping[str, Any]] | None = submission.get("decisions")
    spent = 0  # model calls of the execute a drain cut into segments
    try:
        while True:
            await execution.boundary()
            execution.run = None
            if decisions is not None and _answers.forwarded(state.interrupt_data):
                answered = await execution.answer_subagent(agent, state, decisions, options)
                if isinstance(answered, AgentState):
                    state = answered
                    break
                run = answered
            elif decisions is not None:
                run = await execution.agent.start_resume(
                    state, decisions, should_pause=execution.should_pause, **options
                )
            else:
                run = execution.agent.start(state, should_pause=execution.should_pause, **options)
            run.chain = _spent(run.chain, spent)
            state = await execution.drive(run, traces)
            decisions = None
            if state.status == "paused" and state.pause_reason == "draining":
                spent = get_run_count(run.chain)  # the next segment goes on with what is left
                continue
            spent = 0
            if state.status != "interrupted" or not _answers.waits_on(state.interrupt_data):
                break
            decisions = await _decisions(execution, agent, state, len(traces), wait)
            if decisions is None:
                break
    except ValueError as exc:  # options the agent refuses
        state = _failed(state, "invalid_options", str(exc))
    return result_doc(state, traces)


@DBOS.workflow(name=CHILD_WORKFLOW)
async def child_workflow(child: dict[str, Any]) -> dict[str, Any]:
    """A subagent's run, to its end: the parent's recorded result of its tool call."""
    run_id = DBOS.workflow_id
    assert run_id is not None
    WORKER.enter(run_id)
    try:
        with children_run_by(None), nested(int(child["depth"])):
            return await _child(run_id, child)
    finally:
        WORKER.unpark(run_id)
        WORKER.leave(run_id)


def _subagent(agent: Agent, path: Sequence[str]) -> Agent | None:
    """The agent of the subagent ``path`` leads to from ``agent`` (None: no such path)."""
    for name in path:
        found = [t for t in agent.tools if isinstance(t, SubAgent) and t.name == name]
        if not found:
            return None
        agent = found[0].agent
    return agent


async def _child(run_id: str, child: Mapping[str, Any]) -> dict[str, Any]:
    check_format(child)
    name, path = str(child["agent"]), [str(p) for p in child["path"]]
    registered = AGENTS.get(name)
    agent = None if registered is None else _subagent(registered, path)
    if agent is None:
        error = ChainError(
            "unknown_agent",
            f"No subagent {' -> '.join([name, *path])!r} on worker {DBOS.executor_id!r}",
            retryable=False,
        )
        return {"error": converter.unstructure(error, ChainError)}
    execution = _Execution(run_id, agent, name=name, path=path)
    await execution.load()
    options = {"max_runs": int(child["max_runs"]), "token_budget": child["token_budget"]}
    state = AgentState.of(str(child["task"]))
    traces: list[Any] = []
    spent = 0  # model calls of the segments a drain cut off
    while True:
        await execution.boundary()
        execution.run = None
        try:
            run = execution.agent.start(state, should_pause=execution.should_pause, **options)
        except ChainError as error:
            return {"error": converter.unstructure(error, ChainError)}
        run.chain = _spent(run.chain, spent)
        state = await execution.drive(run, traces)
        if state.status != "paused" or state.pause_reason != "draining":
            break
        spent = get_run_count(run.chain)
    return {
        "state": converter.unstructure(state, AgentState),
        "traces": traces,
        "draining": WORKER.draining,
    }


async def _decisions(
    execution: _Execution, agent: Agent, state: AgentState, segment: int, wait: float
) -> Sequence[Mapping[str, Any]] | None:
    """Wait up to ``wait`` seconds for decisions that fit; None when none came in time."""
    assert state.interrupt_data is not None
    await DBOS.set_event_async(
        WAITING_EVENT, {"segment": segment, "interrupt": dict(state.interrupt_data)}
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        await execution.boundary()
        WORKER.park(execution.run_id)  # waiting counts as a boundary for a drain
        try:
            left = max(0.0, deadline - loop.time())
            message = await DBOS.recv_async(DECISIONS_TOPIC, timeout_seconds=left)
        finally:
            WORKER.unpark(execution.run_id)
        if message is None:
            await DBOS.set_event_async(WAITING_EVENT, None)
            return None
        if not isinstance(message, Mapping) or message.get("segment") != segment:
            continue
        decisions = message.get("decisions")
        if not isinstance(decisions, list):
            continue
        try:
            _answers.check_answer(state.interrupt_data, decisions, agent)
        except ValueError:
            continue
        await DBOS.set_event_async(WAITING_EVENT, None)
        return decisions
