"""agentfsm's speed figures, each next to its floor, in one table.

* instructions per model call, counted by ``valgrind --tool=callgrind`` on the
  workload of ``benchmarks/peers`` (K tool round trips, K + 1 model calls):
  ``(I(K) - I(2)) / (K - 2)``, each count the median of ``--repeat`` processes, with
  ``PYTHONHASHSEED=0``. Instructions are steady on a shared machine, where time is
  not. The floors are two of the peer benchmark's rows: the loop written by hand on
  asyncio, and the same loop firing agentfsm's seven lean triggers. agentfsm's row
  is the peer benchmark's (``Agent.execute``); a second runs ``overhead.py``'s chain
  under the standard mode, with no agent around it, and a third that chain's steps
  on a loop written by hand (each state's work, then the next state from the table:
  no trigger, no transition record, no trace), which parts the steps' cost from the
  engine's;
* what ``SQLiteStore`` adds per model call: the same run saved as it goes
  (``start_run`` on a fresh store file), minus the agentfsm row. Callgrind counts the
  process's own instructions, not the kernel's work of writing the file;
* the Agent row with the collector on, as a user runs it: a model call late in a long run
  (calls 151-200) against one early in it (calls 11-60), so what a run keeps is seen if
  it makes its later calls dearer;
* a streamed event through the providers' SSE decoder (``EventStream``, as a
  streaming provider reads it) against httpx's own ``aiter_lines``, per event of a
  loopback server in another process writing each event on its own (4,000 events
  against 500); one ``data:`` line each as chat completions stream, and named events
  (an ``event:`` line and a ``data:`` line) as Anthropic's and the Responses API do;
* ``import agentfsm`` in instructions (minus ``python -c pass``, bytecode already
  compiled) and in modules added to ``sys.modules``, against the same at each
  ``--base``, a commit of this repository (its ``statemachine/`` and ``providers/``
  are unpacked into a scratch folder and imported from there);
* with ``--cpu COMMIT``, CPU time per model call of this tree against COMMIT's, sampled
  interleaved (one sample of each in turn, each in its own process), so a busy
  machine slows both alike.

Run from the repository's root, by hand: ``python benchmarks/speed.py`` (a few
minutes; needs valgrind and git). ``--markdown`` prints the table for the docs.
``benchmarks/floor.py`` counts the Agent row's design floor the same way (its workers
are this script's, ``--worker floor.<rung>``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
ROOT = HERE.parent

#: What the tree is held to by default (import cost and the Agent row per model call): the
#: commit before this round's speed work (9b49d37), and the one before the last (8a1ea1d).
#: An older commit whose package another layout imports cannot run the Agent row here.
BASES = ("9b49d37", "8a1ea1d")
#: What SQLiteStore may add per model call: two commits and the JSON of the two messages
#: (about 125,000) with room for the rows a resume reads.
STORE_TARGET = 250_000
#: What the Agent row may cost per model call: the design floor with the engine's parts at
#: unit cost (``benchmarks/floor.py``'s sixth rung, about 221,000) and a little more.
AGENT_TARGET = 235_000
#: Events the loopback server streams for the SSE rows (an eighth of it for the small run):
#: fewer for the rows of one event a chunk, which the server paces.
SSE_EVENTS = 4000
SSE_PACED_EVENTS = 1000
#: The workload's size: model calls per run are K + 1.
K = 50
#: Folders of different names a comparison with a commit copies both packages to.
LAYOUTS = 3
#: Where the collector-on rows count, ``(from, to)`` model calls into a run: a call late
#: in a long run against one early in it, each the marginal over fifty calls, so the
#: collections that fall in either window are many and the interpreter has specialized its
#: code (a run's first ten calls in a fresh process cost up to 15% more, collector on or
#: off, as the interpreter warms up; see ``benchmarks/HISTORY.md``).
GC_EARLY = (10, 60)
GC_LATE = (150, 200)
SMALL = 2


# ---------------------------------------------------------------- in the measured process


def _run_adapter(name: str, k: int, collect: bool = False) -> None:
    """One warm-up run of ``name``, then the measured one of size ``k`` (gc off, unless
    ``collect``: then as a user runs it, the collector on).

    ``chain`` is not a peer adapter: ``overhead.py``'s run of a chain under the
    standard mode, which has no agent around it; ``steps`` is that run's work driven
    by a loop written by hand, without the engine.
    """
    run_once: Callable[[int], Coroutine[Any, Any, Any]]
    if name == "chain":
        from overhead import _one

        run_once = _one
    elif name == "steps":
        from overhead import steps_alone

        run_once = steps_alone
    elif name == "store":
        run_once = _stored_runs()
    elif name.startswith("floor."):
        from floor import runner

        run_once = runner(name.removeprefix("floor."))
    else:
        sys.path.insert(0, str(PEERS))
        from adapters import load

        run_once = load(name).run_once
    asyncio.run(run_once(1))
    gc.collect()
    if not collect:
        gc.disable()  # a collection falling in one run and not in the other is not the cost
    asyncio.run(run_once(k))


def _stored_runs() -> Callable[[int], Coroutine[Any, Any, None]]:
    """The peer benchmark's agentfsm run, saved to a fresh SQLiteStore as it goes."""
    sys.path.insert(0, str(PEERS))
    import workload as w
    from adapters.agentfsm import AGENT, MODEL

    from agentfsm import AgentState, start_run
    from agentfsm.store import SQLiteStore

    store = SQLiteStore(Path(tempfile.mkdtemp()) / "speed.db")
    ids = itertools.count()

    async def one(ctx: Any) -> str:
        try:
            run = start_run(
                AGENT, AgentState.of(w.PROMPT), store, run_id=f"r{next(ids)}", max_runs=ctx.k + 5
            )
            await run.run()
        finally:
            MODEL.requests.clear()
        return str(run.agent_state.messages[-1].text)

    async def run_once(k: int) -> None:
        await w.drive(one, k)

    return run_once


