"""An eval's results: every run's path and answer, and what they add up to.

:class:`EvalReport` keeps each run as an :class:`Outcome` (the path it took, as an
index into the report's distinct paths, its terminal, which expectations it met,
its tokens, cost and seconds) and computes everything else from them: each
expectation's pass rate with its Wilson interval, per case and over the dataset;
the terminals, paths and edge counts; tokens, cost and latency. It is JSON both
ways, which is how the store keeps it and how ``agentfsm eval --json`` prints it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ._stats import mean_interval, wilson

if TYPE_CHECKING:
    from ..store import SQLiteStore

__all__ = ["FORMAT", "CaseResult", "EvalReport", "Outcome", "Rate"]

FORMAT: Final = "agentfsm-eval/1"

Edge3 = tuple[str, str, str]


@attrs.frozen
class Rate:
    """``passed`` of ``runs``, and the Wilson interval of the share at ``confidence``."""

    passed: int
    runs: int
    confidence: float = 0.95

    @property
    def value(self) -> float:
        return self.passed / self.runs if self.runs else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.passed, self.runs, self.confidence)

    def __str__(self) -> str:
        low, high = self.interval
        return f"{self.value:.0%} [{low:.0%}, {high:.0%}]"

    def to_json(self) -> dict[str, Any]:
        low, high = self.interval
        return {
            "passed": self.passed,
            "runs": self.runs,
            "rate": self.value,
            "low": low,
            "high": high,
        }


@attrs.frozen
class Outcome:
    """One run of one case."""

    #: The index of its path in :attr:`EvalReport.paths`.
    path: int
    terminal: str | None
    #: Whether it met each of its case's expectations, in order.
    passed: tuple[bool, ...]
    input_tokens: int = 0
    output_tokens: int = 0
    #: What the provider said the run's calls cost, when it said (None: it did not).
    cost: float | None = None
    seconds: float = 0.0
    #: A run that could not start or raised: the error, in one line.
    error: str | None = None
    #: The final answer's text, cut to 200 characters.
    answer: str | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def ok(self) -> bool:
        """Whether it met every expectation of its case."""
        return all(self.passed)


@attrs.frozen
class CaseResult:
    """One case's runs: its name, its input in a line, its expectations' labels."""

    name: str
    prompt: str
    expectations: tuple[str, ...]
    outcomes: tuple[Outcome, ...]

    def rate(self, index: int, confidence: float = 0.95) -> Rate:
        """The pass rate of expectation ``index``."""
        return Rate(sum(o.passed[index] for o in self.outcomes), len(self.outcomes), confidence)

    def all_passed(self, confidence: float = 0.95) -> Rate:
        """The runs that met every expectation."""
        return Rate(sum(o.ok for o in self.outcomes), len(self.outcomes), confidence)

    def terminals(self) -> Counter[str]:
        """How many of this case's runs ended in each terminal (``"none"``: one that raised)."""
        return Counter(o.terminal or "none" for o in self.outcomes)

    def path_counts(self) -> Counter[int]:
        """How many of this case's runs took each path (by index into the report's paths)."""
        return Counter(o.path for o in self.outcomes)


