"""A fake client connection for driving the lean HTTP front (modelgate/proxy/http/front.py) in unit tests: a
transport that records what the front does to it, a real `GuardedServer` whose aiohttp side records what
reaches it, and helpers to write requests and read answers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest
from aiohttp import web
from multidict import CIMultiDict

from modelgate.proxy.http.connection_guard import EdgeLimits, GuardedServer
from modelgate.proxy.http.front import FrontConnection
from modelgate.proxy.http.front_request import FrontRequest

LIMITS = EdgeLimits(header_timeout=10.0, body_idle_timeout=10.0, keepalive_timeout=10.0, max_connections=100)
SHORT = 0.05  # a deadline under test: long enough to tell "closed at once" from "closed by the timer"
HELD_MAX = 256 * 1024  # pipelined bytes the front holds before it stops reading (front._HELD_MAX)
WAIT = 2.0  # the bound of every wait for something that must happen

FrontHandler = Callable[[FrontRequest], Awaitable[web.StreamResponse]]


class FakeTransport(asyncio.Transport):
    """A client connection as the protocol sees it; `events` records what the protocol did to it, in order.

    Like asyncio's transports, it calls `pause_writing()` from inside `write()` once more than
    `buffer_limit` bytes are buffered, `resume_writing()` when the client catches up (`drain()`), and
    `connection_lost()` soon after `close()`.
    """

    live: ClassVar[list[FakeTransport]] = []

    def __init__(self, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.handed_to: list[asyncio.BaseProtocol] = []
        self.events: list[tuple[str, bytes]] = []
        self.closing = False
        self.lost = False
        self.reading = True
        self.buffer_limit: int | None = None
        self.buffered = 0
        self.writing_paused = False
        self._changed = asyncio.Event()
        FakeTransport.live.append(self)

    # what the test reads

    @property
    def writes(self) -> list[bytes]:
        return [data for name, data in self.events if name == "write"]

    @property
    def written(self) -> bytes:
        return b"".join(self.writes)

    def names(self) -> list[str]:
        return [name for name, _data in self.events]

    async def until(self, predicate: Callable[[], bool], bound: float = WAIT) -> None:
        """Wait until `predicate()` holds, checked whenever the protocol does something to the transport."""

        async def watch() -> None:
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(watch(), bound)

    # what the client does

    def send(self, data: bytes) -> None:
        self.protocol.data_received(data)  # type: ignore[attr-defined]

    def lose(self, exc: Exception | None = None) -> None:
        """The connection is gone (the client left, or the close went through)."""
        if not self.lost:
            self.lost = self.closing = True
            self.protocol.connection_lost(exc)
            self._note("lost")

    def drain(self) -> None:
        """The client read everything buffered."""
        self.buffered = 0
        if self.writing_paused:
            self.writing_paused = False
            self.protocol.resume_writing()

    # asyncio.Transport

    def _note(self, name: str, data: bytes = b"") -> None:
        self.events.append((name, data))
        self._changed.set()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._note("write", bytes(data))
        self.buffered += len(data)
        if self.buffer_limit is not None and self.buffered > self.buffer_limit and not self.writing_paused:
            self.writing_paused = True
            self.protocol.pause_writing()

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self._note("close")
            asyncio.get_running_loop().call_soon(self.lose)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self.closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol
        self.handed_to.append(protocol)
        self._note("set_protocol")

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.protocol

    def pause_reading(self) -> None:
        self.reading = False
        self._note("pause_reading")

    def resume_reading(self) -> None:
        self.reading = True
        self._note("resume_reading")

    def is_reading(self) -> bool:
        return self.reading

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5555)}.get(name, default)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def can_write_eof(self) -> bool:
        return False


class AiohttpSide:
    """The server's aiohttp handler: what a handed-over connection's requests reach."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, bytes]] = []
        self.served = asyncio.Event()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            (request.method, request.raw_path, f"{request.version[0]}.{request.version[1]}", body)
        )
        self.served.set()
        return web.Response(text="served by aiohttp")


@pytest.fixture(autouse=True)
async def connections_closed_afterwards() -> Any:
    """Loses every fake connection a test left open (autouse where a test module imports it)."""
    FakeTransport.live.clear()
    yield
    for transport in FakeTransport.live:
        transport.lose()
    FakeTransport.live.clear()
    await asyncio.sleep(0)  # teardown only: let cancelled aiohttp tasks finish


def make_server(
    front: FrontHandler, *, limits: EdgeLimits = LIMITS, aiohttp_side: AiohttpSide | None = None
) -> GuardedServer:
    server = GuardedServer(
        aiohttp_side or AiohttpSide(), limits=limits, handler_cancellation=True, access_log=None
    )
    server.front = front
    return server


def connect(server: GuardedServer) -> tuple[FrontConnection, FakeTransport]:
    protocol = server()
    assert isinstance(protocol, FrontConnection)
    transport = FakeTransport(protocol)
    protocol.connection_made(transport)
    return protocol, transport


def post(
    path: str = "/v1/chat/completions",
    body: bytes = b'{"model":"m"}',
    *,
    headers: tuple[str, ...] = (),
    version: str = "1.1",
    content_type: str = "application/json",
) -> bytes:
    lines = [
        f"POST {path} HTTP/{version}",
        "Host: gateway",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def parse(answer: bytes) -> tuple[str, CIMultiDict[str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    return status, CIMultiDict(line.split(": ", 1) for line in lines), body


async def echo(request: FrontRequest) -> web.Response:
    return web.Response(body=b"answer to " + await request.content.read(), content_type="application/json")


async def never_called(request: FrontRequest) -> web.Response:
    raise AssertionError(f"the front served {request.method} {request.path}")
