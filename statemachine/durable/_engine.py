"""The engine: submit runs to a DBOS queue, read their results, send decisions, drain a worker."""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs
from dbos import DBOS, DBOSClient, DBOSPortableJSONSerializer, SetWorkflowID
from dbos._error import DBOSWorkflowIDInUseError
from sqlalchemy.exc import IntegrityError

from .._invariants import check_decisions_fit
from .._state import AgentState
from ..agent import Agent
from ..errors import AgentfsmError
from ..machine import fingerprint_of
from ..middleware import check_decisions
from ..serialization import FORMAT, FormatError, check_format, converter, load_trace
from ..store.base import ResumeError, RunExistsError, RunNotFoundError
from ..trace import Trace
from ._workflow import AGENTS, DECISIONS_TOPIC, WAITING_EVENT, WORKER, WORKFLOW

__all__ = [
    "DurableError",
    "Engine",
    "RunExistsError",
    "RunRecord",
    "RunResult",
    "app_version",
    "database_url",
]

#: The document format every worker's application version starts with.
APP_VERSION: Final = f"agentfsm-{FORMAT}"


def app_version(agents: Mapping[str, Agent]) -> str:
    """The DBOS application version of a worker that runs ``agents``: the document format
    and a fingerprint of each agent's machine, by the name it is registered under.

    DBOS hands a worker only the runs started on its own version (new submissions go to
    the newest version launched), so a run is never replayed on a machine it was not
    recorded on: keep a worker of the old machines until their runs end.
    """
    if not agents:
        return APP_VERSION
    machines = {name: agents[name].mode.table.fingerprint for name in sorted(agents)}
    return f"{APP_VERSION}+{fingerprint_of(machines)}"


RunState = Literal[
    "queued", "running", "ok", "paused", "interrupted", "error", "cancelled", "failed"
]

_SERIALIZER: Final = DBOSPortableJSONSerializer()
#: A resumed run goes on in the workflow ``RUN/resume-N``, a DBOS fork of ``RUN/resume-(N-1)``.
_CONTINUATION: Final = "/resume-"


class DurableError(AgentfsmError, RuntimeError):
    """The engine could not run a run as asked (its workflow failed or was cancelled)."""


def database_url(db: str | os.PathLike[str]) -> str:
    """A DBOS system database URL: ``postgresql://...``, ``sqlite:///...``, or a file path."""
    text = os.fspath(db)
    if text.startswith(("postgresql://", "postgres://", "postgresql+", "sqlite://")):
        return text
    return f"sqlite:///{os.path.abspath(text)}"


@attrs.frozen
class RunResult:
    """A finished run: the state to keep and one trace per segment (each a machine path)."""

    run_id: str
    state: AgentState
    traces: tuple[Trace, ...]
    #: How each segment ended: ``"ok"``, ``"interrupted"``, ``"paused: draining"``...
    ends: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        return self.state.status


@attrs.frozen
class RunRecord:
    """A run as a listing shows it."""

    run_id: str
    status: RunState
    agent: str | None
    executor: str | None
    created: float | None
    updated: float | None


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000.0


