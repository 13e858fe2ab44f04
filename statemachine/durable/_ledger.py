"""agentfsm's own two tables in the engine's database: decision claims and worker heartbeats.

DBOS delivers a message to a waiting workflow but never refuses a second one, so
``decide`` first claims the wait in ``agentfsm_decisions`` (one row per run
segment, its primary key the compare-and-set): the first claim is sent, a second
is refused with the decisions that won. A worker writes its heartbeat to
``agentfsm_workers`` every few seconds, so a reader can tell a running run from
one whose worker is gone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

__all__ = ["HEARTBEAT_SECONDS", "Ledger"]

#: How often a worker beats; one silent for three beats is gone.
HEARTBEAT_SECONDS: Final = 2.0

_META: Final = sa.MetaData()
_DECISIONS: Final = sa.Table(
    "agentfsm_decisions",
    _META,
    sa.Column("workflow_id", sa.String(512), primary_key=True),
    sa.Column("segment", sa.Integer, primary_key=True),
    sa.Column("decisions", sa.Text, nullable=False),
    sa.Column("decided_at", sa.Float, nullable=False),
)
_WORKERS: Final = sa.Table(
    "agentfsm_workers",
    _META,
    sa.Column("executor_id", sa.String(512), primary_key=True),
    sa.Column("queues", sa.Text, nullable=False),
    sa.Column("version", sa.String(512), nullable=True),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started", sa.Float, nullable=False),
    sa.Column("beat", sa.Float, nullable=False),
    sa.Column("stopped", sa.Float, nullable=True),
)
#: The agents each worker runs, by the names runs are submitted under (a worker of an
#: older agentfsm has no rows: what it runs is not known).
_AGENTS: Final = sa.Table(
    "agentfsm_worker_agents",
    _META,
    sa.Column("executor_id", sa.String(512), primary_key=True),
    sa.Column("agent", sa.String(512), primary_key=True),
)


class Ledger:
    """The two tables over one SQLAlchemy engine (the DBOS system database's)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._made = False

    def _make(self) -> None:
        if self._made:
            return
        for attempt in range(3):
            try:
                _META.create_all(self.engine, checkfirst=True)
                break
            except (IntegrityError, OperationalError, ProgrammingError):
                # two processes creating the tables at once: the loser finds them made
                if attempt == 2:
                    raise
                time.sleep(0.05)
        self._made = True

    # ------------------------------------------------------------ decisions

    def claim(
        self, workflow_id: str, segment: int, decisions: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]] | None:
        """Claim the wait of ``workflow_id``'s ``segment``: None when this claim won,
        else the decisions of the claim that did."""
        self._make()
        row = {
            "workflow_id": workflow_id,
            "segment": segment,
            "decisions": json.dumps([dict(d) for d in decisions]),
            "decided_at": time.time(),
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(_DECISIONS.insert().values(**row))
        except IntegrityError:
            return self.claimed(workflow_id, segment) or []
        return None

    def claimed(self, workflow_id: str, segment: int) -> list[dict[str, Any]] | None:
        """The decisions that claimed a wait, or None when none did."""
        found = self._read(
            sa.select(_DECISIONS.c.decisions).where(
                _DECISIONS.c.workflow_id == workflow_id, _DECISIONS.c.segment == segment
            )
        )
        return None if not found else list(json.loads(found[0][0]))

    def _read(self, query: sa.Select[Any]) -> list[Any]:
        """The rows of a query; none while the tables are not made (a reader makes nothing)."""
        try:
            with self.engine.begin() as conn:
                return list(conn.execute(query).all())
        except (OperationalError, ProgrammingError):
            if self._made:
                raise
            return []

    def latest(self, workflow_id: str) -> list[dict[str, Any]] | None:
        """The decisions of the newest claimed wait of ``workflow_id``, or None."""
        found = self._read(
            sa.select(_DECISIONS.c.decisions)
            .where(_DECISIONS.c.workflow_id == workflow_id)
            .order_by(_DECISIONS.c.segment.desc())
            .limit(1)
        )
        return None if not found else list(json.loads(found[0][0]))

    def decided(self, run_id: str, continuation: str) -> list[list[dict[str, Any]]]:
        """The decisions claimed for the run ``run_id``, newest first: its own waits' and
        those of its continuations (``RUN{continuation}N``)."""
        found = self._read(
            sa.select(_DECISIONS.c.decisions)
            .where(
                sa.or_(
                    _DECISIONS.c.workflow_id == run_id,
                    _DECISIONS.c.workflow_id.startswith(run_id + continuation, autoescape=True),
                )
            )
            .order_by(_DECISIONS.c.decided_at.desc(), _DECISIONS.c.segment.desc())
        )
        return [list(json.loads(row[0])) for row in found]

    # ------------------------------------------------------------ heartbeats

    def beat(
        self,
        executor_id: str,
        queues: Sequence[str],
        version: str,
        pid: int,
        *,
        first: bool,
        agents: Sequence[str] = (),
    ) -> None:
        """Say the worker is alive (``first``: it starts now, running ``agents``), serving
        ``queues`` on the application ``version``."""
        self._make()
        now = time.time()
        with self.engine.begin() as conn:
            if first:
                conn.execute(_AGENTS.delete().where(_AGENTS.c.executor_id == executor_id))
                if agents:
                    conn.execute(
                        _AGENTS.insert(),
                        [{"executor_id": executor_id, "agent": a} for a in sorted(set(agents))],
                    )
            updated = conn.execute(
                _WORKERS.update()
                .where(_WORKERS.c.executor_id == executor_id)
                .values(
                    beat=now,
                    stopped=None,
                    pid=pid,
                    queues=json.dumps(list(queues)),
                    version=version,
                    **({"started": now} if first else {}),
                )
            ).rowcount
            if not updated:
                conn.execute(
                    _WORKERS.insert().values(
                        executor_id=executor_id,
                        queues=json.dumps(list(queues)),
                        version=version,
                        pid=pid,
                        started=now,
                        beat=now,
                        stopped=None,
                    )
                )

    def version_for(self, queue: str, *, now: float | None = None) -> str | None:
        """The application version of the newest live worker serving ``queue``: the one a
        new run of that queue goes to (None: no worker of it is alive)."""
        limit = (time.time() if now is None else now) - 3 * HEARTBEAT_SECONDS
        rows = self._read(
            sa.select(_WORKERS.c.queues, _WORKERS.c.version)
            .where(_WORKERS.c.stopped.is_(None), _WORKERS.c.beat >= limit)
            .order_by(_WORKERS.c.started.desc())
        )
        for row in rows:
            if row.version is not None and queue in json.loads(row.queues):
                return str(row.version)
        return None

    def serving(
        self, queues: Sequence[str], *, besides: str, now: float | None = None
    ) -> list[tuple[str, str, list[str]]]:
        """The live workers other than ``besides`` that serve any of ``queues`` and say
        which agents they run: (executor id, the queue, its agents), newest first."""
        limit = (time.time() if now is None else now) - 3 * HEARTBEAT_SECONDS
        rows = self._read(
            sa.select(_WORKERS.c.executor_id, _WORKERS.c.queues)
            .where(
                _WORKERS.c.stopped.is_(None),
                _WORKERS.c.beat >= limit,
                _WORKERS.c.executor_id != besides,
            )
            .order_by(_WORKERS.c.started.desc())
        )
        if not rows:
            return []
        agents: dict[str, list[str]] = {}
        for row in self._read(
            sa.select(_AGENTS.c.executor_id, _AGENTS.c.agent).where(
                _AGENTS.c.executor_id.in_([r.executor_id for r in rows])
            )
        ):
            agents.setdefault(row.executor_id, []).append(row.agent)
        found = []
        for row in rows:
            shared = [q for q in json.loads(row.queues) if q in queues]
            if shared and row.executor_id in agents:
                found.append((row.executor_id, shared[0], sorted(agents[row.executor_id])))
        return found

    def stopped(self, executor_id: str) -> None:
        """The worker stopped of its own accord (drained)."""
        self._make()
        with self.engine.begin() as conn:
            conn.execute(
                _WORKERS.update()
                .where(_WORKERS.c.executor_id == executor_id)
                .values(stopped=time.time())
            )

    def versions(self, executor_ids: Sequence[str], *, now: float | None = None) -> dict[str, str]:
        """The application version each live one of ``executor_ids`` serves now."""
        if not executor_ids:
            return {}
        limit = (time.time() if now is None else now) - 3 * HEARTBEAT_SECONDS
        rows = self._read(
            sa.select(_WORKERS.c.executor_id, _WORKERS.c.version).where(
                _WORKERS.c.executor_id.in_(list(executor_ids)),
                _WORKERS.c.stopped.is_(None),
                _WORKERS.c.beat >= limit,
            )
        )
        return {r.executor_id: str(r.version) for r in rows if r.version is not None}

    def gone(self, executor_ids: Sequence[str], *, now: float | None = None) -> set[str]:
        """Those of ``executor_ids`` that have beaten but are silent for three beats
        (a worker that never beat, an older one, is not judged)."""
        if not executor_ids:
            return set()
        limit = (time.time() if now is None else now) - 3 * HEARTBEAT_SECONDS
        rows = self._read(
            sa.select(_WORKERS.c.executor_id, _WORKERS.c.beat, _WORKERS.c.stopped).where(
                _WORKERS.c.executor_id.in_(list(executor_ids))
            )
        )
        return {r.executor_id for r in rows if r.stopped is not None or r.beat < limit}
