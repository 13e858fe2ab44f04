"""agentfsm.serve's cost on a streamed reply: events per second, and the latency it adds
to each token against the bare provider stream.

    python benchmarks/serve.py [--tokens 2000] [--gap 0.002] [--repeat 3]

One uvicorn server on loopback serves two endpoints over the same model: ``/bare``
streams the model's pieces straight out as SSE (what a hand-written endpoint over the
provider's stream does), and ``/`` is ``agentfsm.serve``'s AG-UI app (the standard
machine, the run saved to a SQLite store, every event built with ``ag_ui.core``'s
models). The model streams ``--tokens`` pieces, ``--gap`` seconds apart, and notes
when it handed each one out; the client (httpx, in the same process) notes when each
arrived. Latency per token is arrival minus hand-out, so both sides read one clock.
Events per second is a gap-0 run's whole stream (steps, state, text, end) over its
wall time. It prints one table of medians over ``--repeat`` runs. Run it by hand; no
test times anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import StreamingResponse  # noqa: E402

from agentfsm import Agent, Message, MessageDelta  # noqa: E402
from agentfsm.serve import create_app  # noqa: E402


class Streamer:
    """A model that streams ``tokens`` pieces ``gap`` seconds apart, noting when each left."""

    name = "bench:streamer"
    provider_name = "bench"

    def __init__(self, tokens: int, gap: float) -> None:
        self.tokens = tokens
        self.gap = gap
        self.sent: dict[int, float] = {}

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any],
        *,
        on_delta: Callable[[MessageDelta], None] | None = None,
    ) -> Message:
        for i in range(self.tokens):
            if self.gap:
                await asyncio.sleep(self.gap)
            elif i % 64 == 0:
                await asyncio.sleep(0)
            self.sent[i] = time.perf_counter()
            if on_delta is not None:
                on_delta(MessageDelta(content=f"t{i} "))
        return Message.assistant("".join(f"t{i} " for i in range(self.tokens)))


def build(model: Streamer, db: str) -> Any:
    app = create_app(Agent(model), db, max_body=1 << 20)

    async def bare(_: Request) -> StreamingResponse:
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def produce() -> None:
            await model.complete([], [], on_delta=lambda d: queue.put_nowait(d.content))
            queue.put_nowait(None)

        async def stream() -> AsyncIterator[str]:
            task = asyncio.create_task(produce())
            n = 0
            while (piece := await queue.get()) is not None:
                n += 1
                yield f"id: {n}\ndata: {json.dumps({'delta': piece})}\n\n"
            await task

        return StreamingResponse(stream(), media_type="text/event-stream")

    app.add_route("/bare", bare, methods=["POST"])
    return app


def given(run_id: str) -> str:
    return json.dumps(
        {
            "threadId": "bench",
            "runId": run_id,
            "messages": [{"id": "u", "role": "user", "content": "go"}],
            "state": {},
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
    )


def read(base: str, path: str, body: str) -> tuple[dict[int, float], int, float]:
    """Arrival time of each token, the events read, and the stream's wall time."""
    arrived: dict[int, float] = {}
    events = 0
    started = time.perf_counter()
    headers = {"content-type": "application/json"}
    with httpx.stream("POST", base + path, content=body, headers=headers, timeout=120) as r:
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            events += 1
            now = time.perf_counter()
            delta = json.loads(line[6:]).get("delta")
            if isinstance(delta, str) and delta.startswith("t"):
                arrived[int(delta[1:].strip())] = now
    return arrived, events, time.perf_counter() - started


def latency(model: Streamer, arrived: dict[int, float]) -> list[float]:
    return [(arrived[i] - model.sent[i]) * 1e6 for i in sorted(arrived)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--gap", type=float, default=0.002, help="seconds between tokens")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    model = Streamer(args.tokens, 0.0)
    folder = tempfile.mkdtemp(prefix="agentfsm-serve-bench-")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(build(model, folder + "/runs.db"), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)

    rows: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    for r in range(args.repeat):
        model.gap = 0.0
        _, events, wall = read(base, "/bare", "{}")
        note("bare: events/s (gap 0)", events / wall)
        _, events, wall = read(base, "/", given(f"fast-{r}"))
        note("served: events/s (gap 0)", events / wall)
        note("served: events per run", events)
        model.gap = args.gap
        arrived, _, _ = read(base, "/bare", "{}")
        bare = latency(model, arrived)
        arrived, _, _ = read(base, "/", given(f"gap-{r}"))
        served = latency(model, arrived)
        assert len(served) == len(bare) == args.tokens
        note("bare: token latency median (us)", statistics.median(bare))
        note("served: token latency median (us)", statistics.median(served))
        note("bare: token latency p95 (us)", statistics.quantiles(bare, n=20)[-1])
        note("served: token latency p95 (us)", statistics.quantiles(served, n=20)[-1])
        note(
            "added per token, median (us)",
            statistics.median(s - b for s, b in zip(served, bare, strict=True)),
        )
    server.should_exit = True

    print(f"{args.tokens} tokens, gap {args.gap * 1000:g} ms, median of {args.repeat}")
    print(f"| {'measure':<36} | {'value':>10} |")
    print(f"| {'-' * 36} | {'-' * 10}:|")
    for name, values in rows.items():
        print(f"| {name:<36} | {statistics.median(values):>10.1f} |")


if __name__ == "__main__":
    main()