#: One streamed chunk as a chat provider sends it: an event of one JSON line.
_EVENT = (
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":'
    b'[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
)
#: The same as a named event, as Anthropic's Messages and OpenAI's Responses stream it.
_NAMED_EVENT = (
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}\n\n'
)


#: Seconds the server waits between events, so each reaches the reader in a chunk of its
#: own (a reader under callgrind takes well under this per event); the bulk rows do not
#: wait, and the events arrive as they pile up, in chunks of up to 64 KiB.
SSE_PAUSE = 0.01


async def _serve_events(count: int, ready: Any, event: bytes, pause: float) -> None:
    """A loopback server: each request gets ``count`` copies of ``event``, one TCP write
    each, ``pause`` seconds apart."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"connection: close\r\n\r\n")
        for _ in range(count):
            writer.write(event)
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
        writer.close()

    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], file=ready, flush=True)
    async with server:
        await server.serve_forever()


def _read_events(name: str, count: int) -> None:
    """Read ``count`` streamed events from a loopback server in another process: with
    httpx's own line splitter (``sse_httpx``) or the providers' event stream
    (``sse_ours``); named events with ``_named`` after either name; each in a chunk
    of its own, or as they pile up with ``_bulk`` after that."""
    import httpx

    from agentfsm.providers._transport import EventStream, HttpTransport

    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--sse-server",
            "-k",
            str(count),
            *(["--named"] if "_named" in name else []),
            *([] if name.endswith("_bulk") else ["--paced"]),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    url = f"http://127.0.0.1:{server.stdout.readline().strip()}/"

    async def read() -> int:
        seen = 0
        async with httpx.AsyncClient() as client, client.stream("GET", url) as response:
            if name.startswith("sse_httpx"):
                async for line in response.aiter_lines():
                    seen += line.startswith("data:")
            else:
                transport = HttpTransport("bench", url)
                async for _ in EventStream(response, transport, started=time.monotonic()):
                    seen += 1
        return seen

    try:
        assert asyncio.run(read()) == count
    finally:
        server.kill()
        server.wait()


def _cpu_per_call(k: int, runs: int) -> None:
    """Print the CPU µs per model call of ``runs`` runs of the agentfsm adapter."""
    sys.path.insert(0, str(PEERS))
    from adapters import load

    adapter = load("agentfsm")

    async def sample() -> float:
        await adapter.run_once(k)
        start = time.process_time()
        for _ in range(runs):
            await adapter.run_once(k)
        return (time.process_time() - start) / (runs * (k + 1)) * 1e6

    print(asyncio.run(sample()))


# ---------------------------------------------------------------- measuring


def _collected(command: Sequence[str], env: dict[str, str]) -> int:
    """Instructions ``command`` runs under callgrind."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        capture_output=True,
        text=True,
        env={**env, "PYTHONHASHSEED": "0"},
        check=True,
    )
    match = re.search(r"Collected : (\d+)", done.stderr)
    assert match, done.stderr
    return int(match[1])


