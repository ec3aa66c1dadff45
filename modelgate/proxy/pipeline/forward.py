"""Forwarding to the chosen row: the row loop, with failover before the first byte; then the answer's head
through the chain, and its body in one piece or through the stream relay (modelgate/proxy/pipeline/
stream_relay.py).

Failover happens on connect errors, timeouts, 5xx and 429 from the provider, and on 401/403 (our provider
credentials, not the client's fault) — as long as nothing has reached the client. Other upstream 4xx are the
client's fault and are passed on with their status in our envelope.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from urllib.parse import quote

import aiohttp
import orjson
from aiohttp import web

from modelgate.domain.errors import (
    InvalidRequest,
    ServiceUnavailable,
    UpstreamClientError,
    UpstreamUnavailable,
)
from modelgate.proxy.http.front_request import FrontStream
from modelgate.proxy.pipeline.chain import PluginChain
from modelgate.proxy.pipeline.context import AnswerHead, RequestContext
from modelgate.proxy.pipeline.envelopes import stamp_request_id
from modelgate.proxy.pipeline.failover import RowAttempts
from modelgate.proxy.pipeline.stream_relay import StreamRelay
from modelgate.proxy.translation import Translator, translator_for
from modelgate.proxy.translation.field_rules import FieldRefused
from modelgate.proxy.upstream.http_client import UpstreamBrokeOff
from modelgate.proxy.upstream.model_rows import ModelEntry, RoutingRow, RowSelector
from modelgate.proxy.upstream.providers import (
    StreamedBody,
    UpstreamFailure,
    UpstreamResponse,
    UpstreamSaturated,
)

# Upstream response headers worth passing on; provider account details and hop-by-hop headers stay behind.
_PASS_HEADERS = ("content-type", "cache-control", "openai-processing-ms", "openai-version", "retry-after")
_MAX_ERROR_BODY = 64 * 1024
_STREAMED_TYPES = ("text/event-stream", "audio/", "video/", "image/", "application/octet-stream")
# When every row's connection cap was full: a client (or load balancer) may try again this soon.
_SATURATED_RETRY_AFTER = {"retry-after": "1"}


def _failover_status(status: int, has_object_id: bool) -> bool:
    if status >= 500 or status in (401, 403, 408, 429):
        return True
    # A model missing at the provider is a configuration fault of that row; a missing object is not.
    return status == 404 and not has_object_id


def _naming_provider(refusal: InvalidRequest, row: RoutingRow) -> InvalidRequest:
    """A refused field (docs/translation-fields.md) names the provider of the row that refused it."""
    return refusal.for_provider(row.provider) if isinstance(refusal, FieldRefused) else refusal


def _nested_too_deeply() -> InvalidRequest:
    # orjson parses 1024 levels but encodes only 254: a body rebuilt for the row (model rewrite, provider
    # object removed, translation) can fail to encode, which is the client's input, not a gateway fault.
    return InvalidRequest("request body is nested too deeply to forward (at most 254 levels)")


def _client_error(
    status: int, body: bytes, upstream_model: str, model: ModelEntry | None
) -> UpstreamClientError:
    message, type_a, code = f"upstream rejected the request with status {status}", None, None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            message = error["message"]
        if isinstance(error.get("type"), str) and isinstance(parsed, dict) and parsed.get("type") != "error":
            type_a = error["type"]
        if isinstance(error.get("code"), str):
            code = error["code"]
    if model is not None and upstream_model != model.name:
        message = message.replace(upstream_model, model.name)  # the row's name for the model stays inside
    return UpstreamClientError(status, message, type_a=type_a, code=code)


class Forwarder:
    """Sends the request to the best row and relays its answer."""

    def __init__(self, chain: PluginChain, selector: RowSelector, *, expose_provider: bool = False) -> None:
        self._chain = chain
        self._streams = StreamRelay(chain)
        self._selector = selector
        # server.expose_provider_header: the row's provider is the operator's business unless it says so.
        self._expose_provider = expose_provider

    async def forward(self, ctx: RequestContext) -> web.StreamResponse | FrontStream:
        # A body relayed as it arrives cannot be replayed to another row: one try.
        attempts = RowAttempts(self._selector, ctx, most=1 if ctx.body_stream is not None else None)
        route, request = ctx.matched_route, ctx.request
        path = route.upstream_path
        if route.has_id:
            path = path.replace("{id}", quote(ctx.object_id or "", safe=""))
            if request.query_string:  # e.g. GET /v1/videos/{id}/content?variant=thumbnail
                path += "?" + request.rel_url.raw_query_string
        try:
            body_template = ctx.upstream_body() if route.body.value != "none" else None
        except orjson.JSONEncodeError:
            raise _nested_too_deeply() from None
        failed = saturated = False
        translation_refusal: InvalidRequest | None = None
        for row in attempts:
            translator = translator_for(
                route.name, row.upstream.kind, row.upstream.native_messages, row.upstream.native_responses
            )
            try:
                if translator is None:
                    row_path, body = path, self._body_for(ctx, row, body_template)
                else:
                    row_path = translator.upstream_path
                    body = translator.request_body(
                        ctx.json_payload, row.upstream_model, ctx.routed_model.config.default_max_tokens
                    )
            except orjson.JSONEncodeError:
                raise _nested_too_deeply() from None
            except InvalidRequest as refusal:
                # This row's wire format cannot carry the request (e.g. a document block on an OpenAI-kind
                # row); another row may speak it natively. Not a row failure: no cool-down.
                translation_refusal = _naming_provider(refusal, row)
                continue
            try:
                upstream = await row.upstream.send(
                    request.method, row_path, body, ctx.request_id, request.headers
                )
            except UpstreamSaturated as exc:
                # The operator's cap on this row's connections is full: the provider is not at fault (no
                # cool-down), and another row may have room.
                saturated = True
                attempts.cannot_carry(row, "pool_full", f"had no free connection: {exc}")
                continue
            except UpstreamFailure as exc:
                if ctx.body_stream is not None and ctx.body_stream.error is not None:
                    # The client's body broke a limit mid-upload and we aborted it: not the row's fault.
                    raise ctx.body_stream.error from None
                failed = True
                attempts.failed(row, "unreachable", "could not be reached", exc.__cause__ or exc)
                continue
            except InvalidRequest as refusal:
                # The row's host cannot serve this route or request (its dialect has no such call): another
                # row may. Not a row failure: no cool-down.
                translation_refusal = _naming_provider(refusal, row)
                continue
            status = upstream.status
            ctx.credential = upstream.credential
            if _failover_status(status, route.has_id):
                failed = True
                upstream.close()
                attempts.failed(row, f"http_{status}", f"answered HTTP {status}")
                continue
            if status >= 400:
                attempts.succeeded(row)
                ctx.row, ctx.status = row, status
                try:
                    error_body = await upstream.content.read(_MAX_ERROR_BODY)
                finally:
                    upstream.close()
                raise _client_error(status, error_body, row.upstream_model, ctx.model)
            # Nothing is sent to the client before the answer's first bytes are in: a row that breaks off
            # before then is failed over like one that never answered.
            try:
                reading, rest = _opening(ctx, upstream)
                opening = await reading
            except (aiohttp.ClientError, UpstreamBrokeOff, TimeoutError) as exc:
                failed = True
                upstream.close()
                attempts.failed(row, "broke_off", "broke off before the first bytes of its answer", exc)
                continue
            except BaseException:  # the client went away meanwhile: let go of the provider at once
                upstream.close()
                raise
            attempts.succeeded(row)
            ctx.row, ctx.status = row, status
            # No failover from here on: a stream may stay open for minutes, holding no copy of the body
            # built for the row (a row that renames the model, or a translated one, has its own).
            body = body_template = None
            return await self._relay(ctx, upstream, translator, opening, rest)
        if translation_refusal is not None and not failed and not saturated:
            raise translation_refusal  # no row could carry the request: the client's 400, not an outage
        if saturated:  # the gateway's own capacity, not the provider, ran out: 503, come back shortly
            raise ServiceUnavailable(headers=_SATURATED_RETRY_AFTER)
        raise UpstreamUnavailable()

    def _body_for(
        self, ctx: RequestContext, row: RoutingRow, template: bytes | None
    ) -> bytes | StreamedBody | None:
        if ctx.body_stream is not None:
            ctx.body_stream.rewrite_model(row.upstream_model)
            return ctx.body_stream
        payload = ctx.payload
        if template is None or payload is None or ctx.matched_route.body.value == "multipart":
            return template
        if payload.get("model") == row.upstream_model or "model" not in payload:
            return template
        # Rows may name the model differently upstream; the client's name never leaves the gateway.
        return orjson.dumps({**payload, "model": row.upstream_model})

    async def _relay(
        self,
        ctx: RequestContext,
        upstream: UpstreamResponse,
        translator: Translator | None,
        opening: bytes,
        rest: AsyncIterator[bytes] | None,
    ) -> web.StreamResponse | FrontStream:
        """Relay the answer through the chain's response phases: each piece goes out as the chain returns
        it."""
        headers = ctx.response_headers
        upstream_headers = upstream.headers
        for name in _PASS_HEADERS:
            value = upstream_headers.get(name)
            if value is not None:
                headers[name] = value
        stamp_request_id(headers, ctx.request_id, ctx.envelope)
        if self._expose_provider:
            headers["x-modelgate-provider"] = ctx.served_row.provider
        chain = self._chain
        head = ctx.answer = AnswerHead(
            upstream.status, headers, upstream_headers, rest is not None, translator
        )
        for hook in chain.head_hooks:
            hook(ctx, head)
        ctx.answered_status = upstream.status  # from here on the request is charged for what it delivers
        if rest is None:
            body = opening
            for hook in chain.chunk_hooks:
                body = hook(ctx, body)
            ctx.bytes_sent = len(body)
            ctx.first_byte_at = time.perf_counter()
            ctx.outcome = "completed"  # the whole answer is in hand and goes out in one piece
            return web.Response(status=head.status, body=body, headers=headers)
        return await self._streams.relay(ctx, upstream, head, opening, rest)


def _opening(
    ctx: RequestContext, upstream: UpstreamResponse
) -> tuple[Awaitable[bytes], AsyncIterator[bytes] | None]:
    """The read of the whole body of a plain answer (rest None), or of a stream's first chunk and the rest of
    its chunks; the caller awaits the read (a plain function: no coroutine of its own around it)."""
    content_type = upstream.headers.get("content-type", "")
    # Event streams and binary media (speech, video content) are relayed chunk by chunk, never read whole.
    streamed = content_type.startswith(_STREAMED_TYPES)
    if not ctx.stream and not streamed:
        return upstream.read(), None
    chunks = aiter(upstream.content.iter_any())
    return anext(chunks, b""), chunks
