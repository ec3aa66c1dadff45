"""State one fake server shares between its middleware and its routes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .envelopes import UpstreamError, Vendor
from .faults import Fault, FaultBook
from .gates import Gates
from .media_records import MediaLog, RealtimeLog
from .records import RecordedRequest, RequestLog
from .stream_stats import StreamStats


@dataclass(slots=True)
class FakeContext:
    """Everything routes need; the thread-safe parts are shared with the FakeUpstream facade."""

    name: str
    api_key: str | tuple[str, ...] | None  # several: any of them is accepted
    models: tuple[str, ...]
    log: RequestLog = field(default_factory=RequestLog)
    faults: FaultBook = field(default_factory=FaultBook)
    gates: Gates = field(default_factory=Gates)
    stats: StreamStats = field(default_factory=StreamStats)
    # Set by stop(): hanging and gated handlers end instead of holding shutdown up.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # Touched only on the server loop, so no lock: stored Responses API objects and
    # Anthropic prompt-cache prefixes already written.
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Background responses: what each becomes once the test finishes it (FakeUpstream.finish_background).
    background: dict[str, dict[str, Any]] = field(default_factory=dict)
    prompt_cache: set[str] = field(default_factory=set)
    # Uploads, videos and realtime sessions (media_routes.py, realtime_routes.py); thread-safe.
    media: MediaLog = field(default_factory=MediaLog)
    realtime: RealtimeLog = field(default_factory=RealtimeLog)

    async def unless_stopping(self, awaitable: Awaitable[Any]) -> bool:
        """Await `awaitable` unless the server stops first; True when it finished."""
        waited = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((waited, stop), return_when=asyncio.FIRST_COMPLETED)
            return waited.done() and not waited.cancelled()
        finally:
            # Also on cancellation (client gone), so neither helper task is left behind.
            waited.cancel()
            stop.cancel()


CONTEXT = web.AppKey("fake_context", FakeContext)
RECORD = web.RequestKey("fake_record", RecordedRequest)
FAULT = web.RequestKey("fake_fault", Fault)


def vendor_of(request: web.Request) -> Vendor:
    """Anthropic for /v1/messages*, and for /v1/models when the client sends `anthropic-version`."""
    path = request.path
    if path.startswith("/v1/messages"):
        return Vendor.ANTHROPIC
    if path.startswith("/v1/models") and "anthropic-version" in request.headers:
        return Vendor.ANTHROPIC
    return Vendor.OPENAI


def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object body, or a 400 like the real APIs give."""
    parsed = request[RECORD].json
    if not isinstance(parsed, dict):
        raise UpstreamError(400, "We could not parse the JSON body of your request.")
    return parsed


def optional_int(body: dict[str, Any], *names: str) -> int | None:
    """The first of `names` present in `body`, which must be an integer."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise UpstreamError(400, f"Invalid '{name}': expected a non-negative integer.", param=name)
        return value
    return None


def required(body: dict[str, Any], name: str, kind: type) -> Any:
    """A field the real API insists on, with its 400 when absent or of the wrong type."""
    value = body.get(name)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        if value is None:
            raise UpstreamError(400, f"{name}: Field required", param=name)
        raise UpstreamError(400, f"{name}: Input should be a valid {kind.__name__}", param=name)
    return value


def fault_of(request: web.Request) -> Fault | None:
    return request.get(FAULT)


def answered_model(request: web.Request, body: dict[str, Any]) -> str:
    """The model name an answer reports: the one requested, unless the fault names another."""
    model = required(body, "model", str)
    fault = fault_of(request)
    return fault.answer_model if fault is not None and fault.answer_model else model


def created_id(request: web.Request, own: str) -> str:
    """The id of an object a request creates: the fake's own, unless the fault names another."""
    fault = fault_of(request)
    return fault.object_id if fault is not None and fault.object_id else own
