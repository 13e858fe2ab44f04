"""The cost per model call of OpenTelemetry off and on (``agentfsm.otel``).

The workload is ``overhead.py``'s: the standard machine on the scripted model, K tool
round trips (K + 1 model calls, 7 (K + 1) states, K tool calls). The settings:

* off -- ``instrument()`` never called: the engine's own code, nothing added (with
  ``--instructions`` its process never imports OpenTelemetry at all);
* off again -- ``instrument()`` then ``uninstrument()``: the same code path, so its
  difference from "off" is what this machine's noise looks like;
* on, no SDK -- ``instrument()`` over the API's no-op providers: agentfsm's wrappers;
* on, SDK -- an SDK tracer provider (batch processor, an exporter that drops the
  spans) and an SDK meter provider: per model call seven state spans, a chat span and
  a tool span, and per run the run span;
* on, SDK, states=False -- the same without the state spans;
* off + bare SDK spans -- "off", then as many spans as "on, SDK" makes, started and
  ended on the same provider with no agentfsm code: the SDK's own floor.

Two measures, both by hand:

* ``python benchmarks/otel.py`` -- wall clock, the settings sampled interleaved (one
  run of each in turn) so a noisy machine slows them alike;
* ``python benchmarks/otel.py --instructions`` -- instructions per model call under
  ``valgrind --tool=callgrind``, each setting in its own process at two sizes of run
  (the difference removes start-up): deterministic, for the claim that off adds nothing.

Needs ``pip install -e '.[test]'`` (the OpenTelemetry SDK).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from overhead import _one  # the workload, as overhead.py measures it
from rich.console import Console
from rich.table import Table

SETTINGS = (
    "off",
    "off again",
    "on, no SDK",
    "on, SDK",
    "on, SDK, states=False",
    "off + bare SDK spans",
)
#: Spans "on, SDK" makes per model call of the workload (7 states, a chat, a tool).
SPANS_PER_CALL = 9


def _settings() -> dict[str, tuple[Callable[[], None], Callable[[int], None] | None]]:
    """Each setting: how to turn it on, and extra work per run (the bare spans)."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from agentfsm import otel

    class Drop(SpanExporter):
        """Sends nothing: what is measured is agentfsm's and the SDK's own work."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Drop()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    tracer = tracer_provider.get_tracer("bare")

    def bare_spans(k: int) -> None:
        with tracer.start_as_current_span("run"):
            for _ in range(SPANS_PER_CALL * (k + 1)):
                tracer.start_span("state", attributes={"a": "b", "c": "d", "e": "f"}).end()

    return {
        "off": (otel.uninstrument, None),
        "off again": (otel.uninstrument, None),
        "on, no SDK": (
            lambda: otel.instrument(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()),
            None,
        ),
        "on, SDK": (lambda: otel.instrument(tracer_provider, meter_provider), None),
        "on, SDK, states=False": (
            lambda: otel.instrument(tracer_provider, meter_provider, states=False),
            None,
        ),
        "off + bare SDK spans": (otel.uninstrument, bare_spans),
    }


# ---------------------------------------------------------------- wall clock


async def wall_clock(k: int, rounds: int) -> dict[str, list[float]]:
    """µs per model call of every setting, sampled interleaved."""
    settings = _settings()
    samples: dict[str, list[float]] = {name: [] for name in settings}
    for _ in range(rounds + 1):  # the first round warms every path up
        for name, (turn_on, extra) in settings.items():
            turn_on()
            sample = await _one(k)
            if extra is not None:
                start = time.perf_counter()
                extra(k)
                sample += (time.perf_counter() - start) / (k + 1) * 1e6
            samples[name].append(sample)
    settings["off"][0]()
    return {name: values[1:] for name, values in samples.items()}


# ---------------------------------------------------------------- instructions


def _worker(setting: str, k: int) -> None:
    """One process, one setting: a warm-up run, then the measured run of size ``k``."""
    extra = None
    if setting != "off":  # "off" never imports OpenTelemetry
        turn_on, extra = _settings()[setting]
        turn_on()
    asyncio.run(_one(1))
    gc.collect()
    gc.disable()  # a collection falling in one run and not in the other is not the cost
    asyncio.run(_one(k))
    if extra is not None:
        extra(1)
        extra(k)


def _instructions(setting: str, k: int) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={Path(scratch) / 'out'}",
                sys.executable,
                __file__,
                "--worker",
                setting,
                "-k",
                str(k),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
        )
    match = re.search(r"Collected : (\d+)", done.stderr)
    assert match, done.stderr
    return int(match[1])


def instructions(k: int, small: int = 2) -> dict[str, float]:
    """Instructions per model call: the difference of a run of ``k`` and one of ``small``."""
    out = {}
    for setting in SETTINGS:
        large, little = _instructions(setting, k), _instructions(setting, small)
        out[setting] = (large - little) / (k - small)
    return out


# ---------------------------------------------------------------- the table


def _print(title: str, columns: Sequence[str], rows: list[list[str]]) -> None:
    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-k", type=int, default=30, help="tool round trips per run")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.k)
    elif args.instructions:
        counts = instructions(args.k)
        off = counts["off"]
        _print(
            f"agentfsm.otel: instructions per model call (callgrind, K={args.k})",
            ["setting", "M instructions", "vs off", "/ off"],
            [
                [name, f"{count / 1e6:.3f}", f"{count - off:+,.0f}", f"{count / off:.3f}x"]
                for name, count in counts.items()
            ],
        )
    else:
        samples = asyncio.run(wall_clock(args.k, args.rounds))
        off = statistics.median(samples["off"])
        _print(
            f"agentfsm.otel: µs per model call, K={args.k}, {args.rounds} interleaved samples",
            ["setting", "median", "best", "median / off"],
            [
                [
                    name,
                    f"{statistics.median(values):.1f}",
                    f"{min(values):.1f}",
                    f"{statistics.median(values) / off:.2f}x",
                ]
                for name, values in samples.items()
            ],
        )


if __name__ == "__main__":
    main()
