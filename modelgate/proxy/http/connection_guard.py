"""What a client connection may cost before it is a request: deadlines for slow and idle clients, a cap.

aiohttp waits as long as a client likes for a request head or the rest of a body, and accepts every
connection until the process runs out of file descriptors. Here each connection gets timer handles on its
protocol (no task per connection): the whole head must arrive within `header_timeout`, a body may pause at
most `body_idle_timeout` between bytes, and an idle keep-alive connection closes after `keepalive_timeout`
(aiohttp's own timer). A request line without an HTTP version is refused as soon as it ends. Past
`max_connections` open connections, new ones are closed as soon as they are accepted, so the descriptors
left serve upstreams, storage and logs.

A connection's first request line is where clients that speak no HTTP/1.x show (HTTP/0.9 probes, scanners):
only there is the start of a head known without the parser's state, so only there is the version looked for
before the line is complete; a later head without one waits for the header deadline or is refused whole.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web, web_response
from aiohttp.http import HttpVersion11
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from modelgate.config import ServerConfig
from modelgate.proxy.http.bad_http import MissingHttpVersion, answer_bad_request, raw_bad_request
from modelgate.proxy.http.front import FrontConnection
from modelgate.proxy.http.front import Handler as FrontHandler
from modelgate.proxy.http.front_request import SERVER_NAME

log = logging.getLogger("modelgate.http")

# Descriptors kept back from the open-files limit for upstream connections, storage, Redis, logs, the spool.
DESCRIPTOR_RESERVE = 256
# How often the "connection limit reached" line may be written.
_CAP_LOG_INTERVAL = 60.0
# A request line ends in " HTTP/1.1"; this many of its last bytes are enough to look for the version.
_VERSION_WINDOW = 16


def name_the_server() -> None:
    """Make every aiohttp answer of this process say `Server: modelgate`.

    aiohttp sets the header from a module constant when a response is prepared; replacing the constant
    costs nothing per request, where a response hook would run on every one.
    """
    setattr(web_response, "SERVER_SOFTWARE", SERVER_NAME)  # noqa: B010 (not exported: typed checkers refuse it)


def connection_cap(configured: int) -> int:
    """`configured`, but no more than the open-files limit leaves after the reserve (at least 1)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft - DESCRIPTOR_RESERVE))


@dataclass(slots=True, frozen=True)
class EdgeLimits:
    """The deadlines and the connection cap in force (a config reload applies to new connections)."""

    header_timeout: float
    body_idle_timeout: float
    keepalive_timeout: float
    max_connections: int

    @classmethod
    def from_config(cls, server: ServerConfig) -> EdgeLimits:
        """The limits of `[server]`, the cap clamped to this process's open-files limit."""
        cap = connection_cap(server.max_connections)
        if cap < server.max_connections:
            log.warning(
                "server.max_connections = %d is over what the open-files limit allows; using %d "
                "(raise `ulimit -n` to allow more)",
                server.max_connections,
                cap,
            )
        return cls(
            server.header_timeout_seconds,
            server.body_idle_timeout_seconds,
            server.keepalive_timeout_seconds,
            cap,
        )


