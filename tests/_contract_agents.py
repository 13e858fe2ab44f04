"""The agents the durable contract suite's worker processes run, on either engine.

``recorder`` is :mod:`tests._durable_agent`'s agent on the standard machine;
``tallier`` runs the same model and tool on a machine of its own (a ``tallying``
state after ``until_check``), so two agents of different machines share one
server or database; ``gated`` asks for approval of every ``record`` call.
"""

from __future__ import annotations

import os
from typing import Any

from agentfsm import STANDARD, Agent, HumanInTheLoop
from tests._durable_agent import SlowModel, record


def tally(result: Any, opts: Any) -> Any:
    """A step of the tallier's own machine: it changes nothing but the machine."""
    return result


TALLYING = STANDARD.insert("tallying", (tally,), after="until_check", name="contract_tallying")


def _model() -> SlowModel:
    return SlowModel(float(os.environ.get("AGENTFSM_TEST_MODEL_DELAY", "0")))


def recorder() -> Agent:
    return Agent(_model(), [record])


def tallier() -> Agent:
    return Agent(_model(), [record], machine=TALLYING)


def gated() -> Agent:
    return Agent(_model(), [record], middleware=[HumanInTheLoop({"record": True})])
