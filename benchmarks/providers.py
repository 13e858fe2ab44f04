"""Provider transport costs, run by hand: ``python benchmarks/providers.py``.

* SSE decoding of one 10 MB line with no newline, fed in 4 KiB chunks (as a
  server that never ends its line would send it): seconds, best of 3.
* Calls on a reused keep-alive connection to a loopback server with Nagle on
  (Python's http.server), streamed and not: median milliseconds per call, 40
  calls back to back, next to a plain httpx loop (a new connection per call).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm import Message
from agentfsm.providers import OpenAIChat
from agentfsm.providers._sse import SSEDecoder
from tests.providers.fake_server import FakeServer, Reply, sse
from tests.providers.openai_wire import chunk, completion


def decode_long_line(size: int = 10_000_000, piece: int = 4096) -> float:
    best = float("inf")
    data = b"x" * piece
    for _ in range(3):
        decoder = SSEDecoder()
        started = time.perf_counter()
        decoder.feed(b"data: ")
        for _ in range(size // piece):
            decoder.feed(data)
        decoder.feed(b"\n\n")
        best = min(best, time.perf_counter() - started)
    return best


async def plain_calls(calls: int = 40) -> float:
    server = FakeServer()
    server.default = Reply(json=completion("hi"))
    model = OpenAIChat("m", api_key="k", base_url=server.url)
    hello = [Message.user("hi")]
    try:
        await model.complete(hello, [])
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            await model.complete(hello, [])
            times.append(time.perf_counter() - started)
    finally:
        await model.aclose()
        server.close()
    return statistics.median(times) * 1000


async def streamed_calls(calls: int = 40, events: int = 5) -> tuple[float, float, int]:
    server = FakeServer()
    pieces = [chunk(content="hi") for _ in range(events)]
    server.default = Reply(events=sse(*pieces, chunk(finish_reason="stop"), "[DONE]"))
    model = OpenAIChat("m", api_key="k", base_url=server.url, stream=True)
    hello = [Message.user("hi")]
    try:
        await model.complete(hello, [])
        ours = []
        for _ in range(calls):
            started = time.perf_counter()
            await model.complete(hello, [])
            ours.append(time.perf_counter() - started)
        ports = {r.client_port for r in server.requests}
        plain = []
        async with httpx.AsyncClient() as client:
            for _ in range(calls):
                started = time.perf_counter()
                url = server.url + "/chat/completions"
                async with client.stream("POST", url, json={}) as response:
                    async for line in response.aiter_lines():
                        if line == "data: [DONE]":
                            break
                plain.append(time.perf_counter() - started)
    finally:
        await model.aclose()
        server.close()
    return statistics.median(ours) * 1000, statistics.median(plain) * 1000, len(ports)


def main() -> None:
    line = decode_long_line()
    ours, plain, connections = asyncio.run(streamed_calls())
    json_call = asyncio.run(plain_calls())
    print("| measure | value |")
    print("|---|---:|")
    print(f"| decode a 10 MB SSE line in 4 KiB chunks (s, best of 3) | {line:.3f} |")
    print(f"| streamed call, reused connection, Nagle server (ms, median) | {ours:.1f} |")
    print(f"| non-streamed call, reused connection, Nagle server (ms, median) | {json_call:.1f} |")
    print(f"| plain httpx loop, new connection per call (ms, median) | {plain:.1f} |")
    print(f"| connections our 41 calls used | {connections} |")


if __name__ == "__main__":
    main()
