"""Measure one adapter in its own interpreter.

Run by ``run.py``, one process per adapter, so that one library's imports,
caches and heap never weigh on another's numbers::

    python worker.py NAME serve        # timing: answers JSON requests on stdin
    python worker.py NAME mem --ns 1000,10000,40000 [--method tracemalloc|rss]
    python worker.py NAME profile --k 200 --runs 20

``serve`` keeps the adapter loaded and waits for one request per line, so the
runner can take one sample of each adapter in turn (interleaved) and every
adapter sees the same machine conditions. Requests and replies are JSON lines:

    {"op": "warm", "k": 10, "sample_s": 0.1}  ->  {"runs_per_sample": 606}
    {"op": "sample", "k": 10}  ->  {"us_per_call": 5.2, "cpu_us_per_call": 5.1, "s": 0.1}
    {"op": "start", "n": 40000}  ->  {"start_us_per_run": 9.8}

Its first line is ``{"ready": ..., "version": ...}`` (or ``{"skipped": ...}``).
``mem`` prints one JSON object. Exit status: 0 measured, 3 skipped (the
library is not installed), 1 failed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import sys
import time
import traceback
import tracemalloc
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import workload  # noqa: E402
from adapters import Adapter, load  # noqa: E402

EXIT_SKIPPED = 3
IDLE_TIMEOUT_S = 600.0


class _Timer:
    """Samples of whole runs at one K: each sample lasts about ``sample_s``."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.inner: dict[int, int] = {}

    async def warm(self, k: int, sample_s: float) -> dict[str, Any]:
        # A few runs (one, when a run takes seconds), at least ~0.2 s, and
        # learn how long one run takes.
        single: list[float] = []
        started = time.perf_counter()
        while (len(single) < 3 and time.perf_counter() - started < 2.0) or (
            time.perf_counter() - started < 0.2 and len(single) < 1000
        ):
            t0 = time.perf_counter()
            await self.adapter.run_once(k)
            single.append(time.perf_counter() - t0)
        self.inner[k] = max(1, math.ceil(sample_s / min(single)))
        return {"runs_per_sample": self.inner[k]}

    async def sample(self, k: int) -> dict[str, Any]:
        inner = self.inner[k]
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(inner):
            await self.adapter.run_once(k)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        calls = inner * (k + 1)
        return {
            "us_per_call": elapsed / calls * 1e6,
            "cpu_us_per_call": cpu / calls * 1e6,
            "s": elapsed,
        }


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


async def _idle_batch(adapter: Adapter, n: int, method: str | None) -> dict[str, Any]:
    """Start ``n`` runs that all block in their first model call; measure; release.

    ``method`` is how memory is read (``tracemalloc``, ``rss``), or None to
    time the start alone, with nothing traced.
    """
    gc.collect()
    if method == "tracemalloc":
        tracemalloc.start()
    before = 0
    if method is not None:
        before = tracemalloc.get_traced_memory()[0] if method == "tracemalloc" else _rss_bytes()
    event = asyncio.Event()
    reached = workload.ARRIVALS.expect(n)
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(adapter.idle_run(event)) for _ in range(n)]
    waiter = asyncio.ensure_future(reached.wait())
    done, _ = await asyncio.wait(
        [waiter, *tasks], timeout=IDLE_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
    )
    if waiter not in done:
        # A run finished or failed before every run reached its gate, or a time-out.
        waiter.cancel()
        tracemalloc.stop()
        event.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        raise RuntimeError(
            f"only {workload.ARRIVALS.count}/{n} runs reached the model"
            + (f"; first error: {errors[0]!r}" if errors else "")
        )
    start_s = time.perf_counter() - t0
    after = 0
    if method is not None:
        gc.collect()
        after = tracemalloc.get_traced_memory()[0] if method == "tracemalloc" else _rss_bytes()
    tracemalloc.stop()  # no tracing cost while the runs finish
    event.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise RuntimeError(f"{len(errors)}/{n} idle runs failed; first: {errors[0]!r}")
    del tasks, results
    out: dict[str, Any] = {"n": n, "start_us_per_run": start_s / n * 1e6}
    if method is not None:
        out["kib_per_run"] = (after - before) / n / 1024
    return out


async def measure_mem(adapter: Adapter, ns: list[int], method: str) -> dict[str, Any]:
    await adapter.run_once(1)
    await _idle_batch(adapter, 20, "rss")  # warm the idle path outside the measurement
    out = [await _idle_batch(adapter, n, method) for n in ns]
    return {"mem": out, "mem_method": method}


def serve(adapter: Adapter, requests: TextIO, reply: TextIO) -> None:
    """Answer timing requests, one JSON line each, until stdin closes."""

    def send(obj: dict[str, Any]) -> None:
        reply.write(json.dumps(obj) + "\n")
        reply.flush()

    timer = _Timer(adapter)
    with asyncio.Runner() as runner:
        runner.run(adapter.run_once(1))  # first-call costs (lazy imports, schema builds)
        runner.run(_idle_batch(adapter, 20, None))
        send({"ready": True, "name": adapter.NAME, "version": adapter.version()})
        for line in requests:
            request = json.loads(line)
            try:
                match request["op"]:
                    case "warm":
                        send(runner.run(timer.warm(request["k"], request["sample_s"])))
                    case "sample":
                        send(runner.run(timer.sample(request["k"])))
                    case "start":
                        send(runner.run(_idle_batch(adapter, request["n"], None)))
                    case op:
                        send({"error": f"unknown op {op!r}"})
            except Exception as exc:
                traceback.print_exc()
                send({"error": f"{type(exc).__name__}: {exc}"})


async def profile(adapter: Adapter, k: int, runs: int) -> None:
    from pyinstrument import Profiler

    for _ in range(3):
        await adapter.run_once(k)
    profiler = Profiler(interval=0.0002, async_mode="disabled")
    profiler.start()
    for _ in range(runs):
        await adapter.run_once(k)
    profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("serve")
    m = sub.add_parser("mem")
    m.add_argument("--ns", default="1000,10000,40000")
    m.add_argument("--method", choices=("tracemalloc", "rss"), default="tracemalloc")
    p = sub.add_parser("profile")
    p.add_argument("--k", type=int, default=200)
    p.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)

    # Replies go to the real stdout; anything a library prints goes to stderr.
    out = sys.stdout
    sys.stdout = sys.stderr
    try:
        adapter = load(args.name)
    except ImportError as exc:
        if exc.name == f"adapters.{args.name}":
            raise
        print(json.dumps({"name": args.name, "skipped": f"{type(exc).__name__}: {exc}"}), file=out)
        return EXIT_SKIPPED
    try:
        if args.mode == "profile":
            sys.stdout = out
            asyncio.run(profile(adapter, args.k, args.runs))
            return 0
        if args.mode == "serve":
            serve(adapter, sys.stdin, out)
            return 0
        result: dict[str, Any] = {"name": adapter.NAME, "version": adapter.version()}
        ns = [int(x) for x in args.ns.split(",")]
        result.update(asyncio.run(measure_mem(adapter, ns, args.method)))
    except Exception as exc:
        traceback.print_exc()
        print(json.dumps({"name": args.name, "error": f"{type(exc).__name__}: {exc}"}), file=out)
        return 1
    print(json.dumps(result), file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
