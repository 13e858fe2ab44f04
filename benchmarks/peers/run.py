"""Peer benchmark: per-model-call overhead, start time and memory of concurrent runs.

    python benchmarks/peers/run.py                 # full run (about half an hour)
    python benchmarks/peers/run.py --quick         # K = 10, 50; 1,000 idle runs
    python benchmarks/peers/run.py --only agentfsm,langgraph --json out.json
    python benchmarks/peers/run.py --markdown      # also the README's table
    python benchmarks/peers/run.py --profile agentfsm   # pyinstrument, K = 200

Every adapter runs in interpreters of its own (``worker.py``). Timings are
interleaved: one long-lived worker per adapter, and the runner asks each in
turn for one sample, round after round, so a busy moment of the machine
weighs on every row alike; each figure is a median. Memory is read in a
fresh interpreter per adapter and size. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from adapters import ADAPTERS, FLOORS, REFERENCE  # noqa: E402

WORKER = HERE / "worker.py"
WORKER_TIMEOUT_S = 1800
EXIT_SKIPPED = 3
ENV = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}

#: Row labels of ``--markdown`` (the README's table).
LABELS = {
    "floor_asyncio": "hand-written asyncio loop (floor)",
    "floor_transitions": "the same loop firing 7 stock `transitions` triggers",
    "floor_lean": "the same loop firing agentfsm's 7 lean triggers (floor)",
    "agentfsm": "**agentfsm**",
    "pydantic_ai": "pydantic-ai (FunctionModel)",
    "langgraph": "LangGraph (`create_agent`)",
    "openai_agents": "OpenAI Agents SDK",
    "burr": "Burr",
}


@dataclass
class Settings:
    ks: list[int]
    reps: int
    min_reps: int
    sample_s: float
    #: Seconds of samples per adapter and K after which ``min_reps`` will do.
    max_s: float
    ns: list[int]
    start_reps: int
    mem_method: str
    #: An adapter skips a size whose projected traced memory exceeds this,
    mem_limit_gib: float
    #: or whose batch of idle runs would take longer than this to start.
    start_limit_s: float
    #: What the tables show: wall time, or the worker's CPU time (steadier on a busy machine).
    clock: str = "wall"


FULL = Settings(
    ks=[10, 50, 200, 1000],
    reps=15,
    min_reps=5,
    sample_s=0.1,
    max_s=20.0,
    ns=[1000, 10000, 40000],
    start_reps=3,
    mem_method="tracemalloc",
    mem_limit_gib=6.0,
    start_limit_s=60.0,
)
QUICK = Settings(
    ks=[10, 50],
    reps=5,
    min_reps=3,
    sample_s=0.05,
    max_s=5.0,
    ns=[1000],
    start_reps=1,
    mem_method="tracemalloc",
    mem_limit_gib=6.0,
    start_limit_s=60.0,
)


@dataclass
class Row:
    name: str
    version: str = ""
    us: dict[int, float] = field(default_factory=dict)
    kib: dict[int, float] = field(default_factory=dict)
    start_us: dict[int, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Worker:
    """One adapter's ``worker.py serve`` process: a request in, a reply out."""

    def __init__(self, name: str, stderr: IO[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), name, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=ENV,
        )
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            if code == EXIT_SKIPPED:
                return {"skipped": "not installed"}
            return {"error": f"worker exited with status {code}"}
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _interleaved_time(workers: list[Worker], rows: dict[str, Row], s: Settings) -> None:
    """Round-robin samples at each K; an adapter drops out when it has enough."""
    for k in s.ks:
        _log(f"K={k}: warming {len(workers)} adapters ...")
        live = []
        for w in workers:
            try:
                w.ask(op="warm", k=k, sample_s=s.sample_s)
                live.append(w)
            except RuntimeError as exc:
                rows[w.name].note = f"failed at K={k}: {exc}"
                _log(rows[w.name].note)
        samples: dict[str, list[float]] = {w.name: [] for w in live}
        cpu: dict[str, list[float]] = {w.name: [] for w in live}
        spent: dict[str, float] = {w.name: 0.0 for w in live}
        started = time.perf_counter()
        turn = 0
        while live:
            # Rotate who goes first, so no adapter always follows the same one.
            order = live[turn % len(live) :] + live[: turn % len(live)]
            turn += 1
            for w in order:
                reply = w.ask(op="sample", k=k)
                samples[w.name].append(reply["us_per_call"])
                cpu[w.name].append(reply["cpu_us_per_call"])
                spent[w.name] += reply["s"]
            live = [
                w
                for w in live
                if len(samples[w.name]) < s.reps
                and not (len(samples[w.name]) >= s.min_reps and spent[w.name] > s.max_s)
            ]
        for name, values in samples.items():
            shown = values if s.clock == "wall" else cpu[name]
            rows[name].us[k] = statistics.median(shown)
            rows[name].detail.setdefault("time", []).append(
                {
                    "k": k,
                    "us_per_call": statistics.median(values),
                    "us_min": min(values),
                    "us_max": max(values),
                    "cpu_us_per_call": statistics.median(cpu[name]),
                    "samples": len(values),
                }
            )
        _log(f"K={k}: done in {time.perf_counter() - started:.0f} s")


