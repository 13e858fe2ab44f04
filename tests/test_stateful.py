"""A stateful property test: random model behaviour, pauses and resumes.

Examples per run: ``AGENTFSM_EXAMPLES`` (default 200; a nightly run uses 10000).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentfsm import STANDARD, Agent, AgentRun, AgentState, Approval, HumanInTheLoop, Message
from agentfsm.providers import ScriptedModel, call_tool, call_tools, fail, say
from tests.support import add, boom, remember, submit

EXAMPLES = int(os.environ.get("AGENTFSM_EXAMPLES", "200"))

BEHAVIOURS = [
    lambda: say("an answer"),
    lambda: call_tool("add", a=1, b=2),
    lambda: call_tool("boom"),
    lambda: call_tool("remember", key="k", value=1),
    lambda: call_tool("submit", answer="ok"),
    lambda: call_tools(("add", {"a": 1, "b": 1}), ("submit", {"answer": "x"})),
    lambda: fail("rate_limited", "slow down"),
]


class Runs(RuleBasedStateMachine):
    """One conversation driven through many runs: step, pause, resume, decide."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[Any] = []
        model = ScriptedModel(lambda messages: self.replies.pop(0) if self.replies else say("end"))
        self.agent = Agent(
            model, [add, boom, remember, submit], middleware=[HumanInTheLoop({"submit": True})]
        )
        self.state = AgentState.of("start")
        self.run: AgentRun | None = None
        self.kept: tuple[Message, ...] = self.state.messages

    @rule(behaviour=st.sampled_from(BEHAVIOURS), count=st.integers(1, 3))
    def script(self, behaviour: Any, count: int) -> None:
        self.replies.extend(behaviour() for _ in range(count))

    @precondition(lambda self: self.run is None and self.state.status != "interrupted")
    @rule(max_runs=st.integers(1, 4))
    def start(self, max_runs: int) -> None:
        if self.state.status in ("ok", "error"):
            self.state = self.state.add_user_message("again")
            self.kept = self.state.messages
        self.run = self.agent.start(self.state, max_runs=max_runs)

    @precondition(lambda self: self.run is not None)
    @rule(steps=st.integers(1, 10))
    def step(self, steps: int) -> None:
        assert self.run is not None
        for _ in range(steps):
            if self.run.done:
                break
            self.run.step_sync()
        self._collect()

    @precondition(lambda self: self.run is not None and not self.run.done)
    @rule(reason=st.sampled_from(["draining", "store down"]))
    def pause(self, reason: str) -> None:
        assert self.run is not None
        self.run.request_pause(reason)
        self.run.step_sync()
        self._collect()
        assert self.state.status == "paused" and self.state.pause_reason == reason

    @precondition(lambda self: self.run is None and self.state.status == "interrupted")
    @rule(kind=st.sampled_from(["approve", "reject"]))
    def decide(self, kind: str) -> None:
        data = self.state.interrupt_data or {}
        if "hitl_tool_call_ids" not in data:
            self.state = AgentState(self.state.messages, self.state.state)
            return
        requests = Approval.of(data).requests
        decisions = [r.approve() if kind == "approve" else r.reject() for r in requests]
        import asyncio

        self.run = asyncio.run(self.agent.start_resume(self.state, decisions))
        # The answer enters where it was asked; nothing has run until the run is stepped.
        assert self.run.state == "interrupt_check" and not self.run.trace.transitions
        self.run.run_sync()
        first, second = self.run.trace.transitions[:2]
        assert (first.source, first.dest, second.source) == (
            "interrupt_check",
            "executing",
            "executing",
        )
        assert second.detail is not None
        assert second.detail["decisions"] == {r.tool_call_id: kind for r in requests}
        self._collect()

    def _collect(self) -> None:
        assert self.run is not None
        if self.run.done:
            trace = self.run.trace
            assert STANDARD.is_path(trace.states, trace.triggers)
            assert [s for s in trace.states if s in STANDARD.terminals] == [trace.states[-1]]
            self.state = self.run.agent_state
            self.run = None

    @invariant()
    def nothing_is_lost(self) -> None:
        messages = self.run.chain.messages if self.run is not None else self.state.messages
        assert tuple(messages[: len(self.kept)]) == self.kept
        if self.run is not None and not self.run.done:
            assert self.run.trace.path.split()[-1] == self.run.state


Runs.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRuns = Runs.TestCase
