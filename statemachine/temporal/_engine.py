"""The engine: submit runs to a Temporal task queue, read them, send decisions, drain.

One face over an async client: the engine keeps its own event loop in a thread
and every method is a plain call, as :class:`agentfsm.durable.Engine`'s are, so
code moves between the two engines by changing the constructor.

One idea: the :class:`Engine`, the one object a host holds to reach Temporal. Its
methods share the client, the loop thread and the translation of Temporal's errors
into agentfsm's, so they stay together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final, Literal, TypeVar, overload

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agentfsm import Agent, AgentState
from agentfsm._durable_records import RunRecord, RunResult, RunState
from agentfsm._durable_shared import CONTINUATION, RESERVED, check_run_id, same_decisions
from agentfsm._errors import (
    DecisionConflictError,
    DurableError,
    FormatError,
    ResumeError,
    RunExistsError,
    RunNotFoundError,
    StoreError,
)
from agentfsm._options import until_targets
from agentfsm._serialization import FORMAT, check_format, converter, load_trace

from ._activities import call_model, call_tool, machine_of
from ._convert import data_converter
from ._registry import AGENTS, HELD, LISTENERS, SETTINGS
from ._workflow import (
    DECIDE_UPDATE,
    DRAIN_SIGNAL,
    MEMO,
    PROGRESS_QUERY,
    WORKFLOW,
    RunWorkflow,
    SubagentWorkflow,
    bound_decisions,
    claim_of,
    waits_on,
)

__all__ = [
    "WORKFLOWS",
    "DurableError",
    "Engine",
    "RunRecord",
    "RunResult",
    "task_queue",
    "workflow_runner",
]

QUEUE_PREFIX: Final = "agentfsm:"
_CONTINUATION: Final = CONTINUATION
_DECISIONS_MEMO: Final = "agentfsm.decisions"
_AGENT_MEMO: Final = "agentfsm.agent"
#: The newest events of a history read for the worker that last ran it, and how many pages.
_HISTORY_PAGE: Final = 20
_HISTORY_PAGES: Final = 5
_T = TypeVar("_T")

Policy = Literal["pinned", "compatible"]


def task_queue(agent: str) -> str:
    """The task queue the runs of the agent registered as ``agent`` go to by default."""
    return f"{QUEUE_PREFIX}{agent}"


#: The workflows every agentfsm worker runs (a replayer of their histories too).
WORKFLOWS: Final = (RunWorkflow, SubagentWorkflow)


def workflow_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox, with agentfsm passed through: its modules are imported once,
    outside it, so the registered agents and the engine's own objects are the worker's."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("agentfsm")
    )


class _Loop:
    """An event loop in a daemon thread: the engine's calls block on its coroutines."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="agentfsm-temporal", daemon=True
        )
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a blocking Engine method was called from its own event loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def _result(run_id: str, output: Any) -> RunResult:
    try:
        check_format(output)
        state = converter.structure(output["state"], AgentState)
        traces = tuple(load_trace(doc, strict=False) for doc in output["traces"])
        ends = tuple(str(doc.get("end", "")) for doc in output["traces"])
    except FormatError:
        raise
    except Exception as exc:
        raise FormatError(f"Run {run_id!r} has a result this version cannot read: {exc}") from exc
    return RunResult(run_id, state, traces, ends)


