"""The rooms of :mod:`agentfsm.evals`: datasets, the runner, reports, comparisons, stats."""
