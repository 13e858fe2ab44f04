"""The floor of benchmarks/temporal.py: a workflow of N bare activities, no agentfsm."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="agentfsm.bench.echo")
async def echo(n: int) -> int:
    return n


@workflow.defn(name="agentfsm.bench.bare")
class Bare:
    """``steps`` activities one after another, as a run makes its calls."""

    @workflow.run
    async def run(self, steps: int) -> int:
        for n in range(steps):
            await workflow.execute_activity(
                "agentfsm.bench.echo", n, start_to_close_timeout=timedelta(seconds=30)
            )
        return steps