class GuardedServer(web.Server):
    """aiohttp's connection factory with the cap: past it, a new connection is closed at once."""

    def __init__(self, handler: Any, *, limits: EdgeLimits, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.limits = limits
        # The model API's handler when the lean front (modelgate/proxy/http/front.py) takes every new
        # connection.
        self.front: FrontHandler | None = None
        # With `server.trusted_proxies`: the client's address from the peer's and X-Forwarded-For.
        self.front_client: Callable[[str | None, str | None], str | None] | None = None
        self._refused = 0
        self._cap_logged_at = -_CAP_LOG_INTERVAL

    def __call__(self) -> asyncio.Protocol:  # type: ignore[override]
        limits = self.limits
        if len(self._connections) >= limits.max_connections:
            self._note_refusal(limits.max_connections)
            return _RefusedConnection()
        if self.front is not None:
            return FrontConnection(self, self.front, limits)
        return self.aiohttp_connection(limits, None)

    def aiohttp_connection(self, limits: EdgeLimits, head_deadline: float | None) -> GuardedConnection:
        """An aiohttp connection under `limits`: a new one, or one the front hands over (its first head then
        owed by `head_deadline`, loop time)."""
        return GuardedConnection(
            self, loop=self._loop, limits=limits, head_deadline=head_deadline, **self._kwargs
        )

    def _note_refusal(self, cap: int) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._cap_logged_at >= _CAP_LOG_INTERVAL:
            self._cap_logged_at = now
            log.warning(
                "connection limit reached: %d connections open (server.max_connections); new connections "
                "are closed at once (%d refused since the last message)",
                cap,
                self._refused,
            )
            self._refused = 0


class _RefusedConnection(asyncio.Protocol):
    """A connection over the cap: closed as soon as it is accepted, its descriptor freed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class GuardedConnection(RequestHandler):
    """aiohttp's request handler with deadlines on reading heads and bodies, and answers to malformed HTTP."""

    __slots__ = (
        "_body",
        "_body_seen",
        "_body_timer",
        "_head_deadline",
        "_head_timer",
        "_limits",
        "_line_tail",
    )

    def __init__(
        self, manager: web.Server, *, limits: EdgeLimits, head_deadline: float | None = None, **kwargs: Any
    ) -> None:
        kwargs["keepalive_timeout"] = limits.keepalive_timeout
        super().__init__(manager, **kwargs)
        self._limits = limits
        # When the first head is already owed by then (a connection the front handed over), loop time.
        self._head_deadline = head_deadline
        self._head_timer: asyncio.TimerHandle | None = None
        # The body being read, when the latest request has one still arriving, and when a byte of it came.
        self._body: StreamReader | None = None
        self._body_seen = 0.0
        self._body_timer: asyncio.TimerHandle | None = None
        # The last bytes of the connection's first request line while it arrives; None once it is complete.
        self._line_tail: bytes | None = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # A new connection owes its first request head within the header timeout too.
        deadline = self._head_deadline
        if deadline is None:
            self._head_timer = self._loop.call_later(self._limits.header_timeout, self._head_overdue)
        else:
            self._head_timer = self._loop.call_at(deadline, self._head_overdue)

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None
        self._body = None

    def data_received(self, data: bytes) -> None:
        body = self._body
        in_body = body is not None and not body.is_eof()
        if in_body:
            self._body_seen = self._loop.time()
        count = self._request_count
        if in_body and (self._close or self._force_close) and self.transport is not None:
            # A graceful stop marks every connection closing (aiohttp's pre_shutdown, then shutdown's
            # _force_close flag while it waits for handlers) and aiohttp then drops all it receives, so the
            # body of a request already being served would never arrive: its handler waited out the whole
            # grace. The body is still read; nothing after it is (the connection closes).
            close, force_close = self._close, self._force_close
            self._close = self._force_close = False
            try:
                super().data_received(data)
            finally:
                self._close, self._force_close = close, force_close
        else:
            super().data_received(data)
        if self._request_count != count:
            self._heads_arrived(self._request_count - count, body if in_body else None)
        elif data and not in_body and self._payload_parser is None and not self._upgraded:
            if not self._close and not self._force_close:
                self._head_partial(data)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Malformed HTTP: envelope A and one line naming no request byte; anything else as aiohttp does."""
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        if request.writer.output_size > 0:
            raise ConnectionError("a response was already started; the connection closes")
        return answer_bad_request(exc, request.remote)

    def _heads_arrived(self, new: int, body: StreamReader | None) -> None:
        """`new` messages were parsed: stop the head deadline, refuse HTTP/0.9, watch the latest body."""
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        messages = self._messages
        total = len(messages)
        for index in range(total - min(new, total), total):
            message = messages[index][0]
            if isinstance(message, _ErrInfo):
                if body is not None:  # the body being read was malformed: answer now, not after its handler
                    self._abort_body(message.exc)
                    return
            elif message.version is not HttpVersion11 and message.version.major < 1:
                messages[index] = (_refusal(MissingHttpVersion()), EMPTY_PAYLOAD)
                self._close = True
        if total:
            payload = messages[-1][1]
            if payload is not EMPTY_PAYLOAD and not payload.is_eof():
                self._body = payload
                self._body_seen = now = self._loop.time()
                if self._body_timer is None:
                    self._body_timer = self._loop.call_at(
                        now + self._limits.body_idle_timeout, self._body_overdue
                    )
                return
        self._body = None

    def _head_partial(self, data: bytes) -> None:
        """Part of a head arrived: start its deadline; refuse the first request line if it has no version."""
        if self._head_timer is None:
            self._head_timer = self._loop.call_later(self._limits.header_timeout, self._head_overdue)
        tail = self._line_tail
        if tail is None or self._request_count:
            self._line_tail = None
            return
        line = (tail + data).lstrip(b"\r\n")  # empty lines before a request line are allowed
        end = line.find(b"\n")
        if end < 0:
            self._line_tail = line[-_VERSION_WINDOW:]
            return
        self._line_tail = None
        if b" HTTP/" not in line[:end][-_VERSION_WINDOW:]:
            self._refuse(MissingHttpVersion())

    def _refuse(self, exc: HttpProcessingError) -> None:
        """Answer `exc` as aiohttp answers a parser error: queued in order, then the connection closes."""
        self._request_count += 1
        self._messages.append((_refusal(exc), EMPTY_PAYLOAD))
        self._close = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _abort_body(self, exc: BaseException) -> None:
        """A body turned malformed while its handler reads it: the parser has dropped it, so the handler
        would wait forever. Answer in envelope A if nothing was sent yet, then close (cancelling the handler).
        """
        request = self._current_request
        transport = self.transport
        if transport is not None and request is not None and request.writer.output_size == 0:
            transport.write(raw_bad_request(exc, request.remote, SERVER_NAME))
        self.force_close()

    def _head_overdue(self) -> None:
        self._head_timer = None
        if not self._force_close:
            log.debug(
                "closing a connection: no complete request head within %gs", self._limits.header_timeout
            )
            self.force_close()

    def _body_overdue(self) -> None:
        self._body_timer = None
        body = self._body
        if body is None or body.is_eof() or self._force_close:
            return
        now = self._loop.time()
        if self._reading_paused:  # the gateway is behind on the body, not the client
            self._body_seen = now
        deadline = self._body_seen + self._limits.body_idle_timeout
        if now < deadline:
            self._body_timer = self._loop.call_at(deadline, self._body_overdue)
            return
        log.debug("closing a connection: no body byte for %gs", self._limits.body_idle_timeout)
        self.force_close()


def _refusal(exc: HttpProcessingError) -> _ErrInfo:
    return _ErrInfo(status=400, exc=exc, message=exc.message)
