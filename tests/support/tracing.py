"""Recording OpenTelemetry spans in tests: the SDK's in-memory exporter on a provider of its own.

``SpanRecorder`` holds a ``TracerProvider`` whose ``SimpleSpanProcessor`` exports every span to
an ``InMemorySpanExporter`` as it ends, and a ``MeterProvider`` read by an
``InMemoryMetricReader`` (``histogram``). Tests hand ``recorder.tracing`` (a
``framework.tracing.Tracing`` on those providers) to their apps, so nothing depends on the
process's global providers (which can be set only once per process). Fixture ``spans`` makes
one per test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from postbox.framework.tracing import Tracing
from tests.support.polling import wait_until


class SpanRecorder:
    """A provider that keeps every finished span."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.metric_reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metric_reader])
        self.tracing = Tracing(self.provider, meter_provider=self.meter_provider)
        self.tracer: Tracer = self.provider.get_tracer("tests")

    def finished(self) -> list[ReadableSpan]:
        """The spans that ended, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        """The finished spans called ``name``."""
        return [span for span in self.finished() if span.name == name]

    def wait_for(self, name: str, count: int = 1) -> list[ReadableSpan]:
        """Wait until ``count`` spans called ``name`` ended; return them."""
        wait_until(lambda: len(self.named(name)) >= count, what=f"{count} {name!r} spans",
                   detail=lambda: [span.name for span in self.finished()])
        return self.named(name)

    def histogram(self, name: str) -> list[HistogramDataPoint]:
        """The data points (one per attribute set) of the histogram ``name`` so far, with its
        unit checked to be seconds."""
        points: list[HistogramDataPoint] = []
        data = self.metric_reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        assert metric.unit == "s", f"{name} is in {metric.unit!r}, not seconds"
                        points.extend(metric.data.data_points)  # type: ignore[arg-type]
        return points

    def shutdown(self) -> None:
        self.provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def spans() -> Iterator[SpanRecorder]:
    recorder = SpanRecorder()
    yield recorder
    recorder.shutdown()


def parent_id(span: ReadableSpan) -> int | None:
    """The span id of ``span``'s parent, or None for a root."""
    return span.parent.span_id if span.parent is not None else None


def traceparent_of(span: ReadableSpan) -> str:
    """The W3C ``traceparent`` value naming ``span``."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