class Engine:
    """Runs of registered agents on DBOS: SQLite on one machine, PostgreSQL on many.

    Any process may ``submit``, read ``result``/``runs`` and ``decide``; a
    worker process also ``register``\\ s its agents and calls ``launch`` to run
    the queue. ``concurrency`` bounds the runs one worker runs at once.
    """

    def __init__(
        self,
        db: str | os.PathLike[str],
        *,
        queue: str = "agentfsm",
        concurrency: int = 8,
        polling_interval: float = 0.1,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.url = database_url(db)
        self.queue = queue
        self.concurrency = concurrency
        self.polling_interval = polling_interval
        self.executor_id: str | None = None
        #: The application version this worker serves, once launched (:func:`app_version`).
        self.app_version: str | None = None
        self._client: DBOSClient | None = None

    # ------------------------------------------------------------ worker

    def register(self, name: str, agent: Agent) -> None:
        """Run ``agent`` for submissions under ``name`` (before :meth:`launch`)."""
        if self.executor_id is not None:
            raise RuntimeError(
                "Register agents before launch(): a launched worker may be replaying."
            )
        if not isinstance(agent, Agent):
            raise TypeError(f"register takes an Agent, got {type(agent).__name__}")
        AGENTS[name] = agent

    def launch(
        self,
        *,
        executor_id: str | None = None,
        recover: Sequence[str] = (),
        version: str | None = None,
    ) -> None:
        """Start this process's worker: it runs queued runs, and finishes its own pending ones.

        ``executor_id`` names the worker (default: host and process id); a worker
        started again under the same id finishes the runs its predecessor left, when
        its agents run the same machines. ``recover`` hands the runs of workers that
        will not come back to the queue. ``version`` serves another application
        version than the agents' (:func:`app_version`): runs started on other machines,
        taken on purpose (a recorded step the machine does not expect ends such a run
        in an error naming both).
        """
        self.executor_id = executor_id or f"{socket.gethostname()}-{os.getpid()}"
        self.app_version = version or app_version(AGENTS)
        WORKER.reset()
        DBOS(
            config={
                "name": "agentfsm",
                "system_database_url": self.url,
                "serializer": _SERIALIZER,
                "application_version": self.app_version,
                "executor_id": self.executor_id,
                "log_level": os.environ.get("AGENTFSM_DBOS_LOG_LEVEL", "WARNING"),
                "notification_listener_polling_interval_sec": self.polling_interval,
            }
        )
        DBOS.launch()
        DBOS.register_queue(
            self.queue,
            worker_concurrency=self.concurrency,
            polling_interval_sec=self.polling_interval,
            on_conflict="always_update",
        )
        if recover:
            self._requeue(
                self.client.list_workflows(
                    status="PENDING",
                    executor_id=list(recover),
                    name=WORKFLOW,
                    load_input=False,
                    load_output=False,
                )
            )

    def drain(self, timeout: float = 30.0) -> list[str]:
        """Stop this worker: its runs pause at their next boundary and go back to the queue.

        A run inside a model or tool call finishes that call first (up to
        ``timeout`` seconds; one still running then is cut off and its call made
        again by the next worker). Returns the ids handed back.
        """
        if self.executor_id is None:
            return []
        executor = self.executor_id
        WORKER.draining = True
        deadline = time.monotonic() + timeout
        while WORKER.busy() and time.monotonic() < deadline:
            time.sleep(0.01)
        # Stop dequeuing for good before listing: a run dequeued until now parks before
        # its first step, and none can be dequeued after the list is made.
        DBOS.destroy()
        self.executor_id = None
        handed = self._requeue(
            self.client.list_workflows(
                status="PENDING",
                executor_id=executor,
                name=WORKFLOW,
                load_input=False,
                load_output=False,
            )
        )
        self.close()
        return handed

    def _requeue(self, pending: Sequence[Any]) -> list[str]:
        ids = [w.workflow_id for w in pending]
        for run_id in ids:
            self.client.resume_workflow(run_id, queue_name=self.queue)
        return ids

    def close(self) -> None:
        """Stop the worker (if launched) and release the database."""
        if self.executor_id is not None:
            DBOS.destroy()
            self.executor_id = None
        if self._client is not None:
            self._client.destroy()
            self._client = None

    # ------------------------------------------------------------ any process

    @property
    def client(self) -> DBOSClient:
        if self._client is None:
            self._client = DBOSClient(
                system_database_url=self.url,
                serializer=_SERIALIZER,
                application_name="agentfsm",
            )
        return self._client

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
        """Queue a run of the agent registered as ``agent`` over ``state``; its id.

        Options are those of :meth:`Agent.start`, checked here when ``agent`` is
        registered in this process. An interrupted run waits ``decision_timeout``
        seconds (default: no limit) for :meth:`decide`, then ends ``interrupted``
        (and :meth:`decide` resumes it later).
        An id that exists is refused with :class:`RunExistsError`.
        """
        if until_tool is not None and until_tool_success is not None:
            raise ValueError(
                "Cannot pass both until_tool and until_tool_success; they are mutually exclusive"
            )
        local = AGENTS.get(agent)
        if local is not None:
            local.options(
                until_tool=until_tool, until_tool_success=until_tool_success, max_runs=max_runs
            )
        target = until_tool_success if until_tool_success is not None else until_tool
        names = [target] if isinstance(target, str) else list(target or ())
        submission = {
            "format": FORMAT,
            "agent": agent,
            "state": converter.unstructure(state, AgentState),
            "options": {
                "until_tool": names,
                "require_tool_success": until_tool_success is not None,
                **({} if max_runs is None else {"max_runs": max_runs}),
            },
            "decision_timeout": decision_timeout,
        }
        return self._enqueue(submission, run_id)

    def _enqueue(self, submission: Mapping[str, Any], run_id: str | None) -> str:
        options: dict[str, Any] = {
            "queue_name": self.queue,
            "workflow_name": WORKFLOW,
            "workflow_id_reuse_policy": "reject",
        }
        if run_id is not None:
            options["workflow_id"] = run_id
        try:
            handle: Any = self.client.enqueue(options, dict(submission))  # type: ignore[arg-type]
        except DBOSWorkflowIDInUseError as exc:
            raise RunExistsError(
                f"A run {run_id!r} exists already; pick another id (runs are never overwritten)."
            ) from exc
        return str(handle.get_workflow_id())

    def _status(self, run_id: str, *, output: bool, follow: bool = True) -> Any:
        """The DBOS status of the workflow a run is at: its newest continuation, or itself
        (``run_id`` may name the run or any of its continuations)."""
        found = self.client.list_workflows(
            workflow_ids=[run_id], load_input=output, load_output=output
        )
        if not found:
            raise RunNotFoundError(f"No run {run_id!r} in {self.url}")
        root = _root(found[0])
        if follow and (found[0].was_forked_from or root != run_id):
            tip, _ = self._tip(root)
            if tip != run_id:
                return self._status(tip, output=output, follow=False)
        return found[0]

    def _tip(self, run_id: str) -> tuple[str, int]:
        """The newest continuation of a run and its number (the run itself and 0 when none)."""
        prefix = f"{run_id}{_CONTINUATION}"
        numbered = re.compile(re.escape(prefix) + r"([1-9][0-9]*)")
        forks = self.client.list_workflows(
            workflow_id_prefix=prefix, name=WORKFLOW, load_input=False, load_output=False
        )
        numbers = [
            int(m.group(1)) for w in forks if (m := numbered.fullmatch(w.workflow_id)) is not None
        ]
        return (f"{prefix}{max(numbers)}", max(numbers)) if numbers else (run_id, 0)

    def result(self, run_id: str, *, timeout: float | None = None) -> RunResult:
        """The run's result, waiting up to ``timeout`` seconds (None: until it ends)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self._status(run_id, output=True)
            if status.status == "SUCCESS":
                return _result(_root(status), status.output)
            if status.status in ("ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
                raise DurableError(
                    f"Run {run_id!r} ended {status.status} in the engine: {status.error}"
                )
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"Run {run_id!r} is still {status.status.lower()}")
            time.sleep(self.polling_interval / 2)

    def decide(self, run_id: str, decisions: Sequence[Mapping[str, Any]]) -> None:
        """Answer the approval requests of a run, from any process.

        A run that waits for them gets them at once. A run whose wait timed out
        (it ended ``interrupted``) goes on later: its continuation, the DBOS
        fork ``RUN/resume-N``, is queued; it replays the recorded steps and
        takes the decisions, and :meth:`result`, :meth:`waiting` and :meth:`runs`
        follow it under ``run_id``. Decisions are checked as :meth:`Agent.resume`
        checks them, against the calls pending in the conversation (ValueError,
        nothing sent or queued); a run that neither waits nor ended interrupted
        for approval is a :class:`ResumeError`.
        """
        status = self._status(run_id, output=True)
        tip, run_id = status.workflow_id, _root(status)
        waiting = self.client.get_event(tip, WAITING_EVENT, timeout_seconds=0)
        if isinstance(waiting, Mapping):
            check_decisions(waiting.get("interrupt") or {}, decisions)
            message = {"segment": waiting.get("segment"), "decisions": [dict(d) for d in decisions]}
            self.client.send(tip, message, DECISIONS_TOPIC)
            timed_out = self._timed_out(tip)
            if timed_out is not None:  # the wait ended as they were sent: they go on anew
                self._fork(run_id, tip, timed_out, message, status.app_version)
            return
        if _state(status) != "interrupted":
            raise ResumeError(
                f"Run {run_id!r} is not waiting for decisions and did not end interrupted "
                f"(it is {_state(status)})"
            )
        ended = _result(tip, status.output)
        data = ended.state.interrupt_data or {}
        timed_out = self._timed_out(tip)
        if "hitl_tool_call_ids" not in data or timed_out is None:
            raise ResumeError(
                f"Run {run_id!r} ended interrupted by {str(data.get('type'))[:60]!r}, not "
                "waiting for approval; resume its state with agent.resume(state, answer)."
            )
        check_decisions(data, decisions)
        agent = AGENTS.get(_agent(status.input) or "")
        check_decisions_fit(ended.state.messages, data, agent.middleware if agent else ())
        self._fork(
            run_id,
            tip,
            timed_out,
            {"segment": len(ended.traces), "decisions": [dict(d) for d in decisions]},
            status.app_version,
        )

    def _timed_out(self, workflow_id: str) -> int | None:
        """The step of the workflow's decision wait that timed out, if one did.

        A receive that got nothing ends its run: only the last one can have.
        """
        steps = self.client.list_workflow_steps(workflow_id, load_output=True)
        waits = [s for s in steps if s["function_name"] == "DBOS.recv"]
        if waits and waits[-1]["output"] is None and waits[-1]["error"] is None:
            return waits[-1]["function_id"]
        return None

    def _fork(
        self,
        run_id: str,
        tip: str,
        wait: int,
        message: Mapping[str, Any],
        version: str | None,
    ) -> None:
        """Queue the run's next continuation from ``tip``'s timed-out ``wait``, sent ``message``.

        The fork replays every recorded step before the wait and receives there, so it
        keeps ``tip``'s application ``version``: a worker of the same machines takes it.
        """
        number = 0 if tip == run_id else int(tip.rsplit(_CONTINUATION, 1)[1])
        continuation = f"{run_id}{_CONTINUATION}{number + 1}"
        try:
            with SetWorkflowID(continuation):
                self.client.fork_workflow(
                    tip, wait, application_version=version, queue_name=self.queue
                )
        except (IntegrityError, DBOSWorkflowIDInUseError) as exc:
            raise ResumeError(
                f"Run {run_id!r} was resumed meanwhile (as {continuation!r}); see its result"
            ) from exc
        self.client.send(continuation, dict(message), DECISIONS_TOPIC)

    def waiting(self, run_id: str) -> Mapping[str, Any] | None:
        """The interrupt data a run waits for decisions on, or None."""
        tip = self._status(run_id, output=False).workflow_id
        event = self.client.get_event(tip, WAITING_EVENT, timeout_seconds=0)
        return event.get("interrupt") if isinstance(event, Mapping) else None

    def runs(self, *, limit: int = 100) -> list[RunRecord]:
        """The newest runs first (of the ``limit`` newest workflows), each as it stands now.

        A resumed run is listed once, under its id, as its newest continuation stands.
        """
        records = []
        for w in self.client.list_workflows(
            name=WORKFLOW, sort_desc=True, limit=limit, load_input=True, load_output=True
        ):
            if w.forked_from is not None and _CONTINUATION in w.workflow_id:
                continue  # listed under the run it continues
            now = self._status(w.workflow_id, output=True) if w.was_forked_from else w
            records.append(
                RunRecord(
                    w.workflow_id,
                    _state(now),
                    _agent(w.input),
                    now.executor_id,
                    _seconds(w.created_at),
                    _seconds(now.updated_at),
                )
            )
        return records

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _agent(inputs: Any) -> str | None:
    try:
        return str(inputs["args"][0]["agent"])
    except (KeyError, IndexError, TypeError):
        return None


def _state(status: Any) -> RunState:
    kind = status.status
    if kind in ("ENQUEUED", "DELAYED"):
        return "queued"
    if kind == "PENDING":
        return "running"
    if kind == "SUCCESS":
        out = status.output
        if isinstance(out, Mapping) and isinstance(out.get("state"), Mapping):
            value = out["state"].get("status", "ok")
            if value in ("ok", "paused", "interrupted", "error"):
                return value  # type: ignore[no-any-return]
        return "ok"
    if kind == "CANCELLED":
        return "cancelled"
    return "failed"


def _root(workflow: Any) -> str:
    """The id of the run a workflow is: a continuation's (``RUN/resume-N``) or its own."""
    if workflow.forked_from is not None and _CONTINUATION in workflow.workflow_id:
        return str(workflow.workflow_id).rsplit(_CONTINUATION, 1)[0]
    return str(workflow.workflow_id)


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
