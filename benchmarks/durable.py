"""What durability costs: µs per model call with no store and with SQLiteStore (and what the
store adds), ms per model call of DBOS on SQLite and on PostgreSQL (next to the same number
of bare DBOS steps), and runs per second with one and two workers (4 and 8 runs at once per
worker, the default, next to how busy the machine's CPUs were).

    pip install -e '.[dbos]'
    python benchmarks/durable.py [--quick] [--clock cpu] [--local | --workers]

``--clock cpu`` times the local table in this thread's CPU time, steadier on a shared
machine; ``--local`` stops after it, ``--workers`` runs only the workers table.

The workload is the standard machine on a zero-latency scripted model that asks for one
trivial tool K times, then answers (K+1 model calls, K tool calls). PostgreSQL is a
throwaway local server (Debian's package), as the tests start it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dbos import DBOS  # noqa: E402

from agentfsm import Agent, AgentState, Message, Tool, start_run, tool  # noqa: E402
from agentfsm._serialization import FORMAT, converter  # noqa: E402
from agentfsm.durable import Engine  # noqa: E402
from agentfsm.durable._workflow import run_workflow  # noqa: E402
from agentfsm.providers import call_tool, say  # noqa: E402
from agentfsm.store import SQLiteStore  # noqa: E402
from tests._postgres import postgres  # noqa: E402


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


def _agent(k: int) -> Agent:
    return Agent(_Counter(k), [ping], max_runs=k + 5)


async def _step(n: int) -> int:
    return n


@DBOS.workflow(name="agentfsm.bench.bare")
async def _bare(steps: int) -> int:
    for n in range(steps):
        await DBOS.run_step_async({"name": "bare"}, _step, n)
    return steps


def bench_local(
    k: int, runs: int, folder: Path, clock: Callable[[], float]
) -> tuple[float, float, float]:
    """µs per model call with no store, with SQLiteStore, and the store's own share: the
    median of paired differences, each pair run back to back so both see the same machine."""
    agent = _agent(k)
    store = SQLiteStore(folder / f"store-{k}.db")

    def timed(once: Callable[[], object]) -> float:
        started = clock()
        once()
        return (clock() - started) / (k + 1) * 1e6

    def bare() -> object:
        return agent.execute_sync(AgentState.of("go"))

    def stored(i: int) -> Callable[[], object]:
        return lambda: start_run(agent, AgentState.of("go"), store, run_id=f"r{k}-{i}").run_sync()

    timed(bare), timed(stored(-1))  # warm up
    pairs = [(timed(bare), timed(stored(i))) for i in range(runs)]
    store.close()
    return (
        statistics.median(b for b, _ in pairs),
        statistics.median(s for _, s in pairs),
        statistics.median(s - b for b, s in pairs),
    )


def bench_dbos(url: str, k: int, runs: int) -> tuple[float, float]:
    """ms per model call of a run's workflow and of a workflow of as many bare steps, both
    started in this process (no queue polling), interleaved so both see the same machine."""
    engine = Engine(url)
    engine.register("bench", _agent(k))
    engine.launch(executor_id="bench")
    steps = 2 * k + 1
    submission = {
        "format": FORMAT,
        "agent": "bench",
        "state": converter.unstructure(AgentState.of("go"), AgentState),
        "options": {},
    }
    try:
        DBOS.start_workflow(run_workflow, submission).get_result()
        durable, bare = [], []
        for _ in range(runs):
            started = time.perf_counter()
            output = DBOS.start_workflow(run_workflow, submission).get_result()
            durable.append((time.perf_counter() - started) * 1000 / (k + 1))
            assert output["state"]["status"] == "ok", output["state"]
            started = time.perf_counter()
            DBOS.start_workflow(_bare, steps).get_result()
            bare.append((time.perf_counter() - started) * 1000 / (k + 1))
    finally:
        engine.close()
    return statistics.median(durable), statistics.median(bare)


def _cpu_busy() -> tuple[float, float]:
    """The machine's busy and total CPU time so far (Linux ``/proc/stat``), in ticks."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def bench_workers(
    url: str, workers: int, runs: int, delay: float, concurrency: int
) -> tuple[float, float]:
    """Runs per second of ``workers`` worker processes, each running up to ``concurrency``
    runs at once, and how busy the machine's CPUs were meanwhile (0 to 1)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AGENTFSM_TEST_MODEL_DELAY": str(delay),
        "AGENTFSM_TEST_TOOL_DELAY": "0",
    }
    engine = Engine(url)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentfsm",
                "worker",
                "--db",
                url,
                "tests._durable_agent:agent",
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
    try:
        for proc in procs:
            assert proc.stdout is not None and "running" in proc.stdout.readline()
        time.sleep(1.5)  # the workers find the queue
        busy, total = _cpu_busy()
        started = time.perf_counter()
        ids = [
            engine.submit(AgentState.of(f"w{workers}-{n}"), agent="tests._durable_agent:agent")
            for n in range(runs)
        ]
        for run_id in ids:
            engine.result(run_id, timeout=300)
        elapsed = time.perf_counter() - started
        busy_after, total_after = _cpu_busy()
        return runs / elapsed, (busy_after - busy) / max(total_after - total, 1.0)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--local", action="store_true", help="only the no store / SQLite table")
    parser.add_argument("--workers", action="store_true", help="only the workers table")
    parser.add_argument(
        "--runs", type=int, default=32, metavar="N", help="runs per workers measurement (32)"
    )
    args = parser.parse_args()
    reps = 3 if args.quick else 7
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    folder = Path(tempfile.mkdtemp(prefix="agentfsm-bench-"))
    if not args.workers:
        print(f"| K | no store | SQLiteStore | store adds | µs per model call ({args.clock}) |")
        print("|---:|---:|---:|---:|---|")
        for k in (10, 50, 200, 500):
            bare, stored, adds = bench_local(k, max(3, 3 * reps // (1 + k // 100)), folder, clock)
            print(f"| {k} | {bare:.0f} | {stored:.0f} | {adds:.0f} | |")
    if args.local:
        return
    with postgres() as pg_url:
        if not args.workers:
            k = 10
            rows = []
            for name, url in (
                ("DBOS on SQLite", f"sqlite:///{folder / 'dbos.db'}"),
                ("DBOS on PostgreSQL", pg_url.rsplit("/", 1)[0] + "/bench"),
            ):
                durable, bare = bench_dbos(url, k, reps)
                rows.append((name, durable, bare))
            print(f"\n| engine (K={k}) | ms per model call | as many bare DBOS steps | ratio |")
            print("|---|---:|---:|---:|")
            for name, durable, bare in rows:
                print(f"| {name} | {durable:.2f} | {bare:.2f} | {durable / bare:.2f}x |")
        print(
            "\n| DBOS on PostgreSQL, 3 tool turns | runs at once per worker | runs/s, 1 worker "
            "| 2 workers | speed-up | CPUs busy, 1 / 2 workers |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        base = pg_url.rsplit("/", 1)[0]
        for delay, concurrency in ((0.1, 4), (0.1, 8), (0.0, 4)):
            name = f"{int(delay * 1000)}_{concurrency}"
            one, one_busy = bench_workers(f"{base}/w1_{name}", 1, args.runs, delay, concurrency)
            two, two_busy = bench_workers(f"{base}/w2_{name}", 2, args.runs, delay, concurrency)
            print(
                f"| model delay {delay * 1000:.0f} ms | {concurrency} | {one:.2f} | {two:.2f} "
                f"| {two / one:.2f}x | {one_busy:.0%} / {two_busy:.0%} |"
            )


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