def _interleaved_start(workers: list[Worker], rows: dict[str, Row], s: Settings) -> None:
    """Median start time per run of N idle runs, the adapters taking turns."""
    for n in s.ns:
        taking = [w for w in workers if n not in rows[w.name].detail.get("mem_skipped", [])]
        _log(f"N={n:,}: start times of {len(taking)} adapters ...")
        starts: dict[str, list[float]] = {w.name: [] for w in taking}
        for _ in range(s.start_reps):
            for w in taking:
                try:
                    starts[w.name].append(w.ask(op="start", n=n)["start_us_per_run"])
                except RuntimeError as exc:
                    rows[w.name].note = f"start failed at N={n}: {exc}"
        for name, values in starts.items():
            if values:
                rows[name].start_us[n] = statistics.median(values)


def _memory(name: str, row: Row, s: Settings, stderr: IO[str]) -> None:
    """KiB per idle run at each N, a fresh interpreter per N; skip sizes over the limits."""
    row.detail["mem_skipped"] = []
    for n in s.ns:
        if row.kib:
            last = row.detail["mem"][-1]
            projected_gib = last["kib_per_run"] * n / 1024**2 * 2  # x2: tracemalloc's own
            projected_s = last["start_us_per_run"] * n / 1e6
            if projected_gib > s.mem_limit_gib or projected_s > s.start_limit_s:
                row.detail["mem_skipped"].append(n)
                _log(
                    f"[{name}] N={n:,} skipped: would trace ~{projected_gib:.1f} GiB "
                    f"and take ~{projected_s:.0f} s to start"
                )
                continue
        cmd = [sys.executable, str(WORKER), name, "mem", "--ns", str(n), "--method", s.mem_method]
        try:
            proc = subprocess.run(
                cmd,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                timeout=WORKER_TIMEOUT_S,
                env=ENV,
            )
        except subprocess.TimeoutExpired:
            row.note = f"memory timed out at N={n}"
            return
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        payload: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        if proc.returncode != 0 or "mem" not in payload:
            row.note = f"memory failed at N={n}: {payload.get('error', proc.returncode)}"
            return
        (m,) = payload["mem"]
        row.kib[n] = m["kib_per_run"]
        row.detail.setdefault("mem", []).append(m)
    row.detail["mem_method"] = s.mem_method


def measure(names: list[str], s: Settings, stderr: IO[str]) -> list[Row]:
    rows = {name: Row(name) for name in names}
    for name in names:
        _log(f"[{name}] memory at N={', '.join(f'{n:,}' for n in s.ns)} ...")
        _memory(name, rows[name], s, stderr)
    workers: list[Worker] = []
    try:
        for name in names:
            w = Worker(name, stderr)
            if "ready" in w.hello:
                rows[name].version = w.hello["version"]
                workers.append(w)
            else:
                reason = w.hello.get("skipped") or w.hello.get("error")
                kind = "skipped" if "skipped" in w.hello else "failed"
                rows[name].note = f"{kind}: {reason}"
                rows[name].kib.clear()
                w.close()
        _interleaved_time(workers, rows, s)
        _interleaved_start(workers, rows, s)
    finally:
        for w in workers:
            w.close()
    return [rows[n] for n in names]