def _quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by the nearest rank (0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@attrs.frozen
class EvalReport:
    """One configuration run over one dataset: ``runs`` runs of each case.

    ``name`` says which configuration (a model, a prompt, a machine version...);
    ``id`` is unique, the key under which a store keeps it.
    """

    id: str
    name: str
    dataset: str
    machine: str
    machine_version: int | None
    model: str
    runs: int
    concurrency: int
    created: float
    seconds: float
    #: The distinct paths the runs took: ``(entry, ((source, trigger, dest), ...))``.
    paths: tuple[tuple[str, tuple[Edge3, ...]], ...]
    cases: tuple[CaseResult, ...]
    confidence: float = 0.95

    # ------------------------------------------------------------ what it adds up to

    @property
    def outcomes(self) -> list[Outcome]:
        return [o for c in self.cases for o in c.outcomes]

    @property
    def overall(self) -> Rate:
        """The runs that met every expectation of their case, over the dataset."""
        outcomes = self.outcomes
        return Rate(sum(o.ok for o in outcomes), len(outcomes), self.confidence)

    def expectation_rates(self) -> dict[tuple[str, str], Rate]:
        """Each ``(case, expectation label)``'s pass rate."""
        return {
            (case.name, label): case.rate(i, self.confidence)
            for case in self.cases
            for i, label in enumerate(case.expectations)
        }

    def terminals(self) -> Counter[str]:
        """How many runs ended in each terminal (``"none"``: one that raised)."""
        return Counter(o.terminal or "none" for o in self.outcomes)

    def states(self, index: int) -> list[str]:
        """The states of path ``index``, entry first."""
        entry, edges = self.paths[index]
        return [entry, *(d for _, _, d in edges)]

    def path_counts(self) -> Counter[int]:
        """How many runs took each distinct path (by index into :attr:`paths`)."""
        return Counter(o.path for o in self.outcomes)

    def edge_counts(self) -> dict[Edge3, list[int]]:
        """For each edge any run took, how many times each run took it (every run, in
        order, a zero for one that did not)."""
        per_path: list[Counter[Edge3]] = [Counter(edges) for _, edges in self.paths]
        taken = sorted({e for counts in per_path for e in counts})
        outcomes = self.outcomes
        return {e: [per_path[o.path][e] for o in outcomes] for e in taken}

    def edge_totals(self) -> Counter[Edge3]:
        """How many times the runs took each edge, all together."""
        total: Counter[Edge3] = Counter()
        for index, count in self.path_counts().items():
            for edge in self.paths[index][1]:
                total[edge] += count
        return total

    def entries(self) -> Counter[str]:
        """How many runs entered at each state."""
        return Counter(self.paths[o.path][0] for o in self.outcomes)

    def visits(self) -> Counter[str]:
        """How many times the runs entered each state, all together."""
        total: Counter[str] = Counter()
        for index, count in self.path_counts().items():
            for state in self.states(index):
                total[state] += count
        return total

    def tokens(self) -> tuple[float, float, float]:
        """The mean tokens of a run, and its interval."""
        return mean_interval([o.tokens for o in self.outcomes], self.confidence)

    def cost(self) -> float | None:
        """What the runs cost together, where the provider reported it (None: nowhere)."""
        costs = [o.cost for o in self.outcomes if o.cost is not None]
        return sum(costs) if costs else None

    def latency(self) -> dict[str, float]:
        """Seconds a run took: the mean, the median and the 95th percentile."""
        seconds = [o.seconds for o in self.outcomes]
        mean = sum(seconds) / len(seconds) if seconds else 0.0
        return {"mean": mean, "p50": _quantile(seconds, 0.5), "p95": _quantile(seconds, 0.95)}

    def summary(self) -> dict[str, Any]:
        """The numbers a listing shows: the runs, the pass rate, tokens, cost, time."""
        overall = self.overall
        return {
            "id": self.id,
            "name": self.name,
            "dataset": self.dataset,
            "machine": self.machine,
            "model": self.model,
            "cases": len(self.cases),
            "runs": len(self.outcomes),
            "passed": overall.to_json(),
            "terminals": dict(sorted(self.terminals().items())),
            "tokens": self.tokens()[0],
            "cost": self.cost(),
            "latency": self.latency(),
            "created": self.created,
            "seconds": self.seconds,
        }

    # ------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """The whole report as JSON: every run, and what they add up to (``summary``,
        ``expectations``, ``edges``: for reading; :meth:`from_json` reads the runs)."""
        doc = {
            "format": FORMAT,
            **{
                k: getattr(self, k)
                for k in (
                    "id",
                    "name",
                    "dataset",
                    "machine",
                    "machine_version",
                    "model",
                    "runs",
                    "concurrency",
                    "created",
                    "seconds",
                    "confidence",
                )
            },
            "paths": [
                {"entry": entry, "edges": [list(e) for e in edges]} for entry, edges in self.paths
            ],
            "cases": [
                {
                    "name": c.name,
                    "prompt": c.prompt,
                    "expectations": list(c.expectations),
                    "outcomes": [_outcome_json(o) for o in c.outcomes],
                    # what the outcomes add up to, for reading (from_json reads the outcomes)
                    "passed": c.all_passed(self.confidence).to_json(),
                    "terminals": dict(sorted(c.terminals().items())),
                    "paths": {str(k): v for k, v in sorted(c.path_counts().items())},
                    "tokens": mean_interval([o.tokens for o in c.outcomes], self.confidence)[0],
                    "seconds": sum(o.seconds for o in c.outcomes) / max(1, len(c.outcomes)),
                }
                for c in self.cases
            ],
        }
        doc["summary"] = self.summary()
        doc["expectations"] = [
            {"case": case, "expectation": label, **rate.to_json()}
            for (case, label), rate in self.expectation_rates().items()
        ]
        runs = max(1, len(self.outcomes))
        doc["edges"] = [
            {
                "source": s,
                "trigger": t,
                "dest": d,
                "total": sum(counts),
                "per_run": sum(counts) / runs,
                # how many runs took it 0, 1, 2... times
                "runs_by_count": {str(k): v for k, v in sorted(Counter(counts).items())},
            }
            for (s, t, d), counts in self.edge_counts().items()
        ]
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> EvalReport:
        """A report from :meth:`to_json`'s document; ValueError for anything else."""
        if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
            raise ValueError(f"not an eval report (its format is not {FORMAT!r})")
        try:
            paths = tuple(
                (str(p["entry"]), tuple((str(s), str(t), str(d)) for s, t, d in p["edges"]))
                for p in doc["paths"]
            )
            cases = tuple(
                CaseResult(
                    name=str(c["name"]),
                    prompt=str(c["prompt"]),
                    expectations=tuple(str(x) for x in c["expectations"]),
                    outcomes=tuple(_outcome(o, len(paths)) for o in c["outcomes"]),
                )
                for c in doc["cases"]
            )
            version = doc["machine_version"]
            return cls(
                id=str(doc["id"]),
                name=str(doc["name"]),
                dataset=str(doc["dataset"]),
                machine=str(doc["machine"]),
                machine_version=None if version is None else int(version),
                model=str(doc["model"]),
                runs=int(doc["runs"]),
                concurrency=int(doc["concurrency"]),
                created=float(doc["created"]),
                seconds=float(doc["seconds"]),
                paths=paths,
                cases=cases,
                confidence=float(doc.get("confidence", 0.95)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"an eval report that is damaged: {type(exc).__name__}: {exc}"
            ) from None

    def save(self, store: SQLiteStore) -> None:
        """Keep this report in ``store`` under its id (``agentfsm eval`` and the studio
        read it there)."""
        store.save_eval(
            self.id,
            json.dumps(self.to_json(), separators=(",", ":")),
            name=self.name,
            dataset=self.dataset,
            created=self.created,
        )

    @classmethod
    def load(cls, store: SQLiteStore, eval_id: str) -> EvalReport:
        """The report kept in ``store`` under ``eval_id``."""
        return cls.from_json(json.loads(store.read_eval(eval_id)))


def _outcome_json(o: Outcome) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "path": o.path,
        "terminal": o.terminal,
        "passed": [int(p) for p in o.passed],
    }
    if o.input_tokens or o.output_tokens:
        doc["tokens"] = [o.input_tokens, o.output_tokens]
    if o.cost is not None:
        doc["cost"] = o.cost
    doc["seconds"] = round(o.seconds, 6)
    if o.error is not None:
        doc["error"] = o.error
    if o.answer is not None:
        doc["answer"] = o.answer
    return doc


def _outcome(doc: Mapping[str, Any], paths: int) -> Outcome:
    path = int(doc["path"])
    if not 0 <= path < paths:
        raise ValueError(f"a run's path {path} is not one of the {paths} paths")
    tokens = doc.get("tokens") or (0, 0)
    cost = doc.get("cost")
    terminal = doc.get("terminal")
    return Outcome(
        path=path,
        terminal=None if terminal is None else str(terminal),
        passed=tuple(bool(p) for p in doc["passed"]),
        input_tokens=int(tokens[0]),
        output_tokens=int(tokens[1]),
        cost=None if cost is None else float(cost),
        seconds=float(doc.get("seconds", 0.0)),
        error=None if doc.get("error") is None else str(doc["error"]),
        answer=None if doc.get("answer") is None else str(doc["answer"]),
    )
