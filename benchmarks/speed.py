"""agentfsm's speed figures, each next to its floor, in one table.

* instructions per model call, counted by ``valgrind --tool=callgrind`` on the
  workload of ``benchmarks/peers`` (K tool round trips, K + 1 model calls):
  ``(I(K) - I(2)) / (K - 2)``, each count the median of ``--repeat`` processes, with
  ``PYTHONHASHSEED=0``. Instructions are steady on a shared machine, where time is
  not. The floors are two of the peer benchmark's rows: the loop written by hand on
  asyncio, and the same loop firing agentfsm's seven lean triggers. agentfsm's row
  is the peer benchmark's (``Agent.execute``); a second runs ``overhead.py``'s chain
  under the standard mode, with no agent around it;
* ``import agentfsm`` in instructions (minus ``python -c pass``, bytecode already
  compiled) and in modules added to ``sys.modules``, against the same at ``--base``,
  a commit of this repository (its ``statemachine/`` and ``providers/`` are
  unpacked into a scratch folder and imported from there);
* with ``--cpu COMMIT``, CPU time per model call of this tree against COMMIT's, sampled
  interleaved (one sample of each in turn, each in its own process), so a busy
  machine slows both alike.

Run from the repository's root, by hand: ``python benchmarks/speed.py`` (a few
minutes; needs valgrind and git). ``--markdown`` prints the table for the docs.
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
ROOT = HERE.parent

#: The commit before the previous round of speed work: what ``import agentfsm`` cost.
BASE = "a6fd371"
#: The workload's size: model calls per run are K + 1.
K = 50
SMALL = 2


# ---------------------------------------------------------------- in the measured process


def _run_adapter(name: str, k: int) -> None:
    """One warm-up run of ``name``, then the measured one of size ``k`` (gc off).

    ``chain`` is not a peer adapter: ``overhead.py``'s run of a chain under the
    standard mode, which has no agent around it.
    """
    if name == "chain":
        from overhead import _one

        def run_once(size: int) -> Any:
            return _one(size)
    else:
        sys.path.insert(0, str(PEERS))
        from adapters import load

        run_once = load(name).run_once
    asyncio.run(run_once(1))
    gc.collect()
    gc.disable()  # a collection falling in one run and not in the other is not the cost
    asyncio.run(run_once(k))


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


def per_call(name: str, k: int, repeat: int) -> float:
    """Instructions per model call of the peer adapter ``name``."""
    worker = [sys.executable, __file__, "--worker", name]
    env = _env(None)
    subprocess.run([*worker, "-k", str(SMALL)], env=env, check=True)  # writes the bytecode
    large = _median([*worker, "-k", str(k)], env, repeat)
    small = _median([*worker, "-k", str(SMALL)], env, repeat)
    return (large - small) / (k - SMALL)


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
    parser.add_argument("--base", default=BASE, help="the commit import costs are held to")
    parser.add_argument("--cpu", metavar="COMMIT", help="CPU time against COMMIT, interleaved")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved --cpu samples")
    parser.add_argument("--runs", type=int, default=40, help="runs per --cpu sample")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _run_adapter(args.worker, args.k)
        return
    if args.cpu_worker:
        _cpu_per_call(args.k, args.runs)
        return

    names = ("floor_asyncio", "floor_lean", "agentfsm", "chain")
    calls = {name: per_call(name, args.k, args.repeat) for name in names}
    with tempfile.TemporaryDirectory() as scratch:
        base = _unpacked(args.base, Path(scratch))
        (tree_import, tree_modules), (base_import, base_modules) = (
            import_cost(None, args.repeat),
            import_cost(base, args.repeat),
        )
    rows = [
        [
            f"instructions per model call, K={args.k}",
            f"{calls['agentfsm']:,.0f}",
            f"{calls['floor_asyncio']:,.0f} (asyncio loop)",
            f"{calls['agentfsm'] / calls['floor_asyncio']:.1f}x",
            "12.5x",
        ],
        [
            f"instructions per model call, K={args.k}",
            f"{calls['agentfsm']:,.0f}",
            f"{calls['floor_lean']:,.0f} (7 lean triggers)",
            f"{calls['agentfsm'] / calls['floor_lean']:.2f}x",
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
            "import agentfsm, M instructions",
            f"{tree_import / 1e6:.0f}",
            f"{base_import / 1e6:.0f} (at {args.base})",
            f"{tree_import / base_import:.2f}x",
            "1.0x",
        ],
        [
            "import agentfsm, modules",
            f"{tree_modules}",
            f"{base_modules} (at {args.base})",
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
