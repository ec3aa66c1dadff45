"""Body limits per route group, enforced while reading; the JSON body is parsed here, once.

A declared Content-Length over the limit is refused before any byte is read; a chunked body is counted as
it streams and refused the moment it passes the limit; multipart parts are counted one by one. Nothing
larger than the limit is ever held in memory.
"""

from __future__ import annotations

import re

import orjson
from aiohttp import web

from plugins.base import Plugin
from proxy.context import RequestContext
from proxy.errors import InvalidRequest, RequestTooLarge
from proxy.routes import BodyFormat

MiB = 1024 * 1024


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"request body is larger than the {limit // MiB if limit >= MiB else limit} "
        f"{'MiB' if limit >= MiB else 'bytes'} allowed on this route"
    )


async def read_limited(request: web.Request, limit: int) -> bytes:
    """The whole body, or RequestTooLarge as soon as it passes `limit` bytes."""
    declared = request.content_length
    if declared is not None:
        if declared > limit:
            raise _too_large(limit)
        return await request.content.readexactly(declared) if declared else b""
    received = bytearray()
    async for chunk in request.content.iter_any():
        received += chunk
        if len(received) > limit:
            raise _too_large(limit)
    return bytes(received)


_DISPOSITION_PARAM = re.compile(r'(\w+)\*?=(?:"((?:[^"\\]|\\.)*)"|([^;]+))')


def check_multipart(body: bytes, content_type: str, part_limit: int) -> dict[str, str]:
    """Counts each part against the per-part limit; returns the small text fields (e.g. `model`)."""
    boundary = _boundary(content_type)
    delimiter = b"--" + boundary
    sections = body.split(b"\r\n" + delimiter)
    if not sections[0].startswith(delimiter):
        raise InvalidRequest("malformed multipart body: it does not start with the boundary")
    sections[0] = sections[0][len(delimiter) :]
    fields: dict[str, str] = {}
    for section in sections:
        if section.startswith(b"--"):
            return fields
        head, separator, content = section.partition(b"\r\n\r\n")
        if not separator:
            raise InvalidRequest("malformed multipart body: a part has no header block")
        name, filename = _disposition(head)
        if len(content) > part_limit:
            raise RequestTooLarge(
                f"multipart part {name or '?'!r} is larger than the "
                f"{part_limit // MiB} MiB allowed for one part"
            )
        if filename is None and name and len(content) <= 4096:
            fields[name] = content.decode("utf-8", "replace")
    raise InvalidRequest("malformed multipart body: the closing boundary is missing")


def _boundary(content_type: str) -> bytes:
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary" and value:
            return value.strip('"').encode("latin-1")
    raise InvalidRequest("multipart body without a boundary parameter")


def _disposition(head: bytes) -> tuple[str | None, str | None]:
    for line in head.decode("utf-8", "replace").split("\r\n"):
        header, _, value = line.partition(":")
        if header.strip().lower() == "content-disposition":
            params = {
                m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3).strip()
                for m in _DISPOSITION_PARAM.finditer(value)
            }
            return params.get("name"), params.get("filename")
    return None, None


class BodyLimits(Plugin):
    """Reads the body within its route group's limit and parses JSON bodies into `ctx.payload`."""

    name = "body_limits"
    essential = True

    async def on_request(self, ctx: RequestContext) -> None:
        route = ctx.route
        request = ctx.request
        if route.body is BodyFormat.NONE:
            return
        content_type = request.content_type
        multipart = content_type.startswith("multipart/")
        if multipart and route.body in (BodyFormat.MULTIPART, BodyFormat.JSON_OR_MULTIPART):
            ctx.body = await read_limited(request, route.limit.multipart)
            fields = check_multipart(ctx.body, request.headers["content-type"], route.limit.part)
            ctx.payload = fields
            return
        if route.body is BodyFormat.MULTIPART:
            # Still bounded: read nothing past the limit before refusing the wrong content type.
            raise InvalidRequest(f"this route expects a multipart/form-data body, not {content_type!r}")
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