def _fmt_us(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _fmt_ratio(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}\u00d7" if v < 10 else f"{v:,.0f}\u00d7"  # a multiplication sign


def _ratio(row: Row, ref: Row | None, k: int) -> float | None:
    if ref is None or k not in row.us or k not in ref.us or ref.us[k] <= 0:
        return None
    return row.us[k] / ref.us[k]


def tables(
    rows: list[Row], s: Settings
) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """Headers and cells of the main table and the ratio table."""
    by_name = {r.name: r for r in rows}
    big = max(s.ns)
    head = ["library", "version"]
    head += [f"µs/call K={k}" for k in s.ks]
    head += [f"KiB/run @{n:,}" for n in s.ns]
    head += [f"start µs/run @{big:,}"]
    body: list[list[str]] = []
    for r in rows:
        if r.note and not r.us:
            short = "(skipped)" if r.note.startswith("skipped") else "(failed)"
            body.append([r.name, short] + ["-"] * (len(s.ks) + len(s.ns) + 1))
            continue
        cells = [r.name, r.version]
        cells += [_fmt_us(r.us.get(k)) for k in s.ks]
        cells += [f"{r.kib[n]:,.1f}" if n in r.kib else "-" for n in s.ns]
        cells += [_fmt_us(r.start_us.get(big))]
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


def markdown(rows: list[Row], s: Settings) -> str:
    """The README's table: µs per call at each K, memory and start time of idle runs."""
    big = max(s.ns)
    head = ["library", "version", *(f"µs/call K={k}" for k in s.ks)]
    head += [f"÷ {ref} (K={s.ks[-1]})" for ref in FLOORS]
    head += [f"KiB per idle run ({' / '.join(f'{n:,}' for n in s.ns)})", f"start µs/run @{big:,}"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    by_name = {r.name: r for r in rows}
    for r in rows:
        if not r.us:
            continue
        cells = [LABELS.get(r.name, r.name), r.version.replace(" (tree)", "")]
        cells += [_fmt_us(r.us.get(k)) for k in s.ks]
        cells += [_fmt_ratio(_ratio(r, by_name.get(ref), s.ks[-1])) for ref in FLOORS]
        cells += [" / ".join(f"{r.kib[n]:,.1f}" if n in r.kib else "-" for n in s.ns)]
        cells += [_fmt_us(r.start_us.get(big))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    title = f"Per-model-call overhead (median µs, {s.clock} time, interleaved) and idle runs"
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
        console = Console(width=None if sys.stdout.isatty() else 160)
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
        "load_average": os.getloadavg(),
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
    parser.add_argument("--ks", help="comma-separated K to time (default: 10,50,200,1000)")
    parser.add_argument("--ns", help="comma-separated idle-run counts (default: 1000,10000,40000)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--mem-method",
        choices=("tracemalloc", "rss"),
        help="how idle memory is measured (default: tracemalloc)",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time the tables show: wall (default) or the worker's CPU time",
    )
    parser.add_argument("--plain", action="store_true", help="plain-text tables, no rich")
    parser.add_argument("--markdown", action="store_true", help="also print the README's table")
    parser.add_argument(
        "--profile", metavar="NAME", help="profile one adapter with pyinstrument at K=200 and exit"
    )
    args = parser.parse_args(argv)

    if args.profile:
        return subprocess.call([sys.executable, str(WORKER), args.profile, "profile"])

    settings = QUICK if args.quick else FULL
    settings.clock = args.clock
    if args.mem_method:
        settings.mem_method = args.mem_method
    if args.ks:
        settings.ks = [int(k) for k in args.ks.split(",")]
    if args.ns:
        settings.ns = [int(n) for n in args.ns.split(",")]
    names = list(ADAPTERS)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in ADAPTERS]
        if unknown:
            parser.error(f"unknown adapter(s): {', '.join(unknown)}; known: {', '.join(ADAPTERS)}")
        names = [n for n in ADAPTERS if n in wanted]

    started = time.perf_counter()
    env_before = environment()
    with tempfile.TemporaryFile("w+") as stderr:
        rows = measure(names, settings, stderr)
        stderr.seek(0)
        errors = stderr.read()
    _log(f"total {time.perf_counter() - started:.0f} s")
    render(rows, settings, args.plain)
    if args.markdown:
        print()
        print(markdown(rows, settings))
    failed = [r for r in rows if r.note and not r.note.startswith("skipped")]
    if failed and errors:
        _log(errors[-4000:])

    if args.json:
        out = {
            "settings": vars(settings) | {"quick": args.quick},
            "environment": env_before | {"load_average_after": os.getloadavg()},
            "results": [
                {
                    "name": r.name,
                    "version": r.version,
                    "note": r.note,
                    "us_per_call": {str(k): v for k, v in r.us.items()},
                    "kib_per_idle_run": {str(n): v for n, v in r.kib.items()},
                    "start_us_per_run": {str(n): v for n, v in r.start_us.items()},
                    "detail": r.detail,
                }
                for r in rows
            ],
        }
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        _log(f"wrote {args.json}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
