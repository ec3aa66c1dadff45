"""Forwarding to the chosen row: failover before the first byte, then a chunk-by-chunk relay.

Failover happens on connect errors, timeouts, 5xx and 429 from the provider, and on 401/403 (our provider
credentials, not the client's fault) — as long as nothing has reached the client. Other upstream 4xx are the
client's fault and are passed on with their status in our envelope. Streams are never buffered: each
upstream chunk is written as it arrives, so back-pressure reaches the provider.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
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
from modelgate.domain.usage import StreamUsageScanner
from modelgate.proxy.http.front_request import FrontRequest, FrontStream
from modelgate.proxy.pipeline.chain import PluginChain, StreamCut
from modelgate.proxy.pipeline.context import AnswerHead, RequestContext
from modelgate.proxy.pipeline.envelopes import stamp_request_id
from modelgate.proxy.pipeline.failover import RowAttempts, log_failed_attempt
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

log = logging.getLogger("modelgate.forward")

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
        if isinstance(error.get("type"), str) and parsed.get("type") != "error":
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
        self._selector = selector
        # server.expose_provider_header: the row's provider is the operator's business unless it says so.
        self._expose_provider = expose_provider

    async def forward(self, ctx: RequestContext) -> web.StreamResponse:
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
            translator = translator_for(route.name, row.upstream.kind, row.upstream.native_messages)
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
            ctx.credential = getattr(upstream, "credential", "")
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
                opening, rest = await _opening(ctx, upstream)
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
    ) -> web.StreamResponse:
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
        return await self._relay_stream(ctx, upstream, head, opening, rest)

    async def _relay_stream(
        self,
        ctx: RequestContext,
        upstream: UpstreamResponse,
        head: AnswerHead,
        opening: bytes,
        rest: AsyncIterator[bytes],
    ) -> web.StreamResponse:
        """Relay a streamed answer piece by piece as the chain returns it; a provider breaking off ends it
        with the chain's error event."""
        chain = self._chain
        chunk_hooks = chain.chunk_hooks
        translator = head.translator
        if isinstance(ctx.request, FrontRequest):
            response: web.StreamResponse | FrontStream = FrontStream(head.status, head.headers)
        else:
            response = _RelayedStream(status=head.status, headers=head.headers)
        completed = False
        scanner = ctx.metering.scanner if isinstance(ctx.metering.scanner, StreamUsageScanner) else None
        try:
            await response.prepare(ctx.request)
            # The opening chunk, then each read of the rest (everything that arrived meanwhile, as one chunk:
            # one write). The rest is awaited directly, not through a generator that chains the opening in.
            # A piece read once the upstream's answer is complete is its last: held back (never waiting for
            # anything) to go out with the end of the answer in one write.
            next_chunk = rest.__anext__
            # A generator is read to its end (left suspended, the event loop would close it with a task of its
            # own); the upstream client's iterator is done with once its answer is (`at_eof`).
            ends_unread = not hasattr(rest, "aclose")
            upstream_at_eof = getattr(upstream.content, "at_eof", _never)
            final_marks_completion = scanner is not None and translator is None
            chunk = opening
            last = b""
            head_sent = False  # the head goes with the first bytes of the body, or alone if there are none
            while True:
                for hook in chunk_hooks:  # the opening is empty when the stream ended before its first byte
                    if not chunk:
                        break  # held back by a step (or nothing yet): the later ones see it once released
                    chunk = hook(ctx, chunk)
                if chunk:
                    if ctx.first_byte_at is None:
                        ctx.first_byte_at = time.perf_counter()
                    if upstream_at_eof():
                        last = chunk
                    else:
                        await response.write(chunk)
                        head_sent = True
                        ctx.bytes_sent += len(chunk)
                        if final_marks_completion and scanner.final:
                            ctx.outcome = "completed"  # the final event reached the client, whatever follows
                elif not head_sent:  # the first bytes are not a whole line or event yet: the head goes now
                    await response.write(b"")
                    head_sent = True
                if last and ends_unread:
                    break  # the answer is complete (nothing was awaited since): no read to end it
                try:
                    chunk = await next_chunk()
                except StopAsyncIteration:
                    break
                if last:  # not the last after all
                    await response.write(last)
                    ctx.bytes_sent += len(last)
                    last = b""
            tail = b""
            for hook in chain.end_hooks:
                tail = hook(ctx, tail)
            if last or tail:
                await response.write_eof(last + tail if tail else last)
                ctx.bytes_sent += len(last)
            ctx.outcome = "completed"
            completed = True
        except (
            UpstreamBrokeOff,
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            TimeoutError,
        ) as exc:
            # Bytes already reached the client: no failover, but the chain ends the stream (an error event).
            log_failed_attempt(ctx, ctx.served_row, "broke off a stream", exc)
            if not await self._end_with_error_event(ctx, response, exc, "upstream_error"):
                return response  # the client left too
        except StreamCut as cut:
            # A step ended the stream (a content rule): its closing event goes out, the provider is let go.
            try:
                await response.write(cut.closing)
            except ConnectionError:
                return response
        except ConnectionError:
            # The client went away mid-stream: charged for what it was sent (see BillingGate.final_cost).
            if not ctx.outcome:
                ctx.outcome = "client_closed"
            ctx.status = 499
            return response
        except Exception as exc:
            # A response step failed on a piece: a bug, not the client's or the provider's doing. The stream
            # still ends the way a broken one does (the chain's error event, then its end), and is charged
            # for what it delivered; the provider is let go.
            log.exception(
                "a response step failed mid-stream in request %s",
                ctx.request_id,
                extra={"request_id": ctx.request_id},
            )
            if not await self._end_with_error_event(ctx, response, exc, "internal_error"):
                return response
        finally:
            if completed:
                upstream.release() if hasattr(upstream, "release") else upstream.close()
            else:
                upstream.close()
        try:
            await response.write_eof()
        except ConnectionError:
            if not ctx.outcome:
                ctx.outcome = "client_closed"
        return response

    async def _end_with_error_event(
        self, ctx: RequestContext, response: web.StreamResponse | FrontStream, exc: Exception, outcome: str
    ) -> bool:
        """Record how the stream ended and write the chain's error event; False when the client has left."""
        ctx.error = exc
        ctx.outcome = outcome
        try:
            await response.write(b"".join([hook(ctx, exc) for hook in self._chain.stream_error_hooks]))
        except ConnectionError:
            return False
        return True


async def _opening(
    ctx: RequestContext, upstream: UpstreamResponse
) -> tuple[bytes, AsyncIterator[bytes] | None]:
    """The whole body of a plain answer (rest None), or a stream's first chunk and the rest of its chunks."""
    content_type = upstream.headers.get("content-type", "")
    # Event streams and binary media (speech, video content) are relayed chunk by chunk, never read whole.
    streamed = content_type.startswith(_STREAMED_TYPES)
    if not ctx.stream and not streamed:
        return await upstream.read(), None
    chunks = aiter(upstream.content.iter_any())
    return await anext(chunks, b""), chunks


class _RelayedStream(web.StreamResponse):
    """A streamed answer whose head goes out with the first piece of its body, in one write rather than two
    (aiohttp's own switch, the one web.Response uses; aiohttp is pinned to 3.14.x). The relay prepares it only
    once the upstream's first bytes are in hand, so the head is never held waiting for the provider."""

    _send_headers_immediately = False


def _never() -> bool:
    return False
