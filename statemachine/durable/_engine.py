"""The engine: submit runs to a DBOS queue, read their results, send decisions, drain a worker.

One idea: the :class:`Engine`, the one object a host holds to reach DBOS. Its methods
share the client, the queue, the database checks and the translation of DBOS's errors
into agentfsm's, so they stay together.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Concatenate, Final, Literal, ParamSpec, TypeVar, overload

from dbos import DBOS, DBOSClient, DBOSPortableJSONSerializer, SetWorkflowID
from dbos._error import DBOSWorkflowIDInUseError
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from .._agent import Agent
from .._answers import check_approval
from .._approval import Approval
from .._db_url import check_db, shown
from .._durable_records import RunRecord, RunResult, RunState
from .._durable_shared import CONTINUATION, check_run_id, same_decisions
from .._errors import (
    DecisionConflictError,
    DurableError,
    ResumeError,
    RunExistsError,
    RunNotFoundError,
    StoreError,
)
from .._machine import fingerprint_of
from .._options import until_targets
from .._serialization import FORMAT, FormatError, check_format, converter, load_trace
from .._state import AgentState
from ._answers import check_answer, innermost, waits_on
from ._ledger import HEARTBEAT_SECONDS, Ledger
from ._workflow import AGENTS, CHILD_WORKFLOW, DECISIONS_TOPIC, WAITING_EVENT, WORKER, WORKFLOW

__all__ = [
    "DurableError",
    "Engine",
    "RunExistsError",
    "RunRecord",
    "RunResult",
    "agent_queue",
    "app_version",
    "database_url",
    "list_runs",
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


_SERIALIZER: Final = DBOSPortableJSONSerializer()
#: A resumed run goes on in the workflow ``RUN/resume-N``, a DBOS fork of ``RUN/resume-(N-1)``.
_CONTINUATION: Final = CONTINUATION
#: Queues of agentfsm runs start so; the rest of a default queue's name is the agent's.
QUEUE_PREFIX: Final = "agentfsm:"


_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Silence(logging.Filter):
    """Drops DBOS's records logged by the threads inside :func:`_silenced`: the engine
    raises the failure as a :class:`StoreError` instead of DBOS logging it first."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread not in self.threads


_SILENCE: Final = _Silence()
logging.getLogger("dbos").addFilter(_SILENCE)


@contextmanager
def _silenced() -> Iterator[None]:
    me = threading.get_ident()
    _SILENCE.threads.add(me)
    try:
        yield
    finally:
        _SILENCE.threads.discard(me)


