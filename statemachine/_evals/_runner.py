"""Running an eval: every case of a dataset ``runs`` times, at most ``concurrency`` at once.

Each run is an ordinary run of the agent (its machine, middleware, tools), started
from the case's input and stepped to a terminal; what it did is kept as an
:class:`~._report.Outcome`. An agent given as a function is called once per run, for
models that keep state per conversation (a list-scripted model, a cassette).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._agent import Agent
from .._errors import ChainError
from ._dataset import Dataset, Observed
from ._report import CaseResult, EvalReport, Outcome

if TYPE_CHECKING:
    from ..store import SQLiteStore

__all__ = ["evaluate", "evaluate_sync", "new_eval_id"]

#: A progress callback: ``(runs done, runs in all)``.
Progress = Callable[[int, int], None]
AgentSource = Agent | Callable[[], Agent]


def new_eval_id(name: str) -> str:
    """A fresh id: the configuration's name, the time, and four random hex digits."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:40] or "eval"
    return f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _agent_of(source: AgentSource) -> Agent:
    agent = source if isinstance(source, Agent) else source()
    if not isinstance(agent, Agent):
        raise TypeError(
            f"the eval's agent function returned a {type(agent).__name__}, not an Agent"
        )
    return agent


def _check(runs: int, concurrency: int, source: Any) -> None:
    for name, value in (("runs", runs), ("concurrency", concurrency)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} is a whole number of at least 1, got {value!r}")
    if not isinstance(source, Agent) and not callable(source):
        raise TypeError(
            f"evaluate() takes an Agent, or a function making one per run, got {source!r}"
        )


class _Paths:
    """The distinct paths of an eval, numbered as they first appear."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, tuple[tuple[str, str, str], ...]], int] = {}

    def of(self, entry: str, edges: tuple[tuple[str, str, str], ...]) -> int:
        return self.index.setdefault((entry, edges), len(self.index))


async def _one(agent: Agent, dataset: Dataset, index: int, paths: _Paths) -> Outcome:
    case = dataset.cases[index]
    table = agent.mode.table
    started = time.perf_counter()
    try:
        run = agent.start(case.input)
    except ChainError as exc:
        return _failed(dataset, index, paths, table.entries.get("fresh", "start"), exc, started)
    initial = len(run.chain.messages)
    error: str | None = None
    try:
        await run.run()
    except Exception as exc:
        error = _line(f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - started
    trace = run.trace
    edges = tuple(trace.edges)
    messages = run.chain.messages[initial:]
    text = None
    output: Any = None
    if run.result is not None and error is None:
        last = run.chain.messages[-1] if run.chain.messages else None
        text = last.text if last is not None and last.role == "assistant" else None
        output = run.output if agent.output_type is not None else text
    observed = Observed(
        edges=edges,
        entry=trace.entry,
        terminal=trace.terminal if error is None else None,
        text=text,
        output=output,
    )
    usage = trace.usage
    costs = [
        float(m.metadata["cost"])
        for m in messages
        if m.role == "assistant"
        and isinstance(m.metadata.get("cost"), int | float)
        and not isinstance(m.metadata.get("cost"), bool)
    ]
    return Outcome(
        path=paths.of(trace.entry, edges),
        terminal=observed.terminal,
        passed=tuple(e.passed(observed, table) for e in dataset.expectations(index)),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost=sum(costs) if costs else None,
        seconds=round(seconds, 6),
        error=error,
        answer=text[:200] if text else None,
    )


def _line(text: str) -> str:
    """An error in one line of at most 300 characters (shown through the views' escaping)."""
    return " ".join(text.split())[:300]


def _failed(
    dataset: Dataset, index: int, paths: _Paths, entry: str, exc: ChainError, started: float
) -> Outcome:
    """A run that could not start: no path, no terminal, every expectation unmet."""
    return Outcome(
        path=paths.of(entry, ()),
        terminal=None,
        passed=tuple(False for _ in dataset.expectations(index)),
        seconds=round(time.perf_counter() - started, 6),
        error=_line(f"{exc.type}: {exc.message}"),
    )


async def evaluate(
    agent: AgentSource,
    dataset: Dataset,
    *,
    runs: int = 10,
    concurrency: int = 8,
    name: str | None = None,
    store: SQLiteStore | None = None,
    progress: Progress | None = None,
    confidence: float = 0.95,
) -> EvalReport:
    """Run every case of ``dataset`` ``runs`` times on ``agent``, at most ``concurrency``
    runs at once, and report what they did (:class:`EvalReport`).

    ``agent`` is an Agent, or a function making one for each run (for a model that keeps
    state per conversation: a list-scripted model, a cassette). ``name`` names the
    configuration (default: the model's name); ``store`` saves the report in it;
    ``progress(done, total)`` is called after each run. Expectations naming a state or
    edge the agent's machine lacks are refused before anything runs.
    """
    _check(runs, concurrency, agent)
    first = _agent_of(agent)
    table = first.mode.table
    dataset.check(table)
    label = name if name is not None else first.model.name
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"name is a non-empty string, got {label!r}")
    paths = _Paths()
    total = len(dataset.cases) * runs
    done = 0
    gate = asyncio.Semaphore(concurrency)
    started = time.time()
    clock = time.perf_counter()

    async def one(index: int, repetition: int) -> Outcome:
        nonlocal done
        async with gate:
            made = first if repetition == 0 and index == 0 else _agent_of(agent)
            outcome = await _one(made, dataset, index, paths)
        done += 1
        if progress is not None:
            progress(done, total)
        return outcome

    jobs = [one(i, r) for i in range(len(dataset.cases)) for r in range(runs)]
    outcomes: Sequence[Outcome] = await asyncio.gather(*jobs)
    cases = tuple(
        CaseResult(
            name=case_name,
            prompt=dataset.cases[i].prompt,
            expectations=tuple(e.label for e in dataset.expectations(i)),
            outcomes=tuple(outcomes[i * runs : (i + 1) * runs]),
        )
        for i, case_name in enumerate(dataset.names)
    )
    report = EvalReport(
        id=new_eval_id(label),
        name=label,
        dataset=dataset.name,
        machine=table.name,
        machine_version=table.version,
        model=first.model.name,
        runs=runs,
        concurrency=concurrency,
        created=started,
        seconds=time.perf_counter() - clock,
        paths=tuple(paths.index),
        cases=cases,
        confidence=confidence,
    )
    if store is not None:
        report.save(store)
    return report


def evaluate_sync(agent: AgentSource, dataset: Dataset, **options: Any) -> EvalReport:
    """:func:`evaluate` for scripts: runs it in a new event loop (not inside one)."""
    return asyncio.run(evaluate(agent, dataset, **options))
