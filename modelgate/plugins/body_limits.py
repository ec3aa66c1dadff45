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
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from modelgate.domain.audio_duration import AudioProbe
from modelgate.domain.errors import GatewayError, InvalidRequest, RequestTooLarge, UnsupportedMediaType
from modelgate.domain.media import MediaKind
from modelgate.proxy.http.body_decoding import BodyDecodingError, request_body
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
    if declared is not None:
        if declared > limit:
            raise request_too_large(limit)
        if not declared:
            return b""
        stream = request.content  # a declared length is never a decoded body's
        if stream.is_eof():  # the whole body came with its head (the usual case): no read to await
            body = stream.read_nowait()
            if len(body) != declared:
                raise asyncio.IncompleteReadError(body, declared)
            return body
        return await stream.readexactly(declared)
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

    async def on_request(self, ctx: RequestContext) -> None:
        route = ctx.matched_route
        request = ctx.request
        if route.body is BodyFormat.NONE:
            return
        # The raw header, not aiohttp's parsed `content_type`: parsing it costs every JSON request.
        content_type = request.headers.get("content-type", "")
        multipart = content_type.lstrip().lower().startswith("multipart/")
        if multipart and route.body in (BodyFormat.MULTIPART, BodyFormat.JSON_OR_MULTIPART):
            limit = route.limit.multipart
            content, declared = request_body(request, limit, _gateway_error)
            if declared is not None and declared > limit:
                raise request_too_large(limit)
            body = StreamedMultipart(
                content,
                request.headers["content-type"],
                MultipartLimits(limit, route.limit.part),
                declared,
                # An audio upload's duration is read as it passes: what is charged when the answer does
                # not say it (modelgate/domain/media.py).
                AudioProbe() if route.media is MediaKind.AUDIO_IN else None,
            )
            ctx.payload = await body.read_head()
            ctx.body_stream = body
            return
        if route.body is BodyFormat.MULTIPART:
            # Still bounded: read nothing past the limit before refusing the wrong content type.
            raise InvalidRequest(
                f"this route expects a multipart/form-data body, not {request.content_type!r}"
            )
        ctx.body = await read_limited(request, route.limit.json)
        if not ctx.body:
            raise InvalidRequest("request body is empty; a JSON object is required")
        try:
            payload = orjson.loads(ctx.body)
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"request body is not valid JSON: {exc.msg} (position {exc.pos})") from None
        if not isinstance(payload, dict):
            raise InvalidRequest("request body must be a JSON object")
        ctx.payload = payload
