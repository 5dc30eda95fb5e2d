"""A traced consumer in a process of its own, for cross-process trace tests.

Run from the repository root::

    python -m tests.support.traced_consumer_process --store-url URL --spans FILE --attempts N

Group ``billing`` consumes topic ``orders`` from the first offset with OpenTelemetry tracing on
an SDK provider of its own; the handler asks for a retry (``RetryLater(delay_level=1)``) until a
message's ``N``-th attempt, which succeeds. Once a message succeeded the app stops, and every
finished span is written to ``FILE`` as one JSON object per line (name, kind, hex trace, span and
parent ids, attributes, event names); then the process exits 0.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from postbox.framework import App, ConsumerOptions, RetryLater
from postbox.framework.tracing import Tracing

OPTIONS = ConsumerOptions(long_polling_ms=200, rebalance_interval_ms=200,
                          persist_interval_ms=200)
DONE_TIMEOUT_S = 60


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to a file as one JSON line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(span_json(span)) + "\n")
        return SpanExportResult.SUCCESS


def span_json(span: ReadableSpan) -> dict[str, object]:
    context = span.get_span_context()
    return {"name": span.name, "kind": span.kind.name, "trace_id": f"{context.trace_id:032x}",
            "span_id": f"{context.span_id:016x}",
            "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
            "attributes": dict(span.attributes or {}),
            "events": [event.name for event in span.events]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--spans", required=True, type=Path)
    parser.add_argument("--attempts", type=int, default=1)
    args = parser.parse_args()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(args.spans)))
    app = App(store_url=args.store_url, consumer_options=OPTIONS, tracing=Tracing(provider))
    done = threading.Event()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    def bill(message) -> None:
        if message.reconsume_count + 1 < args.attempts:
            raise RetryLater(delay_level=1, reason="not yet")
        done.set()

    with app:
        if not done.wait(DONE_TIMEOUT_S):
            raise SystemExit("no message succeeded in time")
    provider.shutdown()


if __name__ == "__main__":
    main()
