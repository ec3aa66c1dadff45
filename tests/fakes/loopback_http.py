"""LoopbackServer: a raw asyncio HTTP/1.1 server on 127.0.0.1 whose answers each test writes byte by byte.

FakeUpstream is an aiohttp application and always speaks correct HTTP; this one lets a test misbehave on
the wire (cut an answer short, send a malformed one, hold a connection, close an idle one) and see what
the gateway's own HTTP client does, from the server's side: connections accepted, requests received,
connections the client closed.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """One request as it arrived: the head (request line and headers, no blank line) and the body."""

    head: bytes
    body: bytes

    @property
    def lines(self) -> list[str]:
        return self.head.decode("latin-1").split("\r\n")

    @property
    def request_line(self) -> str:
        return self.lines[0]

    def header(self, name: str) -> str | None:
        """The value of the first header called `name` (any case), or None."""
        for line in self.lines[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name:
                return value.strip()
        return None


@dataclass(eq=False, slots=True)
class ServerConnection:
    """One accepted connection: the requests read from it, and the stream to answer on."""

    index: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    requests: list[ReceivedRequest] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    client_closed: bool = False  # the server read an end of stream (or a reset) from the client

    @property
    def transport(self) -> asyncio.WriteTransport:
        return self.writer.transport  # type: ignore[return-value]

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def close(self) -> None:
        """Close from the server's side (a FIN after what was written)."""
        self.writer.close()


# Called for every request; it answers (or not) on the connection. Once it returns, the server reads the
# connection's next request, so a handler that returns without answering leaves the request unanswered
# and still notices when the client closes.
Handler = Callable[[ServerConnection, ReceivedRequest], Awaitable[None]]


class LoopbackServer:
    """`async with LoopbackServer(handler) as server:` serves on 127.0.0.1:`server.port` for the block."""

    def __init__(self, handler: Handler, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._arrived = asyncio.Condition()
        self._open = 0
        self.port = 0
        self.connections: list[ServerConnection] = []
        self.requests: list[ReceivedRequest] = []
        self.most_open = 0  # the most connections open at the same time

    async def __aenter__(self) -> LoopbackServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.close()
        for conn in self.connections:
            conn.transport.abort()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def wait_for_requests(self, count: int) -> None:
        """Until `count` requests in all have arrived."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())
        conn = ServerConnection(len(self.connections), reader, writer)
        self.connections.append(conn)
        self._open += 1
        self.most_open = max(self.most_open, self._open)
        try:
            while not writer.is_closing():
                request = await _read_request(reader)
                if request is None:
                    conn.client_closed = True
                    break
                conn.requests.append(request)
                async with self._arrived:
                    self.requests.append(request)
                    self._arrived.notify_all()
                await self._handler(conn, request)
        except asyncio.CancelledError:
            pass  # the server is stopping: ending quietly keeps asyncio from logging the cancellation
        finally:
            self._open -= 1
            writer.close()
            conn.ended.set()


async def _read_request(reader: asyncio.StreamReader) -> ReceivedRequest | None:
    """The next request on the connection, or None once the client has closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    head = head[:-4]
    request = ReceivedRequest(head, b"")
    length = int(request.header("content-length") or 0)
    if length:
        try:
            return ReceivedRequest(head, await reader.readexactly(length))
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
    return request


def answer(body: bytes = b"ok", *, status: str = "200 OK", headers: tuple[str, ...] = ()) -> bytes:
    """A complete answer with a Content-Length, plus any extra header lines."""
    lines = [f"HTTP/1.1 {status}", f"content-length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body (an empty `data` is the last chunk)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


# No test may hang: each fails once this long has passed, whatever it was waiting for.
TEST_BOUND = 10.0
# Timeouts under test: short, and nothing asserted depends on how long they actually took.
SHORT = 0.2
PATIENT = 5.0
MIB = 1024 * 1024


def bounded(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Fail the test instead of hanging when something it awaits never happens."""

    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> None:
        async with asyncio.timeout(TEST_BOUND):
            await test(*args, **kwargs)

    return run


async def never_answer(conn: ServerConnection, request: ReceivedRequest) -> None:
    """Leave the request unanswered; the server goes on reading, so it sees the client close."""
