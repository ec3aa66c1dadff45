"""The lean HTTP front (modelgate/proxy/http/front.py): which requests it serves itself and which it hands to
aiohttp, its deadlines, disconnects, back-pressure and graceful stop (the answers it writes:
test_front_answers.py).

Each test drives a real `FrontConnection` from a real `GuardedServer` on the test's event loop, over a fake
transport that records what the front does to it; waits are on events, bounded by `asyncio.wait_for`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from modelgate.proxy.http.connection_guard import EdgeLimits, GuardedConnection
from modelgate.proxy.http.front_request import FrontRequest
from tests.support.front_wire import (
    HELD_MAX,
    SHORT,
    WAIT,
    AiohttpSide,
    connect,
    connections_closed_afterwards,  # noqa: F401 (an autouse fixture)
    echo,
    make_server,
    never_called,
    parse,
    post,
)

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
        pytest.param(
            post(headers=("Connection: Upgrade", "Upgrade: websocket")),
            ("POST", "/v1/chat/completions", "1.1", b'{"model":"m"}'),
            id="upgrade",
        ),
        pytest.param(
            post().replace(b"Content-Length: 13", b"Content-Length: 0000000000013"),
            ("POST", "/v1/chat/completions", "1.1", b'{"model":"m"}'),
            id="length-in-more-digits-than-1-MiB-has",
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
