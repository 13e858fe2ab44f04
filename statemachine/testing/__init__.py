"""Testing agents: assert paths, cover edges, force every path, replay recorded runs.

``assert_path(run, "expanding calling ... ok")`` checks the path a run took;
:func:`edge_coverage` counts the edges runs take; :func:`path_cases` gives, for
each path of a machine, a scenario that takes it; :func:`record` and
:class:`Cassette` record a model's conversation and replay it;
:class:`StochasticModel` draws its replies from a seeded random generator, so runs'
paths vary as a real model's do (for evals, :mod:`agentfsm.evals`);
:func:`check_machine` proves properties of a table over all its paths, from the
effects its steps declare (:func:`agentfsm.steps.effects`). The
pytest plugin (installed with the package) adds fixtures and a coverage report;
see the testing docs.
"""

from __future__ import annotations

from .._checks import check_machine
from .._moved import forward, show_at
from ._assertions import assert_path, edge_coverage, matches_path
from ._cases import PathCase, Scenario, assert_took, path_cases
from ._cassette import (
    Cassette,
    CassetteMismatchError,
    cassette_from_traces,
    record,
    redact,
    regression_test,
)
from ._stochastic import StochasticModel

__all__ = [
    "Cassette",
    "CassetteMismatchError",
    "PathCase",
    "Scenario",
    "StochasticModel",
    "assert_path",
    "assert_took",
    "check_machine",
    "cassette_from_traces",
    "edge_coverage",
    "matches_path",
    "path_cases",
    "record",
    "redact",
    "regression_test",
]

#: The last release's names this face no longer exports, kept one more release.
__getattr__ = forward(
    __name__,
    (
        "agentfsm.steps",
        "agentfsm._effects",
        "agentfsm._checks",
        "agentfsm.testing._assertions",
        "agentfsm.testing._cassette",
    ),
    frozenset(
        {"EFFECTS", "Effect", "EdgeCoverage", "MachineProblem", "Recorder", "effects", "effects_of"}
    ),
)
show_at(__name__, globals())
