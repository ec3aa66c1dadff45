"""Optional OpenTelemetry tracing: a span per model API request, per upstream call and per storage call.

Off by default. `[tracing] enabled = true` needs the `otel` extra (opentelemetry-sdk and the OTLP/HTTP
exporter); the config loader refuses the file when they are missing, so this module only imports them
once tracing is on. Spans go to the OTLP endpoint of the standard `OTEL_EXPORTER_OTLP_*` environment
variables (default http://localhost:4318). A process that already installed an SDK tracer provider (e.g.
under `opentelemetry-instrument`) keeps it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelgate.config import TracingConfig

if TYPE_CHECKING:
    from modelgate.proxy.pipeline.context import RequestContext
    from modelgate.proxy.upstream.providers import StreamedBody, Upstream, UpstreamResponse
    from modelgate.storage.database import Database, NotifyHandler, Transaction

log = logging.getLogger("modelgate.tracing")


@dataclass(slots=True)
class RequestSpan:
    """The open span of one request and the context token that made it current."""

    span: Any
    token: Any  # OpenTelemetry's context token (its SDK is the optional `otel` extra)


class Tracer:
    """Starts the gateway's spans; built once per process when `[tracing] enabled = true`."""

    def __init__(self, config: TracingConfig) -> None:
        from opentelemetry import context, trace
        from opentelemetry.sdk.trace import TracerProvider

        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(provider)
        self._provider = provider
        self._tracer = provider.get_tracer("modelgate")
        self._trace = trace
        self._context = context
        log.info("tracing on: service %s, provider %s", config.service_name, type(provider).__name__)

    def start_request(self, ctx: RequestContext) -> RequestSpan:
        """Open the request's span and make it the parent of the upstream and storage spans under it."""
        request = ctx.request
        span = self._tracer.start_span(
            f"{request.method} {request.path}",
            kind=self._trace.SpanKind.SERVER,
            attributes={
                "http.request.method": request.method,
                "url.path": request.path,
                "modelgate.request_id": ctx.request_id,
            },
        )
        token = self._context.attach(self._trace.set_span_in_context(span))
        return RequestSpan(span, token)

    def end_request(self, opened: RequestSpan, ctx: RequestContext) -> None:
        span = opened.span
        span.set_attribute("http.response.status_code", ctx.status)
        span.set_attribute("modelgate.attempts", ctx.attempts)
        if ctx.route is not None:
            span.set_attribute("modelgate.route", ctx.route.name)
        if ctx.model is not None:
            span.set_attribute("modelgate.model", ctx.model.name)
        if ctx.row is not None:
            span.set_attribute("modelgate.row", ctx.row.key)
        if ctx.key is not None:
            span.set_attribute("modelgate.organization_id", ctx.key.organization_id)
        if ctx.metering.usage is not None:
            span.set_attribute("modelgate.input_tokens", ctx.metering.usage.input_tokens)
            span.set_attribute("modelgate.output_tokens", ctx.metering.usage.output_tokens)
        if ctx.status >= 500:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.end()
        try:
            self._context.detach(opened.token)
        except Exception:  # a context from another task; the span is ended all the same
            log.debug("could not detach the request span context of %s", ctx.request_id)

    def span(self, name: str, kind: str, attributes: dict[str, Any]) -> Any:
        """A span as a context manager, current while it is open (kind: "client" or "internal")."""
        span_kind = self._trace.SpanKind.CLIENT if kind == "client" else self._trace.SpanKind.INTERNAL
        return self._tracer.start_as_current_span(name, kind=span_kind, attributes=attributes)

    def traced_upstream(self, upstream: Upstream) -> Upstream:
        return TracedUpstream(upstream, self)

    def traced_database(self, db: Database) -> Database:
        return TracedDatabase(db, self)

    async def flush(self) -> None:
        """Export what is buffered (called on shutdown; the SDK also flushes at process exit)."""
        await asyncio.to_thread(self._provider.force_flush, 5000)


class TracedUpstream:
    """An upstream client whose calls are spans: from sending the request to the answer's head."""

    def __init__(self, upstream: Upstream, tracer: Tracer) -> None:
        self._upstream = upstream
        self._tracer = tracer
        self.name = upstream.name
        self.kind = upstream.kind
        self.host = upstream.host
        self.native_messages = upstream.native_messages
        self.native_responses = upstream.native_responses
        self.pool = upstream.pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._upstream, name)

    async def send(
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> UpstreamResponse:
        attributes = {"modelgate.provider": self.name, "http.request.method": method, "url.path": path}
        with self._tracer.span(f"upstream {self.name}", "client", attributes) as span:
            response = await self._upstream.send(method, path, body, request_id, client_headers)
            span.set_attribute("http.response.status_code", response.status)
            return response

    async def close(self) -> None:
        await self._upstream.close()


class TracedDatabase:
    """The database with a span per query and per transaction (statements only, never parameters)."""

    def __init__(self, db: Database, tracer: Tracer) -> None:
        self._db = db
        self._tracer = tracer
        self.dialect = db.dialect

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def _span(self, operation: str, sql: str) -> Any:
        attributes = {"db.system": self.dialect, "db.operation": operation, "db.statement": sql[:500]}
        return self._tracer.span(f"db {operation}", "client", attributes)

    async def execute(self, sql: str, *args: Any) -> Any:
        with self._span("execute", sql):
            return await self._db.execute(sql, *args)

    async def fetch(self, sql: str, *args: Any) -> Any:
        with self._span("fetch", sql):
            return await self._db.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        with self._span("fetchrow", sql):
            return await self._db.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        with self._span("fetchval", sql):
            return await self._db.fetchval(sql, *args)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        with self._tracer.span("db transaction", "client", {"db.system": self.dialect}):
            async with self._db.transaction() as tx:
                yield tx

    # Not traced: the pool's own upkeep and notifications.
    async def ping(self) -> None:
        await self._db.ping()

    async def close(self) -> None:
        await self._db.close()

    async def notify(self, channel: str, payload: str) -> None:
        await self._db.notify(channel, payload)

    async def listen(self, channel: str, handler: NotifyHandler) -> None:
        await self._db.listen(channel, handler)

    def on_listen_restored(self, callback: Callable[[], None]) -> None:
        self._db.on_listen_restored(callback)

    def on_listen_lost(self, callback: Callable[[], None]) -> None:
        self._db.on_listen_lost(callback)

    async def execute_on_listener(self, sql: str, *args: Any) -> None:
        await self._db.execute_on_listener(sql, *args)
