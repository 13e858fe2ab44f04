"""Microseconds per model call of the standard machine on the scripted model.

A run of K tool round trips makes K + 1 model calls and 7 (K + 1) transitions,
trace recording included. A second table starts and finishes runs while N
others are open: both stay flat in N. Run by hand: ``python benchmarks/overhead.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from agentfsm import LLMChain, Message, Ok, ToolCall, tool
from agentfsm._machine import RESULTS
from agentfsm._modes.standard import StandardMode
from agentfsm.providers import ScriptedModel
from agentfsm.steps import Continue


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _script(k: int) -> ScriptedModel:
    calls = [
        Message.assistant(None, [ToolCall(f"c{i}", "add", {"a": i, "b": 1})]) for i in range(k)
    ]
    return ScriptedModel([*calls, Message.assistant("done")])


async def _one(k: int) -> float:
    chain = LLMChain(_script(k), tools=[add]).add_message(Message.user("go"))
    mode = StandardMode()
    start = time.perf_counter()
    run = mode.start(chain, max_runs=k + 2)
    result = await run.run()
    elapsed = time.perf_counter() - start
    assert type(result).__name__ == "Ok", result
    assert len(run.trace) == 7 * (k + 1)
    return elapsed / (k + 1) * 1e6


async def steps_alone(k: int) -> None:
    """The run of :func:`_one`, each state's work driven by a loop written by hand: no
    trigger, no transition record, no trace, and each state goes on with the result the
    last one left, as a run does. What ``_one`` costs more is the engine's."""
    run = StandardMode().start(
        LLMChain(_script(k), tools=[add]).add_message(Message.user("go")), max_runs=k + 2
    )
    table, opts, state = run.table, run.opts, run.state
    work, triggers, successors = table.work(opts.extra_steps), table.triggers, table.successors
    result = Continue(run.chain)
    moves = 0
    while state not in table.terminals:
        out = work[state](result, opts)
        result = out if out.__class__ in RESULTS else await out  # type: ignore[misc]
        state = successors[state][triggers[state][result.__class__]]
        moves += 1
    assert type(result) is Ok and moves == 7 * (k + 1), (result, moves)


async def measure(ks: Sequence[int], repeats: int) -> dict[int, tuple[float, float]]:
    out = {}
    for k in ks:
        await _one(k)  # warm up
        samples = [await _one(k) for _ in range(repeats)]
        out[k] = (statistics.median(samples), min(samples))
    return out


async def with_open(n: int, batch: int = 1000) -> tuple[float, float]:
    """µs to start a run, and to run it to its end (K = 0), while ``n`` runs are open."""
    mode = StandardMode()
    chain = LLMChain(ScriptedModel(lambda _: Message.assistant("done")), tools=[add])
    chain = chain.add_message(Message.user("go"))
    held = [mode.start(chain) for _ in range(n)]
    start = time.perf_counter()
    runs = [mode.start(chain) for _ in range(batch)]
    started = time.perf_counter()
    for run in runs:
        await run.run()
    ended = time.perf_counter()
    assert len(held) == n
    return (started - start) / batch * 1e6, (ended - started) / batch * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("-k", type=int, nargs="*", default=[10, 50, 200, 500])
    parser.add_argument("--open", type=int, nargs="*", default=[0, 1000, 10000, 40000])
    args = parser.parse_args()
    results = asyncio.run(measure(args.k, args.repeats))
    table = Table(title="agentfsm standard machine: overhead per model call (scripted model)")
    table.add_column("K tool round trips", justify="right")
    table.add_column("model calls", justify="right")
    table.add_column("µs / model call (median)", justify="right")
    table.add_column("µs / model call (best)", justify="right")
    table.add_column("µs / transition (median)", justify="right")
    for k, (median, best) in results.items():
        table.add_row(str(k), str(k + 1), f"{median:.1f}", f"{best:.1f}", f"{median / 7:.1f}")
    Console().print(table)
    if not args.open:
        return
    table = Table(title="starting and finishing a run while N runs are open")
    table.add_column("N open runs", justify="right")
    table.add_column("µs to start a run", justify="right")
    table.add_column("µs to run it to its end (K = 0)", justify="right")
    for n in args.open:
        start_us, run_us = asyncio.run(with_open(n))
        table.add_row(f"{n:,}", f"{start_us:.1f}", f"{run_us:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
