"""Measure one adapter in a fresh interpreter; print one JSON object on stdout.

Run by ``run.py``, one process per adapter and measurement, so that one
library's imports, caches and heap never weigh on another's numbers::

    python worker.py NAME time --ks 10,50,200 --reps 15 --sample-s 0.1 --max-s 20
    python worker.py NAME mem --ns 1000,10000 [--method tracemalloc|rss]
    python worker.py NAME profile --k 200 --runs 20

Exit status: 0 measured, 3 skipped (the library is not installed), 1 failed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import workload  # noqa: E402
from adapters import Adapter, load  # noqa: E402

EXIT_SKIPPED = 3
IDLE_TIMEOUT_S = 300.0


async def _time_k(
    adapter: Adapter, k: int, reps: int, sample_s: float, max_s: float
) -> dict[str, Any]:
    """Median µs per model call over ``reps`` samples of whole runs at ``k``."""
    # Warm up: a few runs, at least ~0.2 s, and learn how long one run takes.
    single: list[float] = []
    warm_start = time.perf_counter()
    while len(single) < 3 or (time.perf_counter() - warm_start < 0.2 and len(single) < 1000):
        t0 = time.perf_counter()
        await adapter.run_once(k)
        single.append(time.perf_counter() - t0)
    one_run = min(single)
    inner = max(1, math.ceil(sample_s / one_run))
    per_call: list[float] = []
    started = time.perf_counter()
    min_reps = min(reps, 5)
    while len(per_call) < reps:
        if len(per_call) >= min_reps and time.perf_counter() - started > max_s:
            break
        gc.collect()
        t0 = time.perf_counter()
        for _ in range(inner):
            await adapter.run_once(k)
        elapsed = time.perf_counter() - t0
        per_call.append(elapsed / inner / (k + 1) * 1e6)
    return {
        "k": k,
        "us_per_call": statistics.median(per_call),
        "us_min": min(per_call),
        "us_max": max(per_call),
        "samples": len(per_call),
        "runs_per_sample": inner,
    }


async def measure_time(
    adapter: Adapter, ks: list[int], reps: int, sample_s: float, max_s: float
) -> dict[str, Any]:
    await adapter.run_once(1)  # first-call costs (lazy imports, schema builds) out of the way
    return {"time": [await _time_k(adapter, k, reps, sample_s, max_s) for k in ks]}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


async def _idle_batch(adapter: Adapter, n: int, method: str) -> dict[str, Any]:
    """Start ``n`` runs that all block in their first model call; measure; release."""
    gc.collect()
    if method == "tracemalloc":
        tracemalloc.start()
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
    gc.collect()
    after = tracemalloc.get_traced_memory()[0] if method == "tracemalloc" else _rss_bytes()
    tracemalloc.stop()  # no tracing cost while the runs finish
    event.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise RuntimeError(f"{len(errors)}/{n} idle runs failed; first: {errors[0]!r}")
    del tasks, results
    return {
        "n": n,
        "kib_per_run": (after - before) / n / 1024,
        "start_us_per_run": start_s / n * 1e6,
    }


async def measure_mem(adapter: Adapter, ns: list[int], method: str) -> dict[str, Any]:
    await adapter.run_once(1)
    await _idle_batch(adapter, 20, "rss")  # warm the idle path outside the measurement
    out = [await _idle_batch(adapter, n, method) for n in ns]
    return {"mem": out, "mem_method": method}


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
    t = sub.add_parser("time")
    t.add_argument("--ks", default="10,50,200")
    t.add_argument("--reps", type=int, default=15)
    t.add_argument("--sample-s", type=float, default=0.1)
    t.add_argument("--max-s", type=float, default=20.0)
    m = sub.add_parser("mem")
    m.add_argument("--ns", default="1000,10000")
    m.add_argument("--method", choices=("tracemalloc", "rss"), default="tracemalloc")
    p = sub.add_parser("profile")
    p.add_argument("--k", type=int, default=200)
    p.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)

    try:
        adapter = load(args.name)
    except ImportError as exc:
        if exc.name == f"adapters.{args.name}":
            raise
        print(json.dumps({"name": args.name, "skipped": f"{type(exc).__name__}: {exc}"}))
        return EXIT_SKIPPED
    try:
        if args.mode == "profile":
            asyncio.run(profile(adapter, args.k, args.runs))
            return 0
        result: dict[str, Any] = {"name": adapter.NAME, "version": adapter.version()}
        if args.mode == "time":
            ks = [int(x) for x in args.ks.split(",")]
            timed = measure_time(adapter, ks, args.reps, args.sample_s, args.max_s)
            result.update(asyncio.run(timed))
        else:
            ns = [int(x) for x in args.ns.split(",")]
            result.update(asyncio.run(measure_mem(adapter, ns, args.method)))
    except Exception as exc:
        traceback.print_exc()
        print(json.dumps({"name": args.name, "error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
