"""Request tracing: the first step opens the request's span, completion closes it with what the request
became (route, model, row, status, tokens); without a tracer the plugin does nothing.

The spans are read from the process's OpenTelemetry SDK provider (the Tracer keeps one already installed):
one is installed for this module when none is, and an in-memory exporter is added to it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from modelgate.plugins.tracing import RequestTracing
from modelgate.proxy.observability.tracing import Tracer
from modelgate.proxy.pipeline.context import Usage
from tests.support.plugin_context import CHAT, PluginServices, StoredKey, answered, context_before
from tests.support.span_capture import captured_spans


@pytest.fixture(scope="module")
def spans() -> Iterator:
    with captured_spans() as exporter:
        yield exporter


async def _traced(services: PluginServices, key: StoredKey, spans):
    tracer = RequestTracing(Tracer(services.config.tracing))
    ctx = await context_before("tracing", services, payload=CHAT, key=key.record)
    spans.clear()
    return tracer, ctx


def _mine(spans, request_id: str) -> list:
    return [s for s in spans.get_finished_spans() if s.attributes.get("modelgate.request_id") == request_id]


async def test_a_request_span_closes_with_what_the_request_became(
    services: PluginServices, key: StoredKey, spans
) -> None:
    plugin = RequestTracing(Tracer(services.config.tracing))
    # The span opens on the request alone; the rest of the context is filled in by the time it completes.
    ctx = await context_before("access_log", services, payload=CHAT, key=key.record)
    plugin.on_request(ctx)
    answered(ctx, body=b"{}")
    ctx.metering.usage = Usage(input_tokens=12, output_tokens=5)

    plugin.on_complete(ctx)

    (span,) = _mine(spans, ctx.request_id)
    assert span.name == "POST /v1/chat/completions"
    assert {name: span.attributes[name] for name in span.attributes if name.startswith("modelgate.")} == {
        "modelgate.request_id": ctx.request_id,
        "modelgate.attempts": 1,
        "modelgate.route": "chat_completions",
        "modelgate.model": "gpt-test",
        "modelgate.row": "openai/gpt-test-2025@openai.test",
        "modelgate.organization_id": key.record.organization_id,
        "modelgate.input_tokens": 12,
        "modelgate.output_tokens": 5,
    }
    assert span.attributes["http.response.status_code"] == 200


async def test_the_span_stays_open_until_the_request_completes(
    services: PluginServices, key: StoredKey, spans
) -> None:
    plugin, ctx = await _traced(services, key, spans)

    plugin.on_request(ctx)

    assert _mine(spans, ctx.request_id) == []
    plugin.on_complete(ctx)
    assert len(_mine(spans, ctx.request_id)) == 1


async def test_a_server_error_marks_the_span_failed(services: PluginServices, key: StoredKey, spans) -> None:
    from opentelemetry.trace import StatusCode

    plugin, ctx = await _traced(services, key, spans)
    plugin.on_request(ctx)
    ctx.status = 502

    plugin.on_complete(ctx)

    (span,) = _mine(spans, ctx.request_id)
    assert span.status.status_code is StatusCode.ERROR


async def test_without_a_tracer_nothing_is_recorded(services: PluginServices, key: StoredKey, spans) -> None:
    plugin = RequestTracing(None)
    ctx = await context_before("tracing", services, payload=CHAT, key=key.record)
    spans.clear()

    plugin.on_request(ctx)
    plugin.on_complete(ctx)

    assert spans.get_finished_spans() == ()
