"""The crash worker, traced: its finished spans are written to a file as they end.

    python -m tests._otel_worker SPANS MODE DB LOG RUN_ID      (from the repository root)

SPANS is a JSON-lines file, one finished span a line, written as each span ends, so
what a killed process finished is there. MODE and the rest are the crash worker's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from agentfsm import otel
from tests import _crash_worker


class JsonLinesExporter(SpanExporter):
    """Each span as one line of JSON: ids in hex, its parent and links, its attributes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as out:
            for span in spans:
                assert span.context is not None
                out.write(json.dumps(describe(span)) + "\n")
        return SpanExportResult.SUCCESS


def describe(span: ReadableSpan) -> dict[str, object]:
    assert span.context is not None
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent": f"{span.parent.span_id:016x}" if span.parent else None,
        "links": [
            [f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"] for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
    }


def main(argv: Sequence[str]) -> int:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(Path(argv[0]))))
    otel.instrument(provider)
    return _crash_worker.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
