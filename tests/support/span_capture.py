"""Spans of this process's OpenTelemetry SDK provider, kept in memory for a test to read.

OpenTelemetry lets a process install its global provider once; a later `set_tracer_provider` is ignored with a
warning, and the gateway's Tracer keeps whatever provider is installed. So the exporter is added to the SDK
provider already installed (by an earlier test or an earlier gateway), and a provider is installed only
when there is none: the spans are captured whichever test of the process ran first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def captured_spans() -> Iterator[Any]:
    """An InMemorySpanExporter fed by the process's provider until the block ends."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        exporter.shutdown()  # later spans of the process are not kept
