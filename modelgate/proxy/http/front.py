"""The lean HTTP front: every connection starts here, and the plain model API request is served here.

aiohttp's server costs about 170,000 instructions per request more than a bare HTTP/1.1 protocol on the
same event loop (request and response objects, the router, the task per request, header parsing into
several layers); on a model API call that is a fifth of the gateway's whole cost. The front serves the
request that makes up the traffic, and only that one: a `POST /v1/...` over HTTP/1.1 whose head arrives in
one piece, no larger than 8 KiB, with a `Content-Length` body of at most 1 MiB and no `Transfer-Encoding`,
`Expect`, `Upgrade`, content coding of the target (percent-escapes) or multipart body.

Anything else — a head in pieces, a chunked upload, a malformed or oversized head, a WebSocket, the
cabinet, health checks — is handed to aiohttp with every byte the connection sent since its last answer:
the connection becomes an ordinary aiohttp connection (modelgate/proxy/http/connection_guard.py) for the rest
of its life, and whatever aiohttp and the guard would have done with those bytes, they do. The front never
refuses or answers anything on its own; it keeps the guard's deadlines while it holds the connection:

- a new connection owes its first head within `header_timeout` (the guard gets what is left of it);
- a body may pause at most `body_idle_timeout` between bytes;
- an idle keep-alive connection closes after `keepalive_timeout`.

A handler is cancelled when its client disconnects (aiohttp's `handler_cancellation`) — unless it waits for a
non-streamed answer it must read to its end (`finish_on_loss`) — and a graceful stop
waits for requests in flight as aiohttp's does: the front's connections are in the server's own list.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httptools
from aiohttp import web
from aiohttp.tcp_helpers import tcp_nodelay
from multidict import CIMultiDict, CIMultiDictProxy

from modelgate.proxy.http.eager_start import start_eagerly
from modelgate.proxy.http.front_request import FrontRequest, FrontStream, whole_answer
from modelgate.proxy.http.outbox import outbox_for

if TYPE_CHECKING:
    from modelgate.proxy.http.connection_guard import EdgeLimits, GuardedServer

log = logging.getLogger("modelgate.http")

Handler = Callable[[FrontRequest], Awaitable[web.StreamResponse | FrontStream]]

HEAD_MAX = 8 * 1024  # aiohttp refuses a head line over 8190 bytes: a larger head is its to judge
BODY_MAX = 1024 * 1024
_LENGTH_DIGITS = len(str(BODY_MAX))
# Pipelined bytes held while a request is served; past this the client is not read from until it is done.
_HELD_MAX = 256 * 1024
# The bytes a target may hold as it is: deleting them (`bytes.translate`) leaves nothing of a servable one.
_TARGET_OK = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/?=&:@!$'()*+,;"
_HANDED_OVER = ("transfer-encoding", "expect", "upgrade", "content-encoding")


class _Head:
    """A parsed request head: httptools' callbacks fill it in, each header decoded as it comes (in the
    callback rather than in a pass over the list afterwards: about 3,000 instructions less per request)."""

    __slots__ = ("headers", "target")

    def __init__(self) -> None:
        self.target = b""
        self.headers: list[tuple[str, str]] = []

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("utf-8", "surrogateescape")))


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs four times as much, per request
class _Pending:
    """A request whose head the front has parsed: what it needs to serve the request once the body is in."""

    method: str
    target: str
    headers: CIMultiDictProxy[str]
    head_length: int
    body_length: int
    keep_alive: bool


def _servable(raw: bytes | bytearray, end: int) -> _Pending | None:
    """The head that ends at `end` when the front may serve its request, else None (aiohttp's to serve)."""
    if not raw.startswith(b"POST /v1"):
        return None
    head = _Head()
    parser = httptools.HttpRequestParser(head)
    try:
        parser.feed_data(raw[:end])
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # the second is not the first's kind
        return None
    if parser.get_http_version() != "1.1":
        return None
    target = head.target
    if not target.startswith((b"/v1/", b"/v1?")) and target != b"/v1":
        return None
    if target.translate(None, _TARGET_OK):
        return None  # percent-escapes or bytes a URL may not hold: aiohttp decodes or refuses them
    headers = CIMultiDictProxy(CIMultiDict(head.headers))
    for name in _HANDED_OVER:
        if name in headers:
            return None
    lengths = headers.getall("content-length", ())
    if len(lengths) != 1:
        return None  # a POST without one length: chunked, or malformed — aiohttp answers it
    digits = lengths[0]
    if not (digits.isascii() and digits.isdigit()) or len(digits) > _LENGTH_DIGITS:
        return None  # (the digits first: int() refuses a string of thousands of them)
    length = int(digits)
    if length > BODY_MAX:
        return None
    if headers.get("content-type", "").lstrip()[:10].lower() == "multipart/":
        return None
    return _Pending("POST", target.decode("ascii"), headers, end, length, parser.should_keep_alive())


class FrontConnection(asyncio.Protocol):
    """One client connection while the front holds it (see the module docstring)."""

    __slots__ = (
        "_body_seen",
        "_closing",
        "_drain",
        "_handler",
        "_idle",
        "_limits",
        "_loop",
        "_out",
        "_outbox",
        "_pending",
        "_raw",
        "_read_paused",
        "_served",
        "_server",
        "_started",
        "_task_handler",
        "_timer",
        "client_gone",
        "finish_on_loss",
        "peer",
        "transport",
    )

    def __init__(self, server: GuardedServer, handler: Handler, limits: EdgeLimits) -> None:
        self._server = server
        self._handler = handler
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self._raw: bytes | bytearray = b""  # what arrived and was not served yet
        self._pending: _Pending | None = None
        self._task_handler: asyncio.Task | None = None  # the request being served (aiohttp's name)
        self._timer: asyncio.TimerHandle | None = None
        self._started = 0.0
        self._body_seen = 0.0
        self._served = 0
        self._closing = False
        self._read_paused = False
        self._drain: asyncio.Future | None = None
        self._idle: asyncio.Future | None = None  # set once nothing is read or served (a graceful stop)
        # While set, a client that leaves does not cancel its handler, which reads its provider's answer to
        # the end (a non-streamed call: modelgate/proxy/pipeline/model_api.py), and is handed to it (the
        # server no longer waits for that handler: the caller tracks it); `client_gone` tells the handler.
        self.finish_on_loss: Callable[[asyncio.Task], None] | None = None
        self.client_gone = False
        self._out: list[bytes] | None = None  # bytes queued in the outbox in this pass, in order
        self._outbox = outbox_for(self._loop)

    # asyncio protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        tcp_nodelay(transport, True)  # type: ignore[arg-type]
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, (list, tuple)) else (str(peer) if peer else None)
        self._server._connections[self] = transport  # type: ignore[index]
        self._started = self._loop.time()
        self._timer = self._loop.call_at(self._started + self._limits.header_timeout, self._overdue)

    def data_received(self, data: bytes) -> None:
        raw = self._raw
        if not raw:
            self._raw = data
        else:
            if raw.__class__ is bytes:
                raw = self._raw = bytearray(raw)
            raw += data
        if self._task_handler is not None:  # pipelined behind the request being served
            transport = self.transport
            if len(self._raw) > _HELD_MAX and not self._read_paused and transport is not None:
                transport.pause_reading()
                self._read_paused = True
            return
        if self._pending is not None:
            self._body_seen = self._loop.time()
        self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._connections.pop(self, None)  # type: ignore[call-overload]
        self._cancel_timer()
        self.transport = None
        self._out = None
        task = self._task_handler
        if task is not None and not task.done():
            if (goes_on := self.finish_on_loss) is not None:
                self.client_gone = True  # its handler goes on to the end of the provider's answer
                goes_on(task)  # and whoever must wait for it (a graceful stop) is told
            else:
                task.cancel()  # the client left: its handler is cancelled (aiohttp's handler_cancellation)
        self._wake_writer(ConnectionResetError("the client closed the connection"))
        self._set_idle()

    def _set_idle(self) -> None:
        idle = self._idle
        if idle is not None and not idle.done():
            idle.set_result(None)

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = self._loop.create_future()

    def resume_writing(self) -> None:
        self._wake_writer(None)

    # serving

    def _next(self) -> None:
        """Serve the next request in what arrived, wait for the rest of it, or hand the connection over."""
        raw = self._raw
        pending = self._pending
        if pending is None:
            end = raw.find(b"\r\n\r\n")
            if end < 0 or end >= HEAD_MAX:
                if raw:
                    self._hand_over()
                return
            pending = _servable(raw, end + 4)
            if pending is None:
                self._hand_over()
                return
            self._pending = pending
            if len(raw) < end + 4 + pending.body_length:  # the body is still arriving: its idle deadline
                self._cancel_timer()
                self._body_seen = now = self._loop.time()
                self._timer = self._loop.call_at(now + self._limits.body_idle_timeout, self._overdue)
                return
        head_length = pending.head_length
        end = head_length + pending.body_length
        if len(raw) < end:
            return
        if len(raw) > end and not pending.keep_alive:
            self._hand_over()  # bytes after `Connection: close`: aiohttp refuses the request
            return
        self._cancel_timer()
        body = bytes(raw[head_length:end])
        self._raw = raw[end:]
        self._pending = None
        client_of = self._server.front_client
        request = FrontRequest(
            self,
            self.peer if client_of is None else client_of(self.peer, pending.headers.get("x-forwarded-for")),
            pending.method,
            pending.target,
            pending.headers,
            body,
            pending.body_length,
            pending.keep_alive and not self._closing,
        )
        start_eagerly(self._loop, self._serve(request), self._adopt)

    def _adopt(self, task: asyncio.Task[None]) -> None:
        self._task_handler = task  # before its first step, which may already finish it (`_finish`)

    async def _serve(self, request: FrontRequest) -> None:
        try:
            response = await self._handler(request)
        except (asyncio.CancelledError, ConnectionError):
            self._task_handler = None
            if self.transport is not None:  # a graceful stop ran out of time for it
                self._close()
            return  # else the client left
        except Exception:
            log.exception("unexpected error serving a request; closing its connection")
            self._finish(False)
            return
        if not request.answered:
            self.answer(request, response)
        self._finish(request.keep_alive)

    def answer(self, request: FrontRequest, response: web.StreamResponse | FrontStream) -> None:
        """Send `response` now (a stream has sent itself) and settle whether the connection stays open. The
        model API calls this before its completion phase, so a client's wait never includes the metering,
        the settlement or the log line; else `_serve` does once the handler returns."""
        request.answered = True
        keep_alive = request.keep_alive and response.keep_alive is not False and not self._closing
        stream = request.stream
        if stream is not None and stream.started and response is not stream:
            # A stream already under way ended in a different answer (an error raised mid-relay): writing
            # it would put a second answer inside the first. The client sees the stream cut off.
            log.error("a streamed answer was replaced by another after it started; closing its connection")
            keep_alive = False
        elif isinstance(response, FrontStream):
            keep_alive = keep_alive and response.finished
        elif response.prepared:  # never for the model API; kept honest if a handler ever does
            log.error("a handler prepared an aiohttp response on the front; closing its connection")
            keep_alive = False
        elif self.transport is not None and not self.transport.is_closing():
            try:
                self.put(whole_answer(response, keep_alive))
            except ValueError:
                log.exception("an answer could not be serialised; closing its connection")
                keep_alive = False
        request.keep_alive = keep_alive

    def _finish(self, keep_alive: bool) -> None:
        """The answer is out: close, or go on with what is pipelined, or wait for the next request."""
        self._task_handler = None
        self._served += 1
        transport = self.transport
        if transport is None:
            return
        if not keep_alive or self._closing:
            self._close()
            self._set_idle()
            return
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        if self._raw:
            self._next()
        else:
            self._timer = self._loop.call_later(self._limits.keepalive_timeout, self._overdue)

    async def send(self, data: bytes) -> None:
        """Write `data`, waiting while the client is behind; ConnectionResetError once it is gone."""
        if not self.put(data):
            await self.drained()

    def put(self, data: bytes) -> bool:
        """Write `data` without waiting: False when the client is behind (`drained` waits for it);
        ConnectionResetError once it is gone. Written now if it is the pass's first write, else queued in the
        outbox (module docstring of modelgate/proxy/http/outbox.py); the connection's bytes keep their order
        either way."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("Cannot write to closing transport")
        out = self._out
        if out is not None:
            out.append(data)
        elif self._outbox.armed:  # `Outbox.first`'s usual answer, read without a call
            self._out = [data]
            self._outbox.queue(self)
        else:
            self._outbox.arm()
            transport.write(data)
        return self._drain is None

    async def drained(self) -> None:
        """Until the client has taken what was written (at once when it keeps up)."""
        if self._drain is not None:
            await asyncio.shield(self._drain)

    def _close(self) -> None:
        """Close the connection once the bytes it queued in the outbox are handed to the transport."""
        self.flush_out()
        self.transport.close()  # type: ignore[union-attr]

    def flush_out(self) -> None:
        """Hand what the outbox holds for this connection to the transport: at the end of the pass, or
        before the transport is closed or handed over."""
        out = self._out
        if out is None:
            return
        self._out = None
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _wake_writer(self, exc: Exception | None) -> None:
        drain, self._drain = self._drain, None
        if drain is None or drain.done():
            return
        if exc is None:
            drain.set_result(None)
        else:
            drain.set_exception(exc)
            drain.exception()  # retrieved: nobody may be waiting

    # deadlines and hand-over

    def _overdue(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None or self._task_handler is not None:
            return
        pending = self._pending
        if pending is not None:
            deadline = self._body_seen + self._limits.body_idle_timeout
            if self._loop.time() < deadline:
                self._timer = self._loop.call_at(deadline, self._overdue)
                return
            log.debug("closing a connection: no body byte for %gs", self._limits.body_idle_timeout)
        elif not self._served:
            log.debug(
                "closing a connection: no complete request head within %gs", self._limits.header_timeout
            )
        self._close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _hand_over(self) -> None:
        """Make this an aiohttp connection from here on, with every byte not served yet."""
        transport = self.transport
        if transport is None:  # never: a connection is handed over while it is open
            raise RuntimeError("a closed front connection cannot be handed over to aiohttp")
        self._cancel_timer()
        self.flush_out()  # an answer of ours still queued goes before anything aiohttp writes
        self._server._connections.pop(self, None)  # type: ignore[call-overload]
        # A first head keeps the deadline it has been under since the connection opened.
        deadline = None if self._served else self._started + self._limits.header_timeout
        protocol = self._server.aiohttp_connection(self._limits, deadline)
        transport.set_protocol(protocol)
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        self.transport = None
        protocol.connection_made(transport)
        if self._drain is not None:  # the client is behind on an answer of ours: aiohttp waits for it too
            self._drain = None
            protocol.pause_writing()
        raw, self._raw = self._raw, b""
        if raw:
            protocol.data_received(bytes(raw))

    # graceful stop (aiohttp's Server calls these on every connection in its list)

    def close(self) -> None:
        """Stop after the request being served or read; an idle connection closes now."""
        self._closing = True
        if self._task_handler is None and self._pending is None and self.transport is not None:
            self._close()

    async def shutdown(self, grace: float | None) -> None:
        """Let the request being read or served finish within `grace` seconds, then cancel it; close."""
        self._closing = True
        if self._pending is not None or self._task_handler is not None:
            self._idle = self._loop.create_future()
            await asyncio.wait((self._idle,), timeout=grace)
        task = self._task_handler
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait((task,), timeout=1.0)
        if self.transport is not None:
            self._close()