class Engine:
    """Runs of registered agents on a Temporal server (its dev server on one machine).

    Any process may ``submit``, read ``status``/``result``/``runs`` and ``decide``; a
    worker process also ``register``\\ s its agents and calls ``launch``. Each agent's
    runs go to its own task queue (:func:`task_queue`), so workers of different agents
    on one server never take each other's runs. ``concurrency`` bounds the model and
    tool calls one worker makes at once; ``heartbeat`` is how soon a call on a lost
    worker is made again elsewhere (``call_timeout`` bounds one call); ``policy`` is what
    a worker does with a run recorded on another machine: ``pinned`` leaves it for a
    worker of its machine, ``compatible`` replays it (Temporal holds the replay to the
    recorded calls). ``sticky_timeout`` is how long a run's next task waits for the
    worker that ran its last before any worker takes it (Temporal's sticky queue);
    ``drain_timeout`` how long a drain lets calls in flight finish; ``otel`` adds
    Temporal's OpenTelemetry tracing interceptor to the client and its workers.
    ``gone_after`` is how long a run's task queue may go unpolled before a run on it
    that a worker started is reported ``orphaned``: a live worker polls at least once
    per the server's long poll (a minute by default), a killed one never again.
    """

    def __init__(
        self,
        address: str = "127.0.0.1:7233",
        *,
        namespace: str = "default",
        queue: str | None = None,
        concurrency: int = 8,
        heartbeat: float = 10.0,
        call_timeout: float = 600.0,
        policy: Policy = "pinned",
        otel: bool = False,
        sticky_timeout: float = 10.0,
        drain_timeout: float = 30.0,
        gone_after: float = 75.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if policy not in ("pinned", "compatible"):
            raise ValueError(f"policy is 'pinned' or 'compatible', got {policy!r}")
        self.address = address
        self.namespace = namespace
        self.queue = queue
        self.concurrency = concurrency
        self.heartbeat = heartbeat
        self.call_timeout = call_timeout
        self.policy: Policy = policy
        self.otel = otel
        self.sticky_timeout = sticky_timeout
        #: How long a drain lets the calls in flight finish (fixed when the worker starts).
        self.drain_timeout = drain_timeout
        #: Seconds a task queue may go unpolled before its started runs are ``orphaned``.
        self.gone_after = gone_after
        self.executor_id: str | None = None
        self._names: list[str] = []
        self._loop: _Loop | None = None
        self._client: Client | None = None
        self._workers: list[Worker] = []
        self._running: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------ plumbing

    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        if self._loop is None:
            self._loop = _Loop()
        return self._loop.call(coro, timeout)

    async def _connect(self) -> Client:
        if self._client is None:
            interceptors: list[Any] = []
            if self.otel:
                # the otel extra: only Engine(otel=True) needs it
                from temporalio.contrib.opentelemetry import TracingInterceptor

                interceptors.append(TracingInterceptor())
            try:
                self._client = await Client.connect(
                    self.address,
                    namespace=self.namespace,
                    data_converter=data_converter,
                    interceptors=interceptors,
                )
            except RuntimeError as exc:
                raise StoreError(
                    f"the Temporal server at {self.address} cannot be used: {exc}; is it up "
                    "(temporal server start-dev), and the address right?"
                ) from exc
        return self._client

    @property
    def client(self) -> Client:
        """Temporal's client (connected on first use); its coroutines run on the engine's
        loop (:meth:`run`)."""
        if self._client is not None:
            return self._client
        return self._call(self._connect())

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        """Run a coroutine of :attr:`client`'s on the engine's loop, and wait for it."""
        return self._call(coro, timeout)

    # ------------------------------------------------------------ worker

    def register(self, name: str, agent: Agent) -> None:
        """Run ``agent`` for submissions under ``name`` (before :meth:`launch`)."""
        if self.executor_id is not None:
            raise RuntimeError("Register agents before launch(): a launched worker takes runs.")
        if not isinstance(agent, Agent):
            raise TypeError(f"register takes an Agent, got {type(agent).__name__}")
        AGENTS[name] = agent
        if name not in self._names:
            self._names.append(name)

    @property
    def queues(self) -> list[str]:
        """The task queues this worker serves: its one queue, or one per registered agent."""
        if self.queue is not None:
            return [self.queue]
        return [task_queue(name) for name in self._names]

    @contextlib.contextmanager
    def listening(self, listener: Callable[[str, str, Mapping[str, Any]], None]) -> Iterator[None]:
        """Call ``listener(run_id, event, fields)`` for each step this process's runs take,
        while inside (a worker's log lines); a listener that fails never fails a run."""
        LISTENERS.append(listener)
        try:
            yield
        finally:
            LISTENERS.remove(listener)

    def launch(self, *, executor_id: str | None = None) -> None:
        """Start this process's worker: it polls :attr:`queues` for runs and their calls."""
        if not self.queues:
            raise RuntimeError("Register an agent (or give the engine a queue) before launch().")
        if self.queue is not None and len(self._names) > 1:
            raise DurableError(
                f"queue {self.queue!r} would serve {len(self._names)} agents: a worker takes "
                "any run of its queue, so give each agent its own queue"
            )
        self.executor_id = executor_id or f"{socket.gethostname()}-{os.getpid()}"
        SETTINGS["policy"] = self.policy
        try:
            self._call(self._start_workers(self.executor_id))
        except BaseException:
            self.executor_id = None
            raise

    async def _start_workers(self, identity: str) -> None:
        client = await self._connect()
        runner = workflow_runner()
        for queue in self.queues:
            worker = Worker(
                client,
                task_queue=queue,
                workflows=list(WORKFLOWS),
                activities=[call_model, call_tool, machine_of],
                workflow_runner=runner,
                max_concurrent_activities=self.concurrency,
                identity=identity,
                sticky_queue_schedule_to_start_timeout=timedelta(seconds=self.sticky_timeout),
                graceful_shutdown_timeout=timedelta(seconds=self.drain_timeout),
            )
            self._workers.append(worker)
            self._running.append(asyncio.ensure_future(worker.run()))
        await asyncio.sleep(0)

    def drain(self) -> list[str]:
        """Stop this worker: its runs pause at their next state boundary (a segment that
        ends ``paused: draining``, and the drain signal, in their history) and go on
        with whichever worker takes their next task. Calls in flight get
        :attr:`drain_timeout` seconds to finish; one cut off then runs again elsewhere.
        Returns the run ids told to pause (a run waiting for decisions keeps waiting,
        unpaused)."""
        if self.executor_id is None:
            return []
        identity = self.executor_id
        handed = self._call(self._drain(identity))
        self.executor_id = None
        return handed

    async def _drain(self, identity: str) -> list[str]:
        client = await self._connect()
        held = HELD.runs()
        for run_id in held:
            try:
                await client.get_workflow_handle(run_id).signal(DRAIN_SIGNAL, identity)
            except RPCError:
                continue  # ended meanwhile
        await self._shutdown()
        return held

    async def _shutdown(self) -> None:
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        running, self._running = self._running, []
        await asyncio.gather(*running, return_exceptions=True)

    def close(self) -> None:
        """Stop the worker (if launched) and the client's loop."""
        if self._loop is not None:
            if self._workers:
                self._call(self._shutdown())
            self.executor_id = None
            self._loop.stop()
            self._loop = None
            self._client = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------ any process

    def submit(
        self,
        state: AgentState,
        *,
        agent: str,
        run_id: str | None = None,
        until_tool: str | Sequence[str] | None = None,
        until_tool_success: str | Sequence[str] | None = None,
        max_runs: int | None = None,
        decision_timeout: float | None = None,
    ) -> str:
        """Start a run of the agent registered as ``agent`` over ``state``; its id.

        Options are those of :meth:`Agent.start`, checked here when ``agent`` is
        registered in this process. An interrupted run waits ``decision_timeout``
        seconds (default: no limit) for :meth:`decide`, then ends ``interrupted``. An
        id that exists is refused with :class:`RunExistsError`. The run goes to the
        engine's queue, else the agent's own (:func:`task_queue`), and stays ``queued``
        until a worker serving it is up.
        """
        check_run_id(run_id)
        names, require_success = until_targets(until_tool, until_tool_success)
        local = AGENTS.get(agent)
        if local is not None:
            local.options(
                until_tool=until_tool, until_tool_success=until_tool_success, max_runs=max_runs
            )
        submission = {
            "format": FORMAT,
            "agent": agent,
            "state": converter.unstructure(state, AgentState),
            "options": {
                "until_tool": list(names),
                "require_tool_success": require_success,
                **({} if max_runs is None else {"max_runs": max_runs}),
            },
            "decision_timeout": decision_timeout,
            "settings": {"call_timeout": self.call_timeout, "heartbeat": self.heartbeat},
        }
        run_id = run_id or f"run-{uuid.uuid4().hex[:12]}"
        queue = self.queue or task_queue(agent)
        return self._call(self._submit(submission, run_id, queue))

    async def _submit(self, submission: Mapping[str, Any], run_id: str, queue: str) -> str:
        client = await self._connect()
        try:
            await client.start_workflow(
                WORKFLOW,
                dict(submission),
                id=run_id,
                task_queue=queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                memo={_AGENT_MEMO: submission["agent"], MEMO: {"status": "queued"}},
            )
        except WorkflowAlreadyStartedError as exc:
            raise RunExistsError(
                f"A run {run_id!r} exists already; pick another id (runs are never overwritten)."
            ) from exc
        return run_id

    async def _describe(self, run_id: str) -> WorkflowExecutionDescription:
        client = await self._connect()
        try:
            return await client.get_workflow_handle(run_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(f"No run {run_id!r} on {self.address}") from None
            raise

    async def _tip(self, run_id: str) -> tuple[WorkflowExecutionDescription, int]:
        """The workflow a run is at now: its newest continuation (``RUN/resume-N``) and N,
        or the run itself and 0."""
        desc, number = await self._describe(run_id), 0
        while True:
            try:
                newer = await self._describe(f"{run_id}{_CONTINUATION}{number + 1}")
            except RunNotFoundError:
                return desc, number
            desc, number = newer, number + 1

    async def _executor(self, desc: WorkflowExecutionDescription) -> str | None:
        """The identity of the worker that last ran the run's workflow (its newest workflow
        task completed, read from the end of its history); None before any worker did."""
        client = await self._connect()
        execution = WorkflowExecution(workflow_id=desc.id, run_id=desc.run_id or "")
        token = b""
        for _ in range(_HISTORY_PAGES):
            page = await client.workflow_service.get_workflow_execution_history_reverse(
                GetWorkflowExecutionHistoryReverseRequest(
                    namespace=self.namespace,
                    execution=execution,
                    maximum_page_size=_HISTORY_PAGE,
                    next_page_token=token,
                )
            )
            for event in page.history.events:
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                    return event.workflow_task_completed_event_attributes.identity or None
            token = page.next_page_token
            if not token:
                return None
        return None

    async def _polled(self, queue: str, seen: dict[str, float | None]) -> float | None:
        """How long ago a worker last polled ``queue`` for workflow tasks (None: no worker
        ever did, as far as the server remembers); kept in ``seen`` for a listing."""
        if queue not in seen:
            client = await self._connect()
            answer = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=self.namespace,
                    task_queue=TaskQueue(name=queue),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                )
            )
            times = [p.last_access_time.ToSeconds() for p in answer.pollers]
            seen[queue] = time.time() - max(times) if times else None
        return seen[queue]

    async def _record(
        self,
        desc: WorkflowExecutionDescription,
        run_id: str = "",
        seen: dict[str, float | None] | None = None,
    ) -> RunRecord:
        memo = await desc.memo()
        found = memo.get(MEMO)
        mine: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        state: RunState
        if desc.status == WorkflowExecutionStatus.RUNNING:
            kind = str(mine.get("status", "queued"))
            state = "waiting" if kind == "waiting" else "running" if kind != "queued" else "queued"
            if state == "queued" and desc.raw_description.pending_workflow_task.attempt > 1:
                state = "running"
        elif desc.status == WorkflowExecutionStatus.COMPLETED:
            kind = str(mine.get("status", "ok"))
            state = kind if kind in ("ok", "paused", "interrupted", "error") else "ok"  # type: ignore[assignment]
        elif desc.status in (WorkflowExecutionStatus.CANCELED, WorkflowExecutionStatus.TERMINATED):
            state = "cancelled"
        else:
            state = "failed"
        executor = await self._executor(desc)
        reason = None
        if state in ("running", "waiting") and executor is not None and desc.task_queue:
            silent = await self._polled(desc.task_queue, {} if seen is None else seen)
            if silent is None or silent > self.gone_after:
                state = "orphaned"
                since = "ever" if silent is None else f"for {silent:.0f} s"
                reason = (
                    f"its worker {executor} is gone and no worker polls its task queue "
                    f"{desc.task_queue} (none {since}): start a worker of its agent on it "
                    f"(agentfsm worker --engine temporal --address {self.address}); any "
                    "worker of the queue takes it on"
                )
        agent = memo.get(_AGENT_MEMO)
        updated = desc.close_time or desc.execution_time or desc.start_time
        return RunRecord(
            run_id=run_id or desc.id,
            status=state,
            agent=str(agent) if agent is not None else None,
            executor=executor,
            created=desc.start_time.timestamp() if desc.start_time else None,
            updated=updated.timestamp() if updated else None,
            queue=desc.task_queue,
            reason=reason,
        )

    def status(self, run_id: str) -> RunRecord:
        """How the run stands now: one read of the server, never a wait for the run."""

        async def go() -> RunRecord:
            tip, _ = await self._tip(run_id)
            return await self._record(tip, run_id)

        return self._call(go())

    def runs(self, *, limit: int = 100) -> list[RunRecord]:
        """The newest runs first, each as it stands now."""

        async def go() -> list[RunRecord]:
            client = await self._connect()
            out: list[RunRecord] = []
            seen: dict[str, float | None] = {}
            async for w in client.list_workflows(f"WorkflowType = '{WORKFLOW}'", limit=limit):
                if RESERVED.search(w.id):
                    continue  # listed under the run it continues
                tip, _ = await self._tip(w.id)
                out.append(await self._record(tip, w.id, seen))
            return out

        return self._call(go())

    @overload
    def result(
        self, run_id: str, *, wait: Literal[True] = ..., timeout: float | None = None
    ) -> RunResult: ...

    @overload
    def result(
        self, run_id: str, *, wait: bool, timeout: float | None = None
    ) -> RunResult | None: ...

    def result(
        self, run_id: str, *, wait: bool = True, timeout: float | None = None
    ) -> RunResult | None:
        """The run's result, waiting up to ``timeout`` seconds (None: until it ends,
        through any wait for decisions). With ``wait=False``: the result if the run
        ended, else None at once."""
        return self._call(self._result(run_id, wait=wait, timeout=timeout))

    async def _result(self, run_id: str, *, wait: bool, timeout: float | None) -> RunResult | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            desc, _ = await self._tip(run_id)
            if desc.status == WorkflowExecutionStatus.RUNNING and not wait:
                return None
            client = await self._connect()
            handle = client.get_workflow_handle(desc.id)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                output = await asyncio.wait_for(_awaited(handle.result()), left)
            except TimeoutError:
                raise TimeoutError(f"Run {run_id!r} is still running") from None
            except WorkflowFailureError as exc:
                raise DurableError(
                    f"Run {run_id!r} ended {desc.status} in the engine: {exc}"
                ) from exc
            newer, _ = await self._tip(run_id)
            if newer.id == desc.id:  # no decide resumed it meanwhile
                return _result(run_id, output)

    def progress(self, run_id: str, *, timeout: float = 5.0) -> RunResult:
        """The run as far as it went: an ended run's :meth:`result`; a running or waiting
        one's segments so far (the one in progress with the end ``running``) and its
        newest state (waiting: the state that asked; in a segment: status ``new``, the
        conversation so far), read by the query
        ``agentfsm.progress``, which a worker of its task queue answers. DurableError
        when none answers within ``timeout`` seconds (no worker is up)."""

        async def go() -> RunResult:
            desc, _ = await self._tip(run_id)
            if desc.status != WorkflowExecutionStatus.RUNNING:
                done = await self._result(run_id, wait=False, timeout=None)
                if done is not None:
                    return done
            client = await self._connect()
            try:
                output = await client.get_workflow_handle(desc.id).query(
                    PROGRESS_QUERY, rpc_timeout=timedelta(seconds=timeout)
                )
            except (RPCError, WorkflowQueryFailedError) as exc:
                raise DurableError(
                    f"Run {run_id!r}: no worker of its task queue {desc.task_queue} told its "
                    f"progress within {timeout:g} s (start one, or read it once it ended): "
                    f"{exc}"
                ) from None
            if not isinstance(output, Mapping) or output.get("state") is None:
                raise DurableError(f"Run {run_id!r} has not started yet (no worker took it)")
            return _result(run_id, output)

        return self._call(go())

    def waiting(self, run_id: str) -> Mapping[str, Any] | None:
        """The approval request a run waits for decisions on, or None (read from the
        server: no worker needs to be up)."""

        async def go() -> Mapping[str, Any] | None:
            desc, _ = await self._tip(run_id)
            if desc.status != WorkflowExecutionStatus.RUNNING:
                return None
            memo = (await desc.memo()).get(MEMO)
            if isinstance(memo, Mapping) and memo.get("status") == "waiting":
                interrupt = memo.get("interrupt")
                return dict(interrupt) if isinstance(interrupt, Mapping) else None
            return None

        return self._call(go())

    def decide(
        self, run_id: str, decisions: Sequence[Mapping[str, Any]], *, unbound: bool = False
    ) -> None:
        """Answer the approval request a run waits on, from any process.

        An update of the run's workflow, compare-and-set inside it: of two processes
        deciding one wait at once, one is taken and the other raises
        :class:`DecisionConflictError` naming the decisions that won (after the run
        ended too). Decisions the run took, sent again, change nothing and raise
        nothing. Decisions that do not answer the request are a ValueError, a run not
        waiting a :class:`ResumeError`; refused decisions leave nothing in the run's
        history.

        A run whose wait timed out (it ended ``interrupted``) goes on later: its
        continuation, the workflow ``RUN/resume-N``, starts from the ended state with
        these decisions, and :meth:`result`, :meth:`status`, :meth:`waiting` and
        :meth:`runs` follow it under ``run_id``.
        """
        self._call(self._decide(run_id, _as_data(decisions), unbound=unbound))

    async def _decide(self, run_id: str, decisions: list[dict[str, Any]], *, unbound: bool) -> None:
        desc, number = await self._tip(run_id)
        client = await self._connect()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return await self._decide_ended(run_id, desc, number, decisions, unbound=unbound)
        memo = (await desc.memo()).get(MEMO)
        # a subagent's request is answered where it waits: its own workflow takes them
        child = memo.get("child") if isinstance(memo, Mapping) else None
        handle = client.get_workflow_handle(str(child) if child else desc.id)
        try:
            await handle.execute_update(
                DECIDE_UPDATE, {"decisions": decisions, "unbound": unbound}, result_type=dict
            )
        except WorkflowUpdateFailedError as exc:
            raise _refusal(run_id, exc.cause) from None
        except RPCError as exc:
            said = str(exc).lower()
            if "completed" not in said and "closing" not in said:
                raise
            # the run ended, or is ending, meanwhile: judge them against how it ended
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()
            desc, number = await self._tip(run_id)
            await self._decide_ended(run_id, desc, number, decisions, unbound=unbound)
        return None

    async def _decide_ended(
        self,
        run_id: str,
        desc: WorkflowExecutionDescription,
        number: int,
        decisions: list[dict[str, Any]],
        *,
        unbound: bool,
    ) -> None:
        """A run that ended: bound decisions it took are a repeat; a run whose wait for
        decisions timed out goes on in its next continuation, ``RUN/resume-N``, which
        takes them where the wait ended; anything else is refused."""
        client = await self._connect()
        output: Any = {}
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            output = await client.get_workflow_handle(desc.id).result()
        if not isinstance(output, Mapping):
            output = {}
        claims = output.get("decided") or []
        # an ended run asks nothing more: only bound decisions are known as a repeat
        if any(same_decisions(decisions, c, unbound=False) for c in claims):
            return
        state = converter.structure(output["state"], AgentState) if "state" in output else None
        if state is None or state.status != "interrupted" or not waits_on(state.interrupt_data):
            won = claim_of(decisions, claims)  # the wait they name, decided otherwise
            if won is not None:  # as the run answered while it ran: decided first
                raise DecisionConflictError(
                    f"Run {run_id!r} took other decisions first: {json.dumps(won)[:300]}; "
                    "these were not sent.",
                    run_id=run_id,
                    decisions=won,
                )
            ended = state.status if state is not None else desc.status
            raise ResumeError(
                f"Run {run_id!r} is not waiting for decisions and did not end waiting for "
                f"them (it ended {ended})"
            )
        assert state.interrupt_data is not None
        bound = bound_decisions(state.interrupt_data, decisions, unbound=unbound)
        continuation = f"{run_id}{_CONTINUATION}{number + 1}"
        origin = dict(output.get("submission") or {})
        submission = {
            **origin,
            "format": FORMAT,
            "state": output["state"],
            "decisions": bound,
            "earlier": list(output.get("traces") or []),
            "claims": list(claims),
        }
        try:
            await client.start_workflow(
                WORKFLOW,
                submission,
                id=continuation,
                task_queue=desc.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                memo={
                    _AGENT_MEMO: origin.get("agent"),
                    MEMO: {"status": "queued"},
                    _DECISIONS_MEMO: bound,
                },
            )
        except WorkflowAlreadyStartedError:
            # another decide resumed it first: these are a repeat of its decisions, or refused
            theirs = await (await self._describe(continuation)).memo()
            won = theirs.get(_DECISIONS_MEMO) or []
            if not same_decisions(bound, won, unbound=False):
                raise DecisionConflictError(
                    f"Run {run_id!r} took other decisions first: {json.dumps(won)[:300]}; "
                    "these were not sent.",
                    run_id=run_id,
                    decisions=won,
                ) from None


def _as_data(decisions: Any) -> list[dict[str, Any]]:
    """Decisions as JSON: typed ones (``Approval.approve_all()``) or mappings."""
    if hasattr(decisions, "to_data"):
        decisions = decisions.to_data()
    return [d.to_data() if hasattr(d, "to_data") else dict(d) for d in decisions]


async def _awaited(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


def _refusal(run_id: str, cause: BaseException | None) -> Exception:
    """The agentfsm error an update's refusal names."""
    if isinstance(cause, ApplicationError):
        message = str(cause.message)
        if cause.type == "DecisionConflictError":
            won = cause.details[0] if cause.details else []
            return DecisionConflictError(message, run_id=run_id, decisions=won)
        if cause.type == "ResumeError":
            return ResumeError(message)
        if cause.type == "ValueError":
            return ValueError(message)
    return DurableError(f"Run {run_id!r} refused the decisions: {cause}")
