"""The lean HTTP front (proxy/http/front.py): which requests it serves itself and which it hands to aiohttp,
the answers it writes, its deadlines, back-pressure and graceful stop.

Each test drives a real `FrontConnection` from a real `GuardedServer` on the test's event loop, over a fake
transport that records what the front does to it; waits are on events, bounded by `asyncio.wait_for`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest
from aiohttp import web
from multidict import CIMultiDict

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.http.connection_guard import EdgeLimits, GuardedConnection, GuardedServer
from modelgate.proxy.http.front import FrontConnection
from modelgate.proxy.http.front_request import FrontRequest, FrontStream
from modelgate.proxy.pipeline.chain import Plugin, PluginChain
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.model_api import ModelApi

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
async def _connections_closed_afterwards() -> Any:
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


# Served by the front


async def test_a_complete_model_api_request_is_served_by_the_front_and_the_connection_stays_open() -> None:
    seen: list[tuple[FrontRequest, bytes]] = []
    body = b'{"model":"gpt","messages":[]}'

    async def handler(request: FrontRequest) -> web.Response:
        seen.append((request, await request.content.read()))
        return web.Response(body=b'{"id":"x"}', content_type="application/json")

    server = make_server(handler)
    conn, transport = connect(server)
    transport.send(post("/v1/chat/completions?trace=1", body, headers=("X-Request-Id: abc",)))
    await transport.until(lambda: bool(transport.writes))

    [(request, read)] = seen
    assert (request.method, request.path, request.query_string) == ("POST", "/v1/chat/completions", "trace=1")
    assert request.headers["content-type"] == request.headers["Content-Type"] == "application/json"
    assert request.headers["X-REQUEST-ID"] == "abc"
    assert read == body
    assert request.remote == "127.0.0.1"
    assert request.keep_alive is True
    [answer] = transport.writes
    status, headers, answer_body = parse(answer)
    assert status == "HTTP/1.1 200 OK"
    assert answer_body == b'{"id":"x"}'
    assert headers["Content-Length"] == str(len(answer_body))
    assert headers["Content-Type"] == "application/json"
    assert headers["Server"] == "modelgate"
    assert headers["Date"].endswith(" GMT")
    assert "Connection" not in headers
    assert not transport.closing
    assert transport.handed_to == []
    assert conn in server.connections


async def test_the_client_address_is_the_servers_front_client_of_the_peer_when_it_has_one() -> None:
    remotes: list[str | None] = []

    async def handler(request: FrontRequest) -> web.Response:
        remotes.append(request.remote)
        return web.Response(body=b"ok")

    server = make_server(handler)
    server.front_client = lambda peer, forwarded: f"{forwarded} via {peer}"
    _conn, transport = connect(server)
    transport.send(post(headers=("X-Forwarded-For: 203.0.113.7",)))
    await transport.until(lambda: bool(transport.writes))
    assert remotes == ["203.0.113.7 via 127.0.0.1"]


async def test_pipelined_requests_are_answered_in_order_one_handler_at_a_time() -> None:
    first_may_answer = asyncio.get_running_loop().create_future()
    started: list[tuple[str, int]] = []  # path, answers written when its handler started
    first_started = asyncio.Event()

    async def handler(request: FrontRequest) -> web.Response:
        started.append((request.path, len(transport.writes)))
        if request.path == "/v1/first":
            first_started.set()
            await first_may_answer
        return web.Response(body=request.path.encode())

    _conn, transport = connect(make_server(handler))
    transport.send(post("/v1/first") + post("/v1/second"))
    await asyncio.wait_for(first_started.wait(), WAIT)
    assert started == [("/v1/first", 0)]

    first_may_answer.set_result(None)
    await transport.until(lambda: len(transport.writes) == 2)
    assert started == [("/v1/first", 0), ("/v1/second", 1)]
    assert [parse(answer)[2] for answer in transport.writes] == [b"/v1/first", b"/v1/second"]
    assert not transport.closing


async def test_a_body_that_arrives_after_its_head_is_served_once_complete() -> None:
    bodies: list[bytes] = []

    async def handler(request: FrontRequest) -> web.Response:
        bodies.append(await request.content.read())
        return web.Response(body=b"ok")

    _conn, transport = connect(make_server(handler))
    raw = post(body=b'{"model":"m","messages":["hello"]}')
    head_end = raw.index(b"\r\n\r\n") + 4
    transport.send(raw[:head_end])
    transport.send(raw[head_end : head_end + 5])
    assert bodies == []
    transport.send(raw[head_end + 5 :])
    await transport.until(lambda: bool(transport.writes))
    assert bodies == [b'{"model":"m","messages":["hello"]}']
    assert parse(transport.writes[0])[0] == "HTTP/1.1 200 OK"
    assert transport.handed_to == []


async def test_an_empty_body_is_served_at_once() -> None:
    bodies: list[bytes] = []

    async def handler(request: FrontRequest) -> web.Response:
        bodies.append(await request.content.read())
        return web.Response(body=b"ok")

    _conn, transport = connect(make_server(handler))
    transport.send(post("/v1/responses/resp_1/cancel", b""))
    await transport.until(lambda: bool(transport.writes))
    assert bodies == [b""]


# Handed over to aiohttp


async def test_a_head_that_arrives_in_pieces_is_handed_to_aiohttp_with_every_byte() -> None:
    aiohttp_side = AiohttpSide()
    server = make_server(never_called, aiohttp_side=aiohttp_side)
    conn, transport = connect(server)
    raw = post(body=b'{"model":"m"}')
    transport.send(raw[:20])

    [protocol] = transport.handed_to
    assert isinstance(protocol, GuardedConnection)
    assert transport.protocol is protocol
    assert conn not in server.connections
    assert protocol in server.connections
    transport.send(raw[20:])  # the rest goes to aiohttp's protocol now
    await asyncio.wait_for(aiohttp_side.served.wait(), WAIT)
    assert aiohttp_side.requests == [("POST", "/v1/chat/completions", "1.1", b'{"model":"m"}')]
    await transport.until(lambda: b"served by aiohttp" in transport.written)
    assert transport.written.startswith(b"HTTP/1.1 200 OK\r\n")


CHUNKED = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
)
MULTIPART_BODY = b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n--b--\r\n'


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n", ("GET", "/healthz", "1.1", b""), id="get"
        ),
        pytest.param(CHUNKED, ("POST", "/v1/chat/completions", "1.1", b"hello"), id="chunked"),
        pytest.param(
            post(headers=("Expect: 100-continue",)),
            ("POST", "/v1/chat/completions", "1.1", b'{"model":"m"}'),
            id="expect",
        ),
        pytest.param(
            post("/v1/chat%2Fcompletions"),
            ("POST", "/v1/chat%2Fcompletions", "1.1", b'{"model":"m"}'),
            id="percent-escape",
        ),
        pytest.param(
            post("/v1/audio/transcriptions", MULTIPART_BODY, content_type="multipart/form-data; boundary=b"),
            ("POST", "/v1/audio/transcriptions", "1.1", MULTIPART_BODY),
            id="multipart",
        ),
        pytest.param(
            post(version="1.0"), ("POST", "/v1/chat/completions", "1.0", b'{"model":"m"}'), id="http-1.0"
        ),
        pytest.param(
            post(headers=tuple(f"X-Pad-{n}: {'p' * 1000}" for n in range(9))),
            ("POST", "/v1/chat/completions", "1.1", b'{"model":"m"}'),
            id="head-over-8-KiB",
        ),
    ],
)
async def test_a_request_the_front_does_not_serve_is_handed_to_aiohttp(
    raw: bytes, expected: tuple[str, str, str, bytes]
) -> None:
    aiohttp_side = AiohttpSide()
    _conn, transport = connect(make_server(never_called, aiohttp_side=aiohttp_side))
    transport.send(raw)
    [protocol] = transport.handed_to
    assert isinstance(protocol, GuardedConnection)
    await asyncio.wait_for(aiohttp_side.served.wait(), WAIT)
    assert aiohttp_side.requests == [expected]


async def test_bytes_after_a_connection_close_request_are_handed_to_aiohttp() -> None:
    aiohttp_side = AiohttpSide()
    _conn, transport = connect(make_server(never_called, aiohttp_side=aiohttp_side))
    transport.send(post("/v1/first", headers=("Connection: close",)) + post("/v1/second"))
    [protocol] = transport.handed_to
    assert isinstance(protocol, GuardedConnection)
    await transport.until(lambda: transport.closing)
    # aiohttp's parser refuses the whole lot, as it does on a connection that never met the front
    status, _headers, body = parse(transport.writes[0])
    assert status.endswith(" 400 Bad Request")
    assert b"data after `Connection: close`" in body
    assert aiohttp_side.requests == []


async def test_after_an_answer_a_request_the_front_does_not_serve_goes_to_aiohttp_on_that_connection() -> (
    None
):
    aiohttp_side = AiohttpSide()
    _conn, transport = connect(make_server(echo, aiohttp_side=aiohttp_side))
    transport.send(post(body=b"one"))
    await transport.until(lambda: bool(transport.writes))
    assert transport.handed_to == []
    transport.send(b"GET /v1/models HTTP/1.1\r\nHost: gateway\r\n\r\n")
    assert len(transport.handed_to) == 1
    await asyncio.wait_for(aiohttp_side.served.wait(), WAIT)
    assert aiohttp_side.requests == [("GET", "/v1/models", "1.1", b"")]
    assert parse(transport.writes[0])[2] == b"answer to one"


# Deadlines


async def test_a_body_that_stalls_past_the_body_idle_timeout_closes_the_connection_unserved() -> None:
    limits = EdgeLimits(
        header_timeout=10.0, body_idle_timeout=SHORT, keepalive_timeout=10.0, max_connections=9
    )
    _conn, transport = connect(make_server(never_called, limits=limits))
    loop = asyncio.get_running_loop()
    raw = post(body=b'{"model":"m","messages":[]}')
    transport.send(raw[:-5])
    stalled_at = loop.time()
    await transport.until(lambda: transport.closing)
    assert loop.time() - stalled_at >= SHORT * 0.8
    assert transport.writes == []
    assert transport.handed_to == []


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() -> None:
    limits = EdgeLimits(
        header_timeout=SHORT, body_idle_timeout=10.0, keepalive_timeout=10.0, max_connections=9
    )
    loop = asyncio.get_running_loop()
    opened_at = loop.time()
    _conn, transport = connect(make_server(never_called, limits=limits))
    assert not transport.closing
    await transport.until(lambda: transport.closing)
    assert loop.time() - opened_at >= SHORT * 0.8
    assert transport.writes == []


async def test_an_idle_connection_after_an_answer_is_closed_after_the_keepalive_timeout() -> None:
    limits = EdgeLimits(
        header_timeout=10.0, body_idle_timeout=10.0, keepalive_timeout=SHORT, max_connections=9
    )
    loop = asyncio.get_running_loop()
    _conn, transport = connect(make_server(echo, limits=limits))
    transport.send(post())
    await transport.until(lambda: bool(transport.writes))
    answered_at = loop.time()
    assert not transport.closing
    await transport.until(lambda: transport.closing)
    assert loop.time() - answered_at >= SHORT * 0.8
    assert transport.names() == ["write", "close", "lost"]


# Connection: close, disconnects


async def test_connection_close_is_answered_with_connection_close_and_then_the_connection_closes() -> None:
    keep_alive: list[bool] = []

    async def handler(request: FrontRequest) -> web.Response:
        keep_alive.append(request.keep_alive)
        return web.Response(body=b"bye")

    _conn, transport = connect(make_server(handler))
    transport.send(post(headers=("Connection: close",)))
    await transport.until(lambda: transport.closing)
    assert keep_alive == [False]
    assert transport.names()[:2] == ["write", "close"]
    status, headers, body = parse(transport.writes[0])
    assert (status, headers["Connection"], body) == ("HTTP/1.1 200 OK", "close", b"bye")


def waiting_forever(started: asyncio.Event, cancelled: asyncio.Event) -> Callable[[FrontRequest], Any]:
    """A handler that sets `started`, waits until it is cancelled, and then sets `cancelled`."""

    async def handler(request: FrontRequest) -> web.Response:
        started.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("the wait never ends")

    return handler


async def test_a_client_that_leaves_while_its_handler_waits_cancels_the_handler() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    handler = waiting_forever(started, cancelled)

    server = make_server(handler)
    conn, transport = connect(server)
    transport.send(post())
    await asyncio.wait_for(started.wait(), WAIT)
    transport.lose(ConnectionResetError("reset by peer"))
    await asyncio.wait_for(cancelled.wait(), WAIT)
    assert transport.writes == []
    assert conn not in server.connections


async def test_a_handler_that_raises_cancelled_error_of_its_own_closes_the_connection() -> None:
    raised = asyncio.Event()

    async def handler(request: FrontRequest) -> web.Response:
        raised.set()
        raise asyncio.CancelledError  # e.g. it awaited a future someone else cancelled

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await asyncio.wait_for(raised.wait(), WAIT)
    await transport.until(lambda: transport.closing, 0.5)


# Streamed answers


async def test_a_front_stream_is_sent_with_chunked_framing_one_chunk_per_write() -> None:
    snapshots: list[list[bytes]] = []

    async def handler(request: FrontRequest) -> FrontStream:
        stream = FrontStream(200, {"content-type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(b"")
        snapshots.append(list(transport.writes))
        await stream.write(b"data: hi\n\n")
        await stream.write(b"x" * 17)
        await stream.write_eof()
        return stream

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: len(transport.writes) == 4)

    [[head]] = snapshots  # write(b"") before any data: the head alone
    status, headers, rest = parse(head)
    assert status == "HTTP/1.1 200 OK"
    assert rest == b""
    assert headers["Transfer-Encoding"] == "chunked"
    assert headers["content-type"] == "text/event-stream"
    assert headers["Server"] == "modelgate"
    assert "Date" in headers
    assert "Content-Length" not in headers
    assert transport.writes[1:] == [b"a\r\ndata: hi\n\n\r\n", b"11\r\n" + b"x" * 17 + b"\r\n", b"0\r\n\r\n"]
    assert not transport.closing


async def test_a_front_stream_sends_its_head_with_the_first_bytes_in_one_write() -> None:
    async def handler(request: FrontRequest) -> FrontStream:
        stream = FrontStream(200, {"content-type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(b"data: 1\n\n")
        await stream.write_eof(b"data: [DONE]\n\n")
        return stream

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: len(transport.writes) == 2)
    head, first = transport.writes[0].split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert first == b"9\r\ndata: 1\n\n\r\n"
    assert transport.writes[1] == b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"


async def test_a_front_stream_write_waits_while_the_client_is_behind() -> None:
    loop = asyncio.get_running_loop()
    returned = asyncio.Event()
    may_end = loop.create_future()

    async def handler(request: FrontRequest) -> FrontStream:
        stream = FrontStream(200, {"content-type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(b"a" * 100)  # over the transport's buffer limit: it pauses the protocol
        returned.set()
        await may_end
        await stream.write_eof()
        return stream

    _conn, transport = connect(make_server(handler))
    transport.buffer_limit = 50
    transport.send(post())
    await transport.until(lambda: transport.writing_paused)
    assert len(transport.writes) == 1
    assert not returned.is_set()  # the handler is still inside write()

    transport.drain()  # resume_writing()
    await asyncio.wait_for(returned.wait(), WAIT)
    may_end.set_result(None)
    await transport.until(lambda: transport.written.endswith(b"0\r\n\r\n"))
    assert not transport.closing


async def test_a_front_stream_write_after_the_client_left_raises_connection_reset() -> None:
    loop = asyncio.get_running_loop()
    streams: list[FrontStream] = []
    cancelled = asyncio.Event()

    async def handler(request: FrontRequest) -> FrontStream:
        stream = FrontStream(200, {"content-type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(b"data: 1\n\n")
        streams.append(stream)
        try:
            await loop.create_future()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return stream

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: bool(transport.writes))
    transport.lose()
    await asyncio.wait_for(cancelled.wait(), WAIT)
    [stream] = streams
    written = len(transport.writes)
    with pytest.raises(ConnectionResetError):
        await stream.write(b"data: 2\n\n")
    with pytest.raises(ConnectionResetError):
        await stream.write_eof()
    assert len(transport.writes) == written


async def test_an_unfinished_front_stream_closes_the_connection() -> None:
    async def handler(request: FrontRequest) -> FrontStream:
        stream = FrontStream(200, {"content-type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(b"data: 1\n\n")
        return stream  # no write_eof: the client cannot tell where the answer ends

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: transport.closing)
    assert not transport.written.endswith(b"0\r\n\r\n")


async def test_an_error_answer_after_a_stream_started_is_not_written_into_it() -> None:
    async def handler(request: FrontRequest) -> web.Response:
        stream = FrontStream(200, {"content-type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(b"data: 1\n\n")
        return web.Response(status=500, body=b"late error")  # what an error raised mid-relay turns into

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: transport.closing)
    assert b"late error" not in transport.written and transport.written.count(b"HTTP/1.1") == 1


async def test_an_error_answer_before_a_prepared_stream_sent_anything_is_written() -> None:
    async def handler(request: FrontRequest) -> web.Response:
        await FrontStream(200, {"content-type": "text/event-stream"}).prepare(request)
        return web.Response(status=502, body=b"no stream after all")

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: bool(transport.writes))
    status, _headers, body = parse(transport.writes[0])
    assert (status, body) == ("HTTP/1.1 502 Bad Gateway", b"no stream after all")
    assert not transport.closing


# Response splitting


async def test_an_answer_with_a_line_break_in_a_header_is_not_sent_and_the_connection_closes() -> None:
    async def handler(request: FrontRequest) -> web.Response:
        return web.Response(body=b"{}", headers={"X-Upstream": "a\r\nSet-Cookie: session=stolen"})

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: transport.closing)
    assert transport.writes == []


async def test_a_stream_with_a_line_break_in_a_header_is_not_sent_and_the_connection_closes() -> None:
    async def handler(request: FrontRequest) -> FrontStream:
        stream = FrontStream(200, {"x-upstream": "a\nSet-Cookie: session=stolen"})
        await stream.prepare(request)
        await stream.write(b"data: 1\n\n")
        await stream.write_eof()
        return stream

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: transport.closing)
    assert transport.writes == []


# Graceful stop


async def test_close_on_an_idle_connection_closes_it_at_once() -> None:
    conn, transport = connect(make_server(echo))
    transport.send(post())
    await transport.until(lambda: bool(transport.writes))
    assert not transport.closing
    conn.close()
    assert transport.closing


async def test_close_while_a_body_arrives_serves_that_request_then_closes() -> None:
    served: list[bool] = []

    async def handler(request: FrontRequest) -> web.Response:
        served.append(request.keep_alive)
        return web.Response(body=b"last")

    conn, transport = connect(make_server(handler))
    raw = post()
    transport.send(raw[:-4])
    conn.close()
    assert not transport.closing
    transport.send(raw[-4:])
    await transport.until(lambda: transport.closing)
    assert served == [False]
    status, headers, body = parse(transport.writes[0])
    assert (status, headers["Connection"], body) == ("HTTP/1.1 200 OK", "close", b"last")
    assert transport.names()[:2] == ["write", "close"]


async def test_shutdown_waits_for_a_request_in_flight_and_closes_after_its_answer() -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    may_answer = loop.create_future()

    async def handler(request: FrontRequest) -> web.Response:
        started.set()
        await may_answer
        return web.Response(body=b"done")

    conn, transport = connect(make_server(handler))
    transport.send(post())
    await asyncio.wait_for(started.wait(), WAIT)
    stopping_started = asyncio.Event()

    async def stop() -> None:
        stopping_started.set()
        await conn.shutdown(WAIT)  # runs up to its wait in this same step

    stopping = loop.create_task(stop())
    await asyncio.wait_for(stopping_started.wait(), WAIT)
    assert not transport.closing
    may_answer.set_result(None)
    await asyncio.wait_for(stopping, WAIT)
    status, headers, body = parse(transport.writes[0])
    assert (status, headers["Connection"], body) == ("HTTP/1.1 200 OK", "close", b"done")
    assert transport.closing


async def test_shutdown_cancels_a_handler_that_outlives_the_grace() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    handler = waiting_forever(started, cancelled)

    conn, transport = connect(make_server(handler))
    transport.send(post())
    await asyncio.wait_for(started.wait(), WAIT)
    await asyncio.wait_for(conn.shutdown(SHORT), WAIT)
    assert cancelled.is_set()
    assert transport.closing
    assert transport.writes == []


# Back-pressure on pipelined bytes


async def test_pipelined_bytes_over_256_kib_pause_reading_until_the_answer_is_out() -> None:
    loop = asyncio.get_running_loop()
    first_may_answer = loop.create_future()
    started = asyncio.Event()
    bodies: list[int] = []

    async def handler(request: FrontRequest) -> web.Response:
        started.set()
        if request.path == "/v1/first":
            await first_may_answer
        bodies.append(len(await request.content.read()))
        return web.Response(body=b"ok")

    _conn, transport = connect(make_server(handler))
    transport.send(post("/v1/first"))
    await asyncio.wait_for(started.wait(), WAIT)
    second = post("/v1/second", b"z" * (300 * 1024))
    transport.send(second[: 200 * 1024])
    assert "pause_reading" not in transport.names()
    transport.send(second[200 * 1024 : HELD_MAX + 1])
    assert transport.names().count("pause_reading") == 1
    assert not transport.reading

    first_may_answer.set_result(None)
    await transport.until(lambda: transport.reading)
    assert transport.names()[-2:] == ["write", "resume_reading"]  # the answer, then reading again
    transport.send(second[HELD_MAX + 1 :])
    await transport.until(lambda: len(transport.writes) == 2)
    assert bodies == [len(b'{"model":"m"}'), 300 * 1024]
    assert transport.names().count("pause_reading") == 1


# Found while writing these tests (fixed in the front)


async def test_a_connection_handed_over_while_writing_is_paused_keeps_aiohttp_waiting_for_the_client() -> (
    None
):
    returned = asyncio.Event()

    async def streamed(request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"c" * 100_000)  # over aiohttp's 64 KiB: it drains, waiting if paused
        returned.set()
        await response.write_eof()
        return response

    async def big(request: FrontRequest) -> web.Response:
        return web.Response(body=b"b" * 2000)

    server = make_server(big)
    server.request_handler = streamed
    _conn, transport = connect(server)
    transport.buffer_limit = 1000  # the front's answer fills the client's window: pause_writing()
    transport.send(post() + b"GET /v1/files/f/content HTTP/1.1\r\nHost: gateway\r\n\r\n")
    await transport.until(lambda: any(len(data) >= 100_000 for data in transport.writes))
    assert transport.writing_paused
    assert not returned.is_set()  # aiohttp waits for the client like the front would
    transport.drain()
    await asyncio.wait_for(returned.wait(), WAIT)


async def test_a_204_answer_carries_no_content_length() -> None:
    async def handler(request: FrontRequest) -> web.Response:
        return web.Response(status=204)

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: bool(transport.writes))
    status, headers, _body = parse(transport.writes[0])
    assert status == "HTTP/1.1 204 No Content"
    assert "Content-Length" not in headers


class _RefuseAndRecord(Plugin):
    """Refuses every request (a local answer) and records, in its completion hook, what the client had."""

    name = "refuse_and_record"

    def __init__(self, transport: FakeTransport) -> None:
        self.transport = transport
        self.writes_at_completion: int | None = None

    def on_request(self, ctx: RequestContext) -> None:
        raise InvalidRequest("refused by the test")

    def on_complete(self, ctx: RequestContext) -> None:
        self.writes_at_completion = len(self.transport.writes)


async def test_the_model_api_answers_on_the_front_before_its_completion_phase() -> None:
    async def model_api(request: FrontRequest) -> web.StreamResponse:
        return await api.handle(request)

    _conn, transport = connect(make_server(model_api))
    plugin = _RefuseAndRecord(transport)
    api = ModelApi(PluginChain([plugin]), forwarder=None, catalog=None)  # type: ignore[arg-type]
    transport.send(post())
    await transport.until(lambda: plugin.writes_at_completion is not None)
    assert plugin.writes_at_completion == 1  # the answer was out when the completion phase ran
    status, _headers, body = parse(transport.writes[0])
    assert status == "HTTP/1.1 400 Bad Request" and b"refused by the test" in body
    assert len(transport.writes) == 1 and not transport.closing  # sent once; the connection stays open