def _median(command: Sequence[str], env: dict[str, str], repeat: int) -> int:
    return int(statistics.median(_collected(command, env) for _ in range(repeat)))


def per_call(
    name: str,
    k: int,
    repeat: int,
    small: int = SMALL,
    path: Path | None = None,
    collect: bool = False,
    python: str | None = None,
) -> float:
    """Instructions per model call of the worker ``name`` (per event for the SSE ones),
    importing agentfsm from ``path`` (None: as installed), the collector on if ``collect``,
    on the interpreter ``python`` (None: this one)."""
    worker = [python or sys.executable, __file__, "--worker", name, *(["--gc"] if collect else [])]
    env = _env(path)
    subprocess.run([*worker, "-k", str(small)], env=env, check=True)  # writes the bytecode
    large = _median([*worker, "-k", str(k)], env, repeat)
    few = _median([*worker, "-k", str(small)], env, repeat)
    return (large - few) / (k - small)


def laid_out(
    package: Callable[[Path], Path],
    k: int,
    repeat: int,
    collect: bool = False,
    python: str | None = None,
    small: int = SMALL,
) -> float:
    """The Agent row's instructions per model call, the median over :data:`LAYOUTS`
    copies of a package, each in a folder of another name: where the files sit moves
    the count by up to 3% (the interpreter's memory is laid out differently), more
    than most changes a comparison is after. ``collect`` runs with the collector on,
    ``python`` is the interpreter (None: this one), ``small`` the run the count at ``k``
    is taken against."""
    counts = []
    for layout in range(LAYOUTS):
        with tempfile.TemporaryDirectory(prefix="agentfsm" + "-" * 5 * layout) as scratch:
            path = package(Path(scratch))
            counts.append(
                per_call("agentfsm", k, repeat, small, path=path, collect=collect, python=python)
            )
    return statistics.median(counts)


def _unpacked(commit: str, scratch: Path) -> Path:
    """``commit``'s package, as a folder to put on ``PYTHONPATH``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "statemachine", "providers"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive, check=True)
    package = scratch / "pkg"
    package.mkdir()
    (scratch / "statemachine").rename(package / "agentfsm")
    (scratch / "providers").rename(package / "agentfsm" / "providers")
    return package


def _copied(scratch: Path) -> Path:
    """This working tree's package (edits included), laid out as :func:`_unpacked` lays
    out a commit's: where a package's files sit moves the count by up to 3%, so a tree
    is held to a commit only when both are imported the same way."""
    package = scratch / "pkg"
    shutil.copytree(ROOT / "statemachine", package / "agentfsm", ignore=_NO_CACHE)
    shutil.copytree(ROOT / "providers", package / "agentfsm" / "providers", ignore=_NO_CACHE)
    return package


_NO_CACHE = shutil.ignore_patterns("__pycache__")


def _env(path: Path | None) -> dict[str, str]:
    """The environment that imports agentfsm from ``path`` (None: as installed)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return env


def import_cost(path: Path | None, repeat: int) -> tuple[float, int]:
    """Instructions of ``import agentfsm`` (minus an empty interpreter's) and the
    modules it adds, importing from ``path``."""
    env = _env(path)
    count = "import sys; n = len(sys.modules); import agentfsm; print(len(sys.modules) - n)"
    modules = subprocess.run(  # also writes the bytecode, as an installed package has it
        [sys.executable, "-c", count], capture_output=True, text=True, env=env, check=True
    ).stdout
    empty = _median([sys.executable, "-c", "pass"], env, repeat)
    imported = _median([sys.executable, "-c", "import agentfsm"], env, repeat)
    return imported - empty, int(modules)