def _database_error(url: str, exc: BaseException) -> StoreError:
    """A driver's failure as one line that says what to do about it."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    reason = " ".join(text.splitlines()[0].split()) if text else type(exc).__name__
    low = reason.lower()
    hint = ""
    if "does not exist" in low or "no such table" in low:
        hint = (
            "; no worker ever started on it: start a worker first (it creates the "
            "database and its tables), or create the database"
        )
    elif any(w in low for w in ("refused", "could not connect", "connection failed", "timeout")):
        hint = "; is the database server up, and the URL right?"
    elif "unable to open database file" in low:
        hint = "; is the path right, in a folder that exists?"
    return StoreError(f"the durable database {shown(url)} cannot be used: {reason}{hint}")


def _guarded(
    method: Callable[Concatenate[Engine, _P], _R],
) -> Callable[Concatenate[Engine, _P], _R]:
    """The database's own failures (the driver's, SQLAlchemy's) as a :class:`StoreError`."""

    @functools.wraps(method)
    def guarded(self: Engine, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except SQLAlchemyError as exc:
            raise _database_error(self.url, exc) from exc

    return guarded


def agent_queue(agent: str) -> str:
    """The queue runs of the agent registered as ``agent`` go to by default."""
    return f"{QUEUE_PREFIX}{agent}"


def database_url(db: str | os.PathLike[str]) -> str:
    """A DBOS system database URL: ``postgresql://...``, ``sqlite:///...``, or a file path.

    Anything else is a :class:`StoreError` that says what was meant: an empty ``db``,
    another database's URL (``mysql://...``), a port that is not a number.
    """
    text = os.fspath(db)
    try:
        check_db(text)
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    if "://" in text:
        return text
    return f"sqlite:///{os.path.abspath(text)}"


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
        queue: str | None = None,
        concurrency: int = 8,
        polling_interval: float = 0.1,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.url = database_url(db)
        #: One queue for every agent, or None: each agent's own (:func:`agent_queue`).
        self.queue = queue
        self.concurrency = concurrency
        self.polling_interval = polling_interval
        self.executor_id: str | None = None
        #: The application version this worker serves, once launched (:func:`app_version`).
        self.app_version: str | None = None
        self._client: DBOSClient | None = None
        self._ledger: Ledger | None = None
        self._names: list[str] = []
        self._beating: threading.Event | None = None
        #: Of the runs the last :meth:`drain` handed back, those that waited for decisions.
        self.handed_waiting: list[str] = []

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
        if name not in self._names:
            self._names.append(name)

    @property
    def queues(self) -> list[str]:
        """The queues this worker serves: its one queue, or one per registered agent."""
        if self.queue is not None:
            return [self.queue]
        return [agent_queue(name) for name in self._names]

    @contextmanager
    def listening(self, listener: Callable[[str, str, Mapping[str, Any]], None]) -> Iterator[None]:
        """Call ``listener(run_id, event, fields)`` for each step this process's runs take,
        while inside (a worker's log lines); a listener that fails never fails a run."""
        WORKER.listeners.append(listener)
        try:
            yield
        finally:
            WORKER.listeners.remove(listener)

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
        in an error naming both). It serves :attr:`queues` alone: a run of another
        agent is never taken here, and a queue a live worker of other agents serves is
        refused (:class:`DurableError`): each would take the other's runs.
        """
        if not self.queues:
            raise RuntimeError("Register an agent (or give the engine a queue) before launch().")
        executor = executor_id or f"{socket.gethostname()}-{os.getpid()}"
        self._refuse_shared(executor)
        self.executor_id = executor
        self.app_version = version or app_version({name: AGENTS[name] for name in self._names})
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
        DBOS.listen_queues(self.queues)
        try:
            DBOS.launch()
            for queue in self.queues:
                DBOS.register_queue(
                    queue,
                    worker_concurrency=self.concurrency,
                    polling_interval_sec=self.polling_interval,
                    on_conflict="always_update",
                )
        except BaseException:
            DBOS.destroy()
            self.executor_id = None
            raise
        self._beat_start(self.executor_id)
        if recover:
            self._requeue(
                self.client.list_workflows(
                    status="PENDING",
                    executor_id=list(recover),
                    name=[WORKFLOW, CHILD_WORKFLOW],
                    load_input=True,
                    load_output=False,
                )
            )

    def _refuse_shared(self, executor: str) -> None:
        """Refuse the queues a live worker of other agents serves.

        DBOS hands a queue's runs to any worker of the queue on the run's application
        version, and a run is submitted on the version of the queue's newest live worker,
        whatever agent it runs: two agents on one queue take each other's runs, to end
        ``unknown_agent``. DBOS cannot route within a queue by agent (a worker dequeues
        every partition of a queue it serves), so a worker refuses to share one.
        """
        try:
            others = self.ledger.serving(self.queues, besides=executor)
        except StoreError:
            return  # no database yet: no worker serves anything on it
        mine = sorted(self._names)
        for other, queue, agents in others:
            if agents != mine:
                raise DurableError(
                    f"queue {queue!r} is served by worker {other!r}, running "
                    f"{', '.join(map(repr, agents))}; a worker of {', '.join(map(repr, mine))} "
                    "on it would take their runs and they its: give each agent its own queue "
                    "(drop --queue, or name another)"
                )

    def drain(self, timeout: float = 30.0) -> list[str]:
        """Stop this worker: its runs pause at their next boundary and go back to the queue.

        A run inside a model or tool call finishes that call first (up to
        ``timeout`` seconds; one still running then is cut off and its call made
        again by the next worker). Returns the ids handed back.

        A run waiting for decisions is handed back as it waits, not paused: it gets no
        ``paused: draining`` segment (its segment ended ``interrupted`` already), and the
        next worker waits again where it waited, for decisions sent before or after. Those
        runs are :attr:`handed_waiting`.
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
        self._beat_stop(executor, stopped=True)
        pending = self.client.list_workflows(
            status="PENDING",
            executor_id=executor,
            name=[WORKFLOW, CHILD_WORKFLOW],
            load_input=True,
            load_output=False,
        )
        self.handed_waiting = [
            w.workflow_id
            for w in pending
            if w.name == WORKFLOW
            and isinstance(
                self.client.get_event(w.workflow_id, WAITING_EVENT, timeout_seconds=0), Mapping
            )
        ]
        handed = self._requeue(pending)
        self.close()
        return handed

    def _requeue(self, pending: Sequence[Any]) -> list[str]:
        """Hand runs back, each to the queue it came from; a subagent's child workflow
        (started by its parent, on no queue) to its parent's agent's queue."""
        ids = []
        for w in pending:
            queue = w.queue_name or self._queue_of(_agent(w.input))
            self.client.resume_workflow(w.workflow_id, queue_name=queue)
            if w.name != CHILD_WORKFLOW:  # a run's id, not its subagent's
                ids.append(w.workflow_id)
        return ids

    def _queue_of(self, agent: str | None) -> str:
        if self.queue is not None or agent is None:
            return self.queue or agent_queue("")
        return agent_queue(agent)

    def _beat_start(self, executor: str) -> None:
        """Beat every few seconds until stopped: readers see this worker alive."""
        stop = self._beating = threading.Event()
        ledger, queues, pid = self.ledger, self.queues, os.getpid()
        version = self.app_version or APP_VERSION
        ledger.beat(executor, queues, version, pid, first=True, agents=self._names)
        self._adopt(queues, version)

        def beat() -> None:
            while not stop.wait(HEARTBEAT_SECONDS):
                try:
                    ledger.beat(executor, queues, version, pid, first=False)
                    self._adopt(queues, version)
                except Exception:  # a missed beat is retried; readers wait for three
                    continue

        threading.Thread(target=beat, name=f"agentfsm-heartbeat-{executor}", daemon=True).start()

    def _adopt(self, queues: Sequence[str], version: str) -> None:
        """Take the runs queued on ``queues`` before any worker of them was alive.

        Such a run has no application version, and DBOS gives a version-less run only to
        a worker of the newest version launched, which may be another agent's worker:
        the newest live worker of the run's queue takes it on its own version instead.
        """
        mine = [q for q in queues if self.ledger.version_for(q) == version]
        if not mine:
            return
        sys_db = self.client._sys_db
        status = sys_db.tables.workflow_status
        with sys_db.engine.begin() as conn:
            conn.execute(
                status.update()
                .where(
                    status.c.queue_name.in_(mine),
                    status.c.status == "ENQUEUED",
                    status.c.application_version.is_(None),
                )
                .values(application_version=version)
            )

    def _beat_stop(self, executor: str | None, *, stopped: bool) -> None:
        if self._beating is not None:
            self._beating.set()
            self._beating = None
            if stopped and executor is not None:
                self.ledger.stopped(executor)

    def close(self) -> None:
        """Stop the worker (if launched) and release the database."""
        if self.executor_id is not None:
            self._beat_stop(self.executor_id, stopped=False)
            DBOS.destroy()
            self.executor_id = None
        if self._client is not None:
            self._client.destroy()
            self._client = None

    # ------------------------------------------------------------ any process

    @property
    def client(self) -> DBOSClient:
        """DBOS's client of the database; a :class:`StoreError` when it cannot be used
        (a SQLite file no worker made is refused, never made empty here)."""
        if self._client is None:
            path = self.url.removeprefix("sqlite:///") if self.url.startswith("sqlite:///") else ""
            if path and not os.path.exists(path):
                raise StoreError(
                    f"no durable database at {path}: start a worker on it first (it creates "
                    "the database and its tables), or check the path"
                )
            try:
                with _silenced():
                    self._client = DBOSClient(
                        system_database_url=self.url,
                        serializer=_SERIALIZER,
                        application_name="agentfsm",
                    )
            except SQLAlchemyError as exc:
                raise _database_error(self.url, exc) from exc
        return self._client

    @property
    def ledger(self) -> Ledger:
        """agentfsm's own tables (decision claims, heartbeats) in the same database."""
        if self._ledger is None:
            self._ledger = Ledger(self.client._sys_db.engine)
        return self._ledger

    @_guarded
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
        An id that exists is refused with :class:`RunExistsError`, and one ending in
        ``/resume-N`` is refused with ValueError: such ids name continuations.
        The run goes to the engine's queue, else the agent's own
        (:func:`agent_queue`); it stays ``queued`` until a worker serving it is up.
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
        }
        return self._enqueue(submission, run_id, self._queue_of(agent))

    def _enqueue(self, submission: Mapping[str, Any], run_id: str | None, queue: str) -> str:
        options: dict[str, Any] = {
            "queue_name": queue,
            "workflow_name": WORKFLOW,
            "workflow_id_reuse_policy": "reject",
        }
        version = self.ledger.version_for(queue)
        if version is not None:  # the newest live worker of the queue takes it
            options["app_version"] = version
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

    @_guarded
    def status(self, run_id: str) -> RunRecord:
        """How the run stands now (its newest continuation's standing), without waiting:
        a few reads of the database, never a wait for the run."""
        status = self._status(run_id, output=True)
        first = status
        if _root(status) != status.workflow_id:
            first = self.client.list_workflows(
                workflow_ids=[_root(status)], load_input=True, load_output=False
            )[0]
        return self._records([(first, status)])[0]

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
        ended, else None at once (see :meth:`status` for where it stands)."""
        return self._wait_result(run_id, wait=wait, timeout=timeout)

    @_guarded
    def _wait_result(self, run_id: str, *, wait: bool, timeout: float | None) -> RunResult | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self._status(run_id, output=True)
            if status.status == "SUCCESS":
                return _result(_root(status), status.output)
            if status.status in ("ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
                raise DurableError(
                    f"Run {run_id!r} ended {status.status} in the engine: {status.error}"
                )
            if not wait:
                return None
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"Run {run_id!r} is still {status.status.lower()}")
            time.sleep(self.polling_interval / 2)

    @_guarded
    def decide(
        self, run_id: str, decisions: Sequence[Mapping[str, Any]], *, unbound: bool = False
    ) -> None:
        """Answer the approval requests of a run, from any process.

        A run that waits for them gets them at once. A run whose wait timed out
        (it ended ``interrupted``) goes on later: its continuation, the DBOS
        fork ``RUN/resume-N``, is queued; it replays the recorded steps and
        takes the decisions, and :meth:`result`, :meth:`waiting` and :meth:`runs`
        follow it under ``run_id``. Decisions are checked as :meth:`Agent.resume`
        checks them, against the calls pending in the conversation (ValueError,
        nothing sent or queued); a run that neither waits nor ended interrupted
        for approval is a :class:`ResumeError`.

        A subagent's approval request is answered the same way: the decisions answer
        the innermost request (what :meth:`waiting` shows), the child goes on where
        it waited and the run after it, with the child's final answer as its tool's
        result.

        It is compare-and-set: of two processes deciding one wait at once, one is
        sent and the other raises :class:`DecisionConflictError` naming the
        decisions that won.

        It is idempotent: the decisions the run took, sent again (a retry that does not
        know whether the first got through), change nothing and raise nothing, wherever
        the run is by then. Bound decisions are known as a repeat whenever they come;
        unbound ones (``unbound=True``) only until the run asks again, since they decide
        whatever it asks now.
        """
        status = self._status(run_id, output=True)
        tip, run_id = status.workflow_id, _root(status)
        waiting = self.client.get_event(tip, WAITING_EVENT, timeout_seconds=0)
        agent = AGENTS.get(_agent(status.input) or "")
        if isinstance(waiting, Mapping):
            try:
                decisions = check_answer(
                    waiting.get("interrupt") or {}, decisions, agent, unbound=unbound
                )
            except ValueError:
                if self._repeated(run_id, decisions, unbound=False):
                    return  # an earlier wait's decisions again: taken already
                raise
            segment = int(waiting.get("segment") or 0)
            self._claim(run_id, tip, segment, decisions)
            message = {"segment": segment, "decisions": [dict(d) for d in decisions]}
            self.client.send(tip, message, DECISIONS_TOPIC)
            timed_out = self._timed_out(tip)
            if timed_out is not None:  # the wait ended as they were sent: they go on anew
                self._fork(run_id, tip, timed_out, message, status.app_version)
            return
        if self._repeated(run_id, decisions, unbound=unbound):
            return  # taken already: the run goes on (or went on) with them
        if status.status == "PENDING":
            won = self.ledger.latest(tip)
            if won is not None:  # another decide answered the wait just now
                raise DecisionConflictError(
                    f"Run {run_id!r} is not waiting for decisions: it took "
                    f"{json.dumps(won)[:300]} and goes on; these were not sent.",
                    run_id=run_id,
                    decisions=won,
                )
        if _state(status) != "interrupted":
            raise ResumeError(
                f"Run {run_id!r} is not waiting for decisions and did not end interrupted "
                f"(it is {_state(status)})"
            )
        ended = _result(tip, status.output)
        data = ended.state.interrupt_data or {}
        timed_out = self._timed_out(tip)
        if not waits_on(data) or timed_out is None:
            raise ResumeError(
                f"Run {run_id!r} ended interrupted by {str(data.get('type'))[:60]!r}, not "
                "waiting for approval; resume its state with agent.resume(state, answer)."
            )
        try:
            decisions = check_answer(data, decisions, agent, unbound=unbound)
        except ValueError:
            if self._repeated(run_id, decisions, unbound=False):
                return  # an earlier wait's decisions again: taken already
            raise
        if agent is not None and Approval.is_approval(data):
            check_approval(ended.state, agent.tools, agent.middleware, decisions)
        self._claim(run_id, tip, len(ended.traces), decisions)
        self._fork(
            run_id,
            tip,
            timed_out,
            {"segment": len(ended.traces), "decisions": [dict(d) for d in decisions]},
            status.app_version,
        )

    def _claim(
        self, run_id: str, tip: str, segment: int, decisions: Sequence[Mapping[str, Any]]
    ) -> None:
        """Claim the wait of ``tip``'s ``segment`` for ``decisions``, or refuse them.

        The same decisions claimed already go through again: a decide that claimed
        and then failed before its message was sent is retried, and a message sent
        twice is taken once (the run takes one message per segment)."""
        won = self.ledger.claim(tip, segment, decisions)
        if won is not None and won != json.loads(json.dumps([dict(d) for d in decisions])):
            raise DecisionConflictError(
                f"Run {run_id!r} took other decisions first: {json.dumps(won)[:300]}; "
                "these were not sent.",
                run_id=run_id,
                decisions=won,
            )

    def _repeated(self, run_id: str, decisions: Any, *, unbound: bool) -> bool:
        """Whether ``decisions`` are ones the run took already: bound ones, those of any of
        its claimed waits; unbound ones (with ``unbound``), those of its newest."""
        if not isinstance(decisions, list | tuple) or not decisions:
            return False
        claims = self.ledger.decided(run_id, _CONTINUATION)
        bound = all(isinstance(d, Mapping) and d.get("digest") is not None for d in decisions)
        return any(
            same_decisions(decisions, claim, unbound=unbound)
            for claim in claims[: None if bound else 1]
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
        [found] = self.client.list_workflows(workflow_ids=[tip], load_input=True)
        queue = found.queue_name or self._queue_of(_agent(found.input))
        try:
            with SetWorkflowID(continuation):
                self.client.fork_workflow(tip, wait, application_version=version, queue_name=queue)
        except (IntegrityError, DBOSWorkflowIDInUseError):
            # Forked meanwhile by a decide that claimed this wait with these very decisions
            # (a claim refuses any other): sent again, they are taken once.
            pass
        self.client.send(continuation, dict(message), DECISIONS_TOPIC)

    @_guarded
    def waiting(self, run_id: str) -> Mapping[str, Any] | None:
        """The approval request a run waits for decisions on, or None.

        A request a subagent forwards is shown as the innermost subagent made it, with
        ``"child_path"``: the subagents it waits in, outermost first. Decisions answer it.
        """
        tip = self._status(run_id, output=False).workflow_id
        event = self.client.get_event(tip, WAITING_EVENT, timeout_seconds=0)
        if not isinstance(event, Mapping) or not isinstance(event.get("interrupt"), Mapping):
            return None
        return innermost(event["interrupt"])

    @_guarded
    def runs(self, *, limit: int = 100) -> list[RunRecord]:
        """The newest runs first (of the ``limit`` newest workflows), each as it stands now.

        A resumed run is listed once, under its id, as its newest continuation stands.
        """
        pairs = []
        for w in self.client.list_workflows(
            name=WORKFLOW, sort_desc=True, limit=limit, load_input=True, load_output=True
        ):
            if w.forked_from is not None and _CONTINUATION in w.workflow_id:
                continue  # listed under the run it continues
            pairs.append((w, self._status(w.workflow_id, output=True) if w.was_forked_from else w))
        return self._records(pairs)

    def _records(self, pairs: Sequence[tuple[Any, Any]]) -> list[RunRecord]:
        """Records of (first workflow, newest continuation) pairs: a pending one is
        ``waiting`` while it waits for decisions, ``orphaned`` when its worker is gone."""
        pending = [now for _, now in pairs if now.status == "PENDING"]
        executors = sorted({now.executor_id for now in pending if now.executor_id})
        gone = self.ledger.gone(executors) if executors else set()
        serves = self.ledger.versions(executors) if executors else {}
        records = []
        for first, now in pairs:
            state = _state(now)
            reason = None
            worker = now.executor_id
            if now.status == "PENDING":
                if worker in gone:
                    state = "orphaned"
                    reason = (
                        f"its worker {worker} is gone: start it again (--executor-id {worker}), "
                        f"or another worker with --recover {worker}"
                    )
                elif worker in serves and now.app_version and serves[worker] != now.app_version:
                    # a worker started again under the id on other machines: it recovers
                    # only the runs of its own version, and leaves this one unrun
                    state = "orphaned"
                    reason = (
                        f"its worker {worker} runs version {serves[worker]} now, not the run's "
                        f"{now.app_version}: start a worker of the run's version (its agents' "
                        f"machines as they were) with --recover {worker}"
                    )
                elif isinstance(
                    self.client.get_event(now.workflow_id, WAITING_EVENT, timeout_seconds=0),
                    Mapping,
                ):
                    state = "waiting"
            records.append(
                RunRecord(
                    run_id=first.workflow_id,
                    status=state,
                    agent=_agent(first.input),
                    executor=now.executor_id,
                    created=_seconds(first.created_at),
                    updated=_seconds(now.updated_at),
                    queue=now.queue_name,
                    reason=reason,
                )
            )
        return records

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def list_runs(db: str | os.PathLike[str], *, limit: int = 100) -> list[RunRecord]:
    """The runs of the durable database ``db`` (a SQLite path or a URL), newest first:
    the one call a reader (the runs command, a web view) needs, no engine of its own."""
    with Engine(db) as engine:
        return engine.runs(limit=limit)


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
