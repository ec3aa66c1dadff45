"""Body limits per route group, enforced while reading; the JSON body is parsed here, once.

A declared Content-Length over the limit is refused before any byte is read; a chunked body is counted as
it streams and refused the moment it passes the limit. Multipart bodies are never read whole: only their
head (up to the end of the `model` field) is read here; the rest is counted part by part while it is relayed
upstream (modelgate/proxy/http/multipart.py), and a limit passed there aborts the upstream request with the
same 413. Nothing larger than the limit is ever held in memory.

A body with a `Content-Encoding` is decoded as it is read (modelgate/proxy/http/body_decoding.py) and the
limits apply to its decoded bytes; its compressed `Content-Length` says nothing about those, so it is only
held against the compressed allowance. The upstream gets the decoded body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from modelgate.domain.audio_duration import AudioProbe
from modelgate.domain.errors import GatewayError, InvalidRequest, RequestTooLarge, UnsupportedMediaType
from modelgate.domain.media import MediaKind
from modelgate.proxy.http.body_decoding import BodyDecodingError, BodySource, request_body
from modelgate.proxy.http.multipart import MultipartLimits, StreamedMultipart, request_too_large
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.route_table import BodyFormat

if TYPE_CHECKING:
    from modelgate.proxy.http.front_request import FrontRequest


def _gateway_error(error: BodyDecodingError) -> GatewayError:
    if error.status == 413:
        return RequestTooLarge(error.message)
    if error.status == 415:
        return UnsupportedMediaType(error.message)
    return InvalidRequest(error.message)


async def read_limited(request: web.Request | FrontRequest, limit: int) -> bytes:
    """The whole (decoded) body, or RequestTooLarge as soon as it passes `limit` bytes."""
    content, declared = request_body(request, limit, _gateway_error)
    body = _arrived(request, declared, limit)
    if body is not None:
        return body
    return await _read_rest(request, content, declared, limit)


def _arrived(request: web.Request | FrontRequest, declared: int | None, limit: int) -> bytes | None:
    """The whole body of a declared length when it came with its head (the usual case), else None: it is
    read (`_read_rest`)."""
    if declared is None:
        return None
    if declared > limit:
        raise request_too_large(limit)
    if not declared:
        return b""
    stream = request.content  # a declared length is never a decoded body's
    if not stream.is_eof():
        return None
    body = stream.read_nowait()
    if len(body) != declared:
        raise asyncio.IncompleteReadError(body, declared)
    return body


async def _read_rest(
    request: web.Request | FrontRequest, content: BodySource, declared: int | None, limit: int
) -> bytes:
    """The body `_arrived` did not have whole yet, read within `limit`."""
    if declared is not None:
        return await request.content.readexactly(declared)
    received = bytearray()
    while chunk := await content.readany():
        received += chunk
        if len(received) > limit:
            raise request_too_large(limit)
    return bytes(received)


class BodyLimits(Plugin):
    """Reads the body within its route group's limit and parses JSON bodies into `ctx.payload`."""

    name = "body_limits"
    requires = frozenset({"route"})
    provides = frozenset({"body", "body_stream", "payload"})
    essential = True

    def on_request(self, ctx: RequestContext) -> Awaitable[None] | None:
        # A plain function: a JSON body that came whole with its head (the usual one) is parsed without a
        # coroutine; a multipart body, or one still arriving, is read in one.
        route = ctx.matched_route
        request = ctx.request
        if route.body is BodyFormat.NONE:
            return None
        # The raw header, not aiohttp's parsed `content_type`: parsing it costs every JSON request.
        content_type = request.headers.get("content-type", "")
        multipart = content_type.lstrip().lower().startswith("multipart/")
        if multipart and route.body in (BodyFormat.MULTIPART, BodyFormat.JSON_OR_MULTIPART):
            return self._multipart(ctx)
        if route.body is BodyFormat.MULTIPART:
            # Still bounded: read nothing past the limit before refusing the wrong content type.
            raise InvalidRequest(
                f"this route expects a multipart/form-data body, not {request.content_type!r}"
            )
        limit = route.limit.json
        content, declared = request_body(request, limit, _gateway_error)
        body = _arrived(request, declared, limit)
        if body is None:
            return self._read_json(ctx, content, declared, limit)
        _parse(ctx, body)
        return None

    async def _read_json(
        self, ctx: RequestContext, content: BodySource, declared: int | None, limit: int
    ) -> None:
        _parse(ctx, await _read_rest(ctx.request, content, declared, limit))

    async def _multipart(self, ctx: RequestContext) -> None:
        route, request = ctx.matched_route, ctx.request
        limit = route.limit.multipart
        content, declared = request_body(request, limit, _gateway_error)
        if declared is not None and declared > limit:
            raise request_too_large(limit)
        body = StreamedMultipart(
            content,
            request.headers["content-type"],
            MultipartLimits(limit, route.limit.part),
            declared,
            # An audio upload's duration is read as it passes: what is charged when the answer does not say
            # it (modelgate/domain/media.py).
            AudioProbe() if route.media is MediaKind.AUDIO_IN else None,
        )
        ctx.payload = await body.read_head()
        ctx.body_stream = body


def _parse(ctx: RequestContext, body: bytes) -> None:
    """Keep a JSON body and the object it holds on the context."""
    ctx.body = body
    if not body:
        raise InvalidRequest("request body is empty; a JSON object is required")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc.msg} (position {exc.pos})") from None
    if not isinstance(payload, dict):
        raise InvalidRequest("request body must be a JSON object")
    ctx.payload = payload
