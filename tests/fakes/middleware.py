"""The chain every request goes through: record, authenticate, apply the queued fault, route."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.typedefs import Handler

from .context import CONTEXT, FAULT, RECORD, fault_of, vendor_of
from .envelopes import UpstreamError, Vendor, error_body, error_response, json_response
from .faults import Fault
from .records import RecordedRequest
from .sse import drop_connection


def check_auth(request: web.Request, api_key: str | tuple[str, ...] | None, vendor: Vendor) -> None:
    """Each vendor's own credential header; the fake accepts anything when it has no key, and any of its
    keys when it has several.

    Anthropic takes `x-api-key` or `Authorization: Bearer` (the anthropic SDK 2.x sends the latter).
    """
    if api_key is None:
        return
    keys = (api_key,) if isinstance(api_key, str) else api_key
    authorization = request.headers.get("authorization", "")
    bearer = authorization.startswith("Bearer ") and authorization[7:] in keys
    if vendor is Vendor.OPENAI:
        if not bearer:
            raise UpstreamError(401, "Incorrect API key provided.", code="invalid_api_key")
        return
    if not bearer and request.headers.get("x-api-key") not in keys:
        raise UpstreamError(401, "invalid x-api-key")
    if "anthropic-version" not in request.headers:
        raise UpstreamError(401, "anthropic-version: header is required")


def _dropped(request: web.Request) -> web.Response:
    """Cut the connection; the returned response only satisfies aiohttp and is never sent."""
    drop_connection(request)
    return web.Response()


async def _apply_fault(request: web.Request, fault: Fault, vendor: Vendor) -> web.StreamResponse | None:
    """The answer a fault imposes before the route runs, or None to let the route answer."""
    ctx = request.app[CONTEXT]
    delay = fault.delay_before_headers
    if delay and not await ctx.unless_stopping(asyncio.sleep(delay)):
        return _dropped(request)
    gate = fault.hold_before_headers
    if gate is not None and not await ctx.unless_stopping(ctx.gates.wait(gate)):
        return _dropped(request)
    if fault.hang:
        # A future nobody resolves: ends by cancellation when the client leaves, or when the server stops.
        await ctx.unless_stopping(asyncio.get_running_loop().create_future())
        return _dropped(request)
    if fault.status is not None:
        body = fault.body
        if body is None:
            message = f"fake upstream {ctx.name!r}: injected HTTP {fault.status}"
            body = error_body(vendor, fault.status, message)
        return json_response(body, fault.status)
    return None


@web.middleware
async def upstream_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    # Multipart uploads are left for their route to read part by part as they arrive (body not recorded).
    body = b"" if request.content_type.startswith("multipart/") else await request.read()
    record = RecordedRequest.capture(
        request.method, request.path, dict(request.query), dict(request.headers), body
    )
    ctx.log.append(record)
    request[RECORD] = record
    vendor = vendor_of(request)
    try:
        check_auth(request, ctx.api_key, vendor)
        fault = ctx.faults.take(request.path)
        if fault is not None:
            request[FAULT] = fault
            imposed = await _apply_fault(request, fault, vendor)
            if imposed is not None:
                return imposed
        return await handler(request)
    except UpstreamError as error:
        return error_response(vendor, error)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
        unknown = UpstreamError(exc.status, f"Unknown request URL: {request.method} {request.path}")
        return error_response(vendor, unknown)
    except asyncio.CancelledError:
        # aiohttp cancels the handler when the client goes away (handler_cancellation=True).
        ctx.stats.note_cancelled()
        raise
    except ConnectionResetError:
        # A write hit a connection the client had already closed.
        ctx.stats.note_cancelled()
        return web.Response(status=499)


async def stamp_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare hook: every answer names its fake, and carries the fault's extra headers."""
    response.headers["x-fake-upstream"] = request.app[CONTEXT].name
    fault = fault_of(request)
    if fault is not None and fault.headers:
        response.headers.update(fault.headers)
