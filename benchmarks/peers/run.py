"""Peer benchmark: per-model-call overhead and idle-run memory, side by side.

    python benchmarks/peers/run.py                 # full run (a few minutes)
    python benchmarks/peers/run.py --quick         # K = 10, 50; 1,000 idle runs
    python benchmarks/peers/run.py --only agentfsm,langgraph --json out.json
    python benchmarks/peers/run.py --profile agentfsm   # pyinstrument, K = 200

Every adapter is measured in fresh interpreters (``worker.py``): one for the
timings, one for the memory.  See README.md beside this file for the method.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from adapters import ADAPTERS, FLOORS, REFERENCE  # noqa: E402

WORKER = HERE / "worker.py"
WORKER_TIMEOUT_S = 900
EXIT_SKIPPED = 3


@dataclass
class Settings:
    ks: list[int]
    reps: int
    sample_s: float
    max_s: float
    ns: list[int]
    mem_method: str


FULL = Settings(
    ks=[10, 50, 200], reps=15, sample_s=0.1, max_s=20.0, ns=[1000, 10000], mem_method="tracemalloc"
)
QUICK = Settings(ks=[10, 50], reps=5, sample_s=0.05, max_s=5.0, ns=[1000], mem_method="tracemalloc")


@dataclass
class Row:
    name: str
    version: str = ""
    us: dict[int, float] = field(default_factory=dict)
    kib: dict[int, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def _worker(name: str, args: list[str]) -> tuple[int, dict[str, Any], str]:
    cmd = [sys.executable, str(WORKER), name, *args]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired:
        return 1, {"error": f"timed out after {WORKER_TIMEOUT_S} s"}, ""
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    try:
        payload: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        payload = {}
    if not payload:
        payload = {"error": f"exit {proc.returncode}, no result"}
    return proc.returncode, payload, proc.stderr


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def measure(name: str, s: Settings) -> Row:
    row = Row(name)
    started = time.perf_counter()
    _log(f"[{name}] timing K={','.join(map(str, s.ks))} ...")
    code, payload, stderr = _worker(
        name,
        [
            "time",
            "--ks",
            ",".join(map(str, s.ks)),
            "--reps",
            str(s.reps),
            "--sample-s",
            str(s.sample_s),
            "--max-s",
            str(s.max_s),
        ],
    )
    if code == EXIT_SKIPPED:
        row.note = f"skipped: not installed ({payload.get('skipped', '')})"
        _log(f"[{name}] {row.note}")
        return row
    if code != 0:
        row.note = f"failed: {payload.get('error', '')}"
        _log(f"[{name}] {row.note}\n{stderr[-2000:]}")
        return row
    row.version = payload["version"]
    row.us = {t["k"]: t["us_per_call"] for t in payload["time"]}
    row.detail["time"] = payload["time"]
    _log(f"[{name}] idle memory N={','.join(map(str, s.ns))} ...")
    code, payload, stderr = _worker(
        name,
        [
            "mem",
            "--ns",
            ",".join(map(str, s.ns)),
            "--method",
            s.mem_method,
        ],
    )
    if code != 0:
        row.note = f"memory failed: {payload.get('error', '')}"
        _log(f"[{name}] {row.note}\n{stderr[-2000:]}")
    else:
        row.kib = {m["n"]: m["kib_per_run"] for m in payload["mem"]}
        row.detail["mem"] = payload["mem"]
        row.detail["mem_method"] = payload["mem_method"]
    _log(f"[{name}] done in {time.perf_counter() - started:.1f} s")
    return row


def _fmt_us(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _fmt_ratio(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}\u00d7" if v < 10 else f"{v:.0f}\u00d7"  # a multiplication sign


def _ratio(row: Row, ref: Row | None, k: int) -> float | None:
    if ref is None or k not in row.us or k not in ref.us or ref.us[k] <= 0:
        return None
    return row.us[k] / ref.us[k]


def tables(
    rows: list[Row], s: Settings
) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """Headers and cells of the main table and the ratio table."""
    by_name = {r.name: r for r in rows}
    head = ["library", "version"]
    head += [f"µs/call K={k}" for k in s.ks]
    head += [f"KiB/run @{n:,}" for n in s.ns]
    body: list[list[str]] = []
    for r in rows:
        if r.note and not r.us:
            short = "(skipped)" if r.note.startswith("skipped") else "(failed)"
            body.append([r.name, short] + ["-"] * (len(s.ks) + len(s.ns)))
            continue
        cells = [r.name, r.version]
        cells += [_fmt_us(r.us.get(k)) for k in s.ks]
        cells += [f"{r.kib[n]:,.1f}" if n in r.kib else "-" for n in s.ns]
        body.append(cells)
    refs = [*FLOORS, REFERENCE]
    rhead = ["library"] + [f"÷ {ref}" for ref in refs]
    rbody: list[list[str]] = []
    for r in rows:
        if not r.us:
            continue
        cells = [r.name]
        for ref in refs:
            cells.append(" · ".join(_fmt_ratio(_ratio(r, by_name.get(ref), k)) for k in s.ks))
        rbody.append(cells)
    return head, body, rhead, rbody


def _plain(title: str, head: list[str], body: list[list[str]], text_cols: int) -> str:
    widths = [
        max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(head)
    ]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < text_cols else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    out = [title, line(head), "  ".join("-" * w for w in widths)]
    out += [line(c) for c in body]
    return "\n".join(out)


def render(rows: list[Row], s: Settings, plain: bool) -> None:
    head, body, rhead, rbody = tables(rows, s)
    title = "Per-model-call overhead (median µs) and memory per concurrent idle run"
    rtitle = "µs/call of the row ÷ µs/call of the reference, at K = " + " · ".join(
        str(k) for k in s.ks
    )
    try:
        if plain:
            raise ImportError
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(_plain(title, head, body, 2))
        print()
        print(_plain(rtitle, rhead, rbody, 1))
    else:
        console = Console(width=None if sys.stdout.isatty() else 132)
        for t, h, b, text_cols in ((title, head, body, 2), (rtitle, rhead, rbody, 1)):
            table = Table(title=t, title_justify="left")
            for i, col in enumerate(h):
                table.add_column(
                    col, justify="left" if i < text_cols else "right", no_wrap=i < text_cols
                )
            for cells in b:
                table.add_row(*cells)
            console.print(table)
    for r in rows:
        if r.note:
            print(f"note: {r.name}: {r.note}")


def environment() -> dict[str, Any]:
    cpu = ""
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions, K=10,50 only, 1,000 idle runs"
    )
    parser.add_argument(
        "--only", default="", help=f"comma-separated adapters (of: {', '.join(ADAPTERS)})"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--mem-method",
        choices=("tracemalloc", "rss"),
        help="how idle memory is measured (default: tracemalloc)",
    )
    parser.add_argument("--plain", action="store_true", help="plain-text tables, no rich")
    parser.add_argument(
        "--profile", metavar="NAME", help="profile one adapter with pyinstrument at K=200 and exit"
    )
    args = parser.parse_args(argv)

    if args.profile:
        return subprocess.call([sys.executable, str(WORKER), args.profile, "profile"])

    settings = QUICK if args.quick else FULL
    if args.mem_method:
        settings.mem_method = args.mem_method
    names = list(ADAPTERS)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in ADAPTERS]
        if unknown:
            parser.error(f"unknown adapter(s): {', '.join(unknown)}; known: {', '.join(ADAPTERS)}")
        names = [n for n in ADAPTERS if n in wanted]

    started = time.perf_counter()
    rows = [measure(name, settings) for name in names]
    _log(f"total {time.perf_counter() - started:.0f} s")
    render(rows, settings, args.plain)

    if args.json:
        out = {
            "settings": vars(settings) | {"quick": args.quick},
            "environment": environment(),
            "results": [
                {
                    "name": r.name,
                    "version": r.version,
                    "note": r.note,
                    "us_per_call": {str(k): v for k, v in r.us.items()},
                    "kib_per_idle_run": {str(n): v for n, v in r.kib.items()},
                    "detail": r.detail,
                }
                for r in rows
            ],
        }
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        _log(f"wrote {args.json}")
    return 0 if all(not r.note or r.note.startswith("skipped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