def cpu_ratio(base: Path, k: int, rounds: int, runs: int) -> tuple[float, float, float]:
    """Median CPU µs per model call of this tree and of ``base``, sampled interleaved,
    and their ratio."""
    samples: dict[str, list[float]] = {"tree": [], "base": []}
    command = [sys.executable, __file__, "--cpu-worker", "-k", str(k), "--runs", str(runs)]
    for _ in range(rounds):
        for label, path in (("tree", None), ("base", base)):
            out = subprocess.run(
                command, capture_output=True, text=True, env=_env(path), check=True
            ).stdout
            samples[label].append(float(out))
    tree, old = statistics.median(samples["tree"]), statistics.median(samples["base"])
    return tree, old, tree / old


# ---------------------------------------------------------------- the table


def _print(rows: list[list[str]], markdown: bool) -> None:
    header = ["figure", "agentfsm", "floor", "÷ floor", "target"]
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|---|---:|---:|---:|---:|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", type=int, default=K, help="tool round trips per run")
    parser.add_argument("--repeat", type=int, default=3, help="processes per count (median)")
    parser.add_argument(
        "--base", action="append", help="a commit import costs are held to (repeatable)"
    )
    parser.add_argument("--cpu", metavar="COMMIT", help="CPU time against COMMIT, interleaved")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved --cpu samples")
    parser.add_argument("--runs", type=int, default=40, help="runs per --cpu sample")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sse-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--named", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--paced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gc", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sse_server:
        event = _NAMED_EVENT if args.named else _EVENT
        asyncio.run(_serve_events(args.k, sys.stdout, event, SSE_PAUSE if args.paced else 0.0))
        return
    if args.worker and args.worker.startswith("sse_"):
        _read_events(args.worker, args.k)
        return
    if args.worker:
        _run_adapter(args.worker, args.k, args.gc)
        return
    if args.cpu_worker:
        _cpu_per_call(args.k, args.runs)
        return

    names = ("floor_asyncio", "floor_lean", "agentfsm", "agentfsm_model", "chain", "steps", "store")
    calls = {name: per_call(name, args.k, args.repeat) for name in names}
    events = {
        name: per_call(name, size, args.repeat, size // 8)
        for kind in ("sse_httpx", "sse_ours")
        for name in (kind, f"{kind}_named", f"{kind}_bulk", f"{kind}_named_bulk")
        for size in [SSE_EVENTS if name.endswith("_bulk") else SSE_PACED_EVENTS]
    }
    tree_import, tree_modules = import_cost(None, args.repeat)
    bases = {}
    tree_calls = laid_out(_copied, args.k, args.repeat)
    for commit in args.base or BASES:
        with tempfile.TemporaryDirectory() as scratch:
            unpacked = _unpacked(commit, Path(scratch))
            bases[commit] = (
                *import_cost(unpacked, args.repeat),
                laid_out(functools.partial(_unpacked, commit), args.k, args.repeat),
            )
    early, late = (
        laid_out(_copied, k, args.repeat, collect=True, small=small)
        for small, k in (GC_EARLY, GC_LATE)
    )
    store = calls["store"] - calls["agentfsm"]
    engine = calls["chain"] - calls["steps"]
    triggers = calls["floor_lean"] - calls["floor_asyncio"]
    rows = [
        [
            f"instructions per model call, K={args.k}",
            f"{calls['agentfsm']:,.0f}",
            f"{calls['floor_asyncio']:,.0f} (asyncio loop)",
            f"{calls['agentfsm'] / calls['floor_asyncio']:.1f}x",
            f"{AGENT_TARGET:,}",
        ],
        [
            f"instructions per model call, K={args.k}",
            f"{calls['agentfsm']:,.0f}",
            f"{calls['floor_lean']:,.0f} (7 lean triggers)",
            f"{calls['agentfsm'] / calls['floor_lean']:.2f}x",
            "",
        ],
        [
            f"the same on a minimal ChatModel (no test double), K={args.k}",
            f"{calls['agentfsm_model']:,.0f}",
            f"{calls['floor_asyncio']:,.0f} (asyncio loop)",
            f"{calls['agentfsm_model'] / calls['floor_asyncio']:.1f}x",
            "",
        ],
        [
            f"the same, a chain under the standard mode (no Agent), K={args.k}",
            f"{calls['chain']:,.0f}",
            f"{calls['floor_asyncio']:,.0f} (asyncio loop)",
            f"{calls['chain'] / calls['floor_asyncio']:.1f}x",
            "",
        ],
        [
            f"the same chain's steps alone, on a loop written by hand (no engine), K={args.k}",
            f"{calls['steps']:,.0f}",
            f"{calls['floor_asyncio']:,.0f} (asyncio loop)",
            f"{calls['steps'] / calls['floor_asyncio']:.1f}x",
            "",
        ],
        [
            f"what the engine adds to those steps per model call, K={args.k}",
            f"{engine:,.0f}",
            f"{triggers:,.0f} (7 lean triggers)",
            f"{engine / triggers:.2f}x",
            "",
        ],
        [
            f"the same with the collector on, calls {GC_LATE[0] + 1}-{GC_LATE[1]} of a run",
            f"{late:,.0f}",
            f"{early:,.0f} (calls {GC_EARLY[0] + 1}-{GC_EARLY[1]})",
            f"{late / early:.3f}x",
            "1.02x",
        ],
        [
            f"what SQLiteStore adds per model call, K={args.k}",
            f"{store:,.0f}",
            f"{calls['agentfsm']:,.0f} (no store)",
            f"{store / calls['agentfsm']:.2f}x",
            f"{STORE_TARGET:,}",
        ],
        [
            "a streamed event through the providers' SSE decoder, one a chunk (loopback)",
            f"{events['sse_ours']:,.0f}",
            f"{events['sse_httpx']:,.0f} (httpx aiter_lines)",
            f"{events['sse_ours'] / events['sse_httpx']:.2f}x",
            "1.3x",
        ],
        [
            "the same, a named event (event: and data: lines, Anthropic's shape)",
            f"{events['sse_ours_named']:,.0f}",
            f"{events['sse_httpx_named']:,.0f} (httpx aiter_lines)",
            f"{events['sse_ours_named'] / events['sse_httpx_named']:.2f}x",
            "1.3x",
        ],
        [
            "the same, events as they pile up (up to 64 KiB a chunk), data: lines",
            f"{events['sse_ours_bulk']:,.0f}",
            f"{events['sse_httpx_bulk']:,.0f} (httpx aiter_lines)",
            f"{events['sse_ours_bulk'] / events['sse_httpx_bulk']:.2f}x",
            "1.3x",
        ],
        [
            "the same, named events as they pile up",
            f"{events['sse_ours_named_bulk']:,.0f}",
            f"{events['sse_httpx_named_bulk']:,.0f} (httpx aiter_lines)",
            f"{events['sse_ours_named_bulk'] / events['sse_httpx_named_bulk']:.2f}x",
            "1.3x",
        ],
    ]
    for commit, (base_import, base_modules, base_calls) in bases.items():
        rows += [
            [
                f"instructions per model call, K={args.k}, median of {LAYOUTS} layouts",
                f"{tree_calls:,.0f}",
                f"{base_calls:,.0f} (at {commit})",
                f"{tree_calls / base_calls:.3f}x",
                "1.0x",
            ],
            [
                "import agentfsm, M instructions",
                f"{tree_import / 1e6:.0f}",
                f"{base_import / 1e6:.0f} (at {commit})",
                f"{tree_import / base_import:.2f}x",
                "1.0x",
            ],
            [
                "import agentfsm, modules",
                f"{tree_modules}",
                f"{base_modules} (at {commit})",
                f"{tree_modules / base_modules:.2f}x",
                "",
            ],
        ]
    if args.cpu:
        with tempfile.TemporaryDirectory() as scratch:
            tree, old, ratio = cpu_ratio(
                _unpacked(args.cpu, Path(scratch)), args.k, args.rounds, args.runs
            )
        rows.append(
            [
                f"CPU µs per model call (Agent), K={args.k}, interleaved",
                f"{tree:.1f}",
                f"{old:.1f} (at {args.cpu})",
                f"{ratio:.2f}x",
                "",
            ]
        )
    _print(rows, args.markdown)


if __name__ == "__main__":
    main()
