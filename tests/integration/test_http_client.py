"""The upstream HTTP/1.1 client (proxy.upstream.http_client), tested on the wire against raw loopback servers:
keep-alive and the pool's limit, the three ways a body ends, broken and stalled providers, cancellation,
interim answers, back-pressure, keep-alive expiry and TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from modelgate.proxy.upstream.http_client import (
    ConnectionPool,
    HttpClient,
    UpstreamAnswer,
    UpstreamBrokeOff,
    UpstreamTimeout,
)
from tests.fakes.loopback_http import (
    MIB,
    PATIENT,
    SHORT,
    LoopbackServer,
    ReceivedRequest,
    ServerConnection,
    answer,
    bounded,
    chunk,
    never_answer,
)
from tests.support.tls_files import self_signed_certificate


def _pool(
    server: LoopbackServer,
    *,
    limit: int = 10,
    keepalive_seconds: float = 30.0,
    tls: ssl.SSLContext | None = None,
) -> ConnectionPool:
    return ConnectionPool(
        "127.0.0.1",
        server.port,
        tls=tls,
        limit=limit,
        connect_timeout=PATIENT,
        keepalive_seconds=keepalive_seconds,
    )


def _get(path: str = "/x") -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode()


async def _fetch(client: HttpClient, path: str = "/x") -> tuple[int, bytes]:
    reply = await client.request(_get(path), None, PATIENT)
    return reply.status, await reply.read()


async def _echo_request_line(conn: ServerConnection, request: ReceivedRequest) -> None:
    conn.send(answer(request.request_line.encode()))


def _echoed(path: str) -> tuple[int, bytes]:
    return 200, f"GET {path} HTTP/1.1".encode()


# Keep-alive and the pool's limit


@bounded
async def test_sequential_requests_reuse_one_kept_alive_connection() -> None:
    async with LoopbackServer(_echo_request_line) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            results = [await _fetch(client, f"/r{i}") for i in range(5)]
            sizes = (pool.size, pool.idle)

    assert results == [_echoed(f"/r{i}") for i in range(5)]
    assert len(server.connections) == 1
    assert len(server.connections[0].requests) == 5
    assert sizes == (1, 1)


@bounded
async def test_the_pool_never_opens_more_connections_than_its_limit() -> None:
    release = asyncio.Event()

    async def held_until_released(conn: ServerConnection, request: ReceivedRequest) -> None:
        await release.wait()
        conn.send(answer(request.request_line.encode()))

    async with LoopbackServer(held_until_released) as server:
        with contextlib.closing(_pool(server, limit=2)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            tasks = [asyncio.create_task(_fetch(client, f"/r{i}")) for i in range(6)]
            # Every task has asked the pool for a connection before any connection could be opened.
            await server.wait_for_requests(2)
            while_held = (pool.size, len(server.connections))
            release.set()
            results = await asyncio.gather(*tasks)

    assert while_held == (2, 2)
    assert sorted(results) == sorted(_echoed(f"/r{i}") for i in range(6))
    assert (server.most_open, len(server.connections)) == (2, 2)
    assert sum(len(c.requests) for c in server.connections) == 6


@bounded
async def test_a_request_cancelled_while_waiting_for_a_connection_gives_up_its_place() -> None:
    release = asyncio.Event()

    async def held_until_released(conn: ServerConnection, request: ReceivedRequest) -> None:
        await release.wait()
        conn.send(answer(request.request_line.encode()))

    async with LoopbackServer(held_until_released) as server:
        with contextlib.closing(_pool(server, limit=1)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            first = asyncio.create_task(_fetch(client, "/a"))
            await server.wait_for_requests(1)
            waiting = await _started(_fetch(client, "/b"))
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            release.set()
            assert await first == _echoed("/a")
            assert await _fetch(client, "/c") == _echoed("/c")

    assert [r.request_line for r in server.requests] == ["GET /a HTTP/1.1", "GET /c HTTP/1.1"]
    assert len(server.connections) == 1


@bounded
async def test_requests_sent_in_one_pass_of_the_loop_all_reach_the_provider_whole_and_in_order() -> None:
    # Under load several requests are sent in one pass: the first goes at once, the others wait in the outbox
    # (modelgate/proxy/http/outbox.py) for the start of the next pass, each with its body, on its own
    # connection.
    async def echo_body(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(answer(request.request_line.encode() + b" " + request.body))

    async with LoopbackServer(echo_body) as server:
        with contextlib.closing(_pool(server, limit=4)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)

            async def post(n: int) -> tuple[int, bytes]:
                body = b"body %d " % n + b"x" * (n * 1000)
                head = b"POST /p%d HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: %d\r\n\r\n" % (n, len(body))
                reply = await client.request(head, body, PATIENT)
                return reply.status, await reply.read()

            warm = await asyncio.gather(*(post(n) for n in range(4)))  # four connections, kept alive
            idle_after_warming = pool.idle
            # Four tasks started together take their first steps, and send, in the same pass.
            in_one_pass = await asyncio.gather(*(post(n) for n in range(4, 8)))

    expected = [(200, b"POST /p%d HTTP/1.1 body %d " % (n, n) + b"x" * (n * 1000)) for n in range(8)]
    assert warm + in_one_pass == expected
    assert idle_after_warming == 4
    assert len(server.connections) == 4  # the second four went over the kept-alive connections


async def _started(work: Awaitable[Any]) -> asyncio.Task:
    """A task running `work`, returned once it has run up to its first real wait."""
    started = asyncio.Event()

    async def run() -> Any:
        started.set()
        return await work

    task = asyncio.create_task(run())
    await started.wait()
    return task


# How a body ends


@bounded
async def test_a_content_length_body_can_be_read_n_bytes_at_a_time() -> None:
    async def ten_bytes(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(answer(b"0123456789"))

    async with LoopbackServer(ten_bytes) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get(), None, PATIENT)
            pieces = [await reply.read(4), await reply.read(4), await reply.read()]
            again = await _fetch(client)

    assert pieces == [b"0123", b"4567", b"89"]
    assert again == (200, b"0123456789")
    assert len(server.connections) == 1


@bounded
async def test_a_chunked_body_is_yielded_as_it_arrives_and_the_connection_kept() -> None:
    client_saw_first = asyncio.Event()

    async def two_chunks(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"first"))
        await client_saw_first.wait()  # the rest only once the client has yielded the first chunk
        conn.send(chunk(b"second") + chunk(b""))

    async with LoopbackServer(two_chunks) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get(), None, PATIENT)
            pieces = []
            async for piece in reply.iter_any():
                pieces.append(piece)
                client_saw_first.set()
            reply.release()
            again = await _fetch(client)

    assert pieces[0] == b"first"
    assert b"".join(pieces) == b"firstsecond"
    assert again == (200, b"firstsecond")
    assert len(server.connections) == 1


@bounded
async def test_at_eof_is_true_only_once_the_whole_body_is_in_and_taken() -> None:
    client_saw_first = asyncio.Event()

    async def two_chunks(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"first"))
        await client_saw_first.wait()
        conn.send(chunk(b"second") + chunk(b""))

    async with LoopbackServer(two_chunks) as server:
        with contextlib.closing(_pool(server)) as pool:
            reply = await HttpClient(pool, read_timeout=PATIENT).request(_get(), None, PATIENT)
            at_eof_after = []
            async for _piece in reply.iter_any():
                at_eof_after.append(reply.at_eof())
                client_saw_first.set()
            ended = reply.at_eof()
            reply.release()

    assert at_eof_after[0] is False  # the rest had not been sent yet
    assert ended is True


@bounded
async def test_a_body_delimited_by_the_end_of_the_connection_is_read_whole() -> None:
    async def until_close(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nread to the ")
        await conn.writer.drain()
        conn.send(b"end of the connection")
        conn.close()

    async with LoopbackServer(until_close) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            results = [await _fetch(client), await _fetch(client)]

    assert results == [(200, b"read to the end of the connection")] * 2
    assert len(server.connections) == 2


@bounded
async def test_an_answer_saying_connection_close_is_not_reused() -> None:
    async def says_close(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(answer(b"bye", headers=("connection: close",)))  # but leaves the connection open

    async with LoopbackServer(says_close) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            results = [await _fetch(client), await _fetch(client)]
            await server.connections[0].ended.wait()

    assert results == [(200, b"bye")] * 2
    assert len(server.connections) == 2
    assert len(server.connections[0].requests) == 1
    assert server.connections[0].client_closed


# Providers that close, break off or talk nonsense


@bounded
async def test_a_kept_alive_connection_the_server_closed_while_idle_is_replaced() -> None:
    async with LoopbackServer(_echo_request_line) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            first = await _fetch(client, "/a")
            server.connections[0].close()
            await server.connections[0].ended.wait()
            second = await _fetch(client, "/b")

    assert (first, second) == (_echoed("/a"), _echoed("/b"))
    assert len(server.connections) == 2
    assert [len(c.requests) for c in server.connections] == [1, 1]


@bounded
async def test_a_reused_connection_closed_before_any_answer_is_retried_once_on_a_new_one() -> None:
    async def closes_on_its_second_request(conn: ServerConnection, request: ReceivedRequest) -> None:
        if conn.index == 0 and len(conn.requests) == 2:
            conn.close()  # as a keep-alive timeout racing the request would
            return
        conn.send(answer(f"{conn.index} {request.request_line}".encode()))

    async with LoopbackServer(closes_on_its_second_request) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            results = [await _fetch(client, "/a"), await _fetch(client, "/b")]

    assert results == [(200, b"0 GET /a HTTP/1.1"), (200, b"1 GET /b HTTP/1.1")]
    assert [[r.request_line for r in c.requests] for c in server.connections] == [
        ["GET /a HTTP/1.1", "GET /b HTTP/1.1"],
        ["GET /b HTTP/1.1"],
    ]


@bounded
async def test_a_reused_connection_that_breaks_off_mid_answer_is_not_retried() -> None:
    async def breaks_off_its_second_answer(conn: ServerConnection, request: ReceivedRequest) -> None:
        if len(conn.requests) == 2:
            conn.send(b"HTTP/1.1 200 OK\r\ncontent-len")
            conn.close()
            return
        conn.send(answer(b"whole"))

    async with LoopbackServer(breaks_off_its_second_answer) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            first = await _fetch(client, "/a")
            with pytest.raises(UpstreamBrokeOff) as broke:
                await client.request(_get("/b"), None, PATIENT)
            size = pool.size

    assert first == (200, b"whole")
    assert type(broke.value) is UpstreamBrokeOff
    assert [r.request_line for r in server.requests] == ["GET /a HTTP/1.1", "GET /b HTTP/1.1"]
    assert len(server.connections) == 1
    assert size == 0


@bounded
async def test_a_new_connection_closed_before_any_answer_is_not_retried() -> None:
    async def closes(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.close()

    async with LoopbackServer(closes) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            with pytest.raises(UpstreamBrokeOff) as broke:
                await client.request(_get(), None, PATIENT)

    assert type(broke.value) is UpstreamBrokeOff
    assert len(server.requests) == 1
    assert len(server.connections) == 1


@bounded
async def test_a_body_cut_short_raises_upstream_broke_off_from_read() -> None:
    async def cut_short(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")
        conn.close()

    async with LoopbackServer(cut_short) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get(), None, PATIENT)
            with pytest.raises(UpstreamBrokeOff) as broke:
                await reply.read()
            reply.close()
            size = pool.size

    assert reply.status == 200
    assert type(broke.value) is UpstreamBrokeOff
    assert size == 0


@bounded
async def test_a_chunked_body_cut_short_raises_upstream_broke_off_after_what_arrived() -> None:
    async def cut_short(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"partial"))
        conn.close()

    async with LoopbackServer(cut_short) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get(), None, PATIENT)
            pieces = []
            with pytest.raises(UpstreamBrokeOff) as broke:
                async for piece in reply.iter_any():
                    pieces.append(piece)
            reply.close()

    assert pieces == [b"partial"]
    assert type(broke.value) is UpstreamBrokeOff


@bounded
async def test_a_malformed_answer_raises_upstream_broke_off_and_drops_the_connection() -> None:
    async def nonsense(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"this is not http at all\r\n\r\n")

    async with LoopbackServer(nonsense) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            with pytest.raises(UpstreamBrokeOff) as broke:
                await client.request(_get(), None, PATIENT)
            size = pool.size
            await server.connections[0].ended.wait()

    assert type(broke.value) is UpstreamBrokeOff
    assert "malformed" in str(broke.value)
    assert size == 0
    assert server.connections[0].client_closed
    assert len(server.requests) == 1  # not retried


@bounded
async def test_a_malformed_chunk_raises_upstream_broke_off_from_iter_any() -> None:
    async def bad_chunk_size(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"good"))
        await conn.writer.drain()
        conn.send(b"zz\r\nbad\r\n")

    async with LoopbackServer(bad_chunk_size) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get(), None, PATIENT)
            pieces = []
            with pytest.raises(UpstreamBrokeOff) as broke:
                async for piece in reply.iter_any():
                    pieces.append(piece)
            reply.close()
            await server.connections[0].ended.wait()

    assert b"".join(pieces) == b"good"
    assert "malformed" in str(broke.value)
    assert server.connections[0].client_closed


@bounded
async def test_bytes_arriving_on_an_idle_connection_make_the_client_drop_it() -> None:
    async with LoopbackServer(_echo_request_line) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            first = await _fetch(client, "/a")
            # As nginx does when its keep-alive timeout ends: an unasked-for 408, connection left open.
            server.connections[0].send(answer(b"", status="408 Request Timeout"))
            await server.connections[0].ended.wait()
            second = await _fetch(client, "/b")

    assert (first, second) == (_echoed("/a"), _echoed("/b"))
    assert server.connections[0].client_closed
    assert [len(c.requests) for c in server.connections] == [1, 1]


# Timeouts and cancellation


@bounded
async def test_no_answer_within_the_first_byte_timeout_raises_upstream_timeout_and_closes() -> None:
    async with LoopbackServer(never_answer) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            with pytest.raises(UpstreamTimeout):
                await client.request(_get(), None, SHORT)
            size = pool.size
            await server.connections[0].ended.wait()

    assert size == 0
    assert server.connections[0].client_closed
    assert len(server.requests) == 1


@bounded
async def test_a_body_that_stalls_between_chunks_raises_upstream_timeout_from_iter_any() -> None:
    async def stalls_after_one_chunk(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"first"))

    async with LoopbackServer(stalls_after_one_chunk) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=SHORT)
            reply = await client.request(_get(), None, PATIENT)
            pieces = aiter(reply.iter_any())
            first = await anext(pieces)
            with pytest.raises(UpstreamTimeout):
                await anext(pieces)
            size = pool.size
            await server.connections[0].ended.wait()

    assert first == b"first"
    assert size == 0
    assert server.connections[0].client_closed


@bounded
async def test_a_body_that_stalls_raises_upstream_timeout_from_read() -> None:
    async def stalls_mid_body(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")

    async with LoopbackServer(stalls_mid_body) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=SHORT)
            reply = await client.request(_get(), None, PATIENT)
            with pytest.raises(UpstreamTimeout):
                await reply.read()
            await server.connections[0].ended.wait()

    assert server.connections[0].client_closed


@bounded
async def test_cancelling_a_request_waiting_for_its_answer_closes_the_connection_at_once() -> None:
    async with LoopbackServer(never_answer) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            waiting = asyncio.create_task(client.request(_get(), None, None))
            await server.wait_for_requests(1)
            size_while_waiting = pool.size
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            size_after = pool.size
            await server.connections[0].ended.wait()

    assert (size_while_waiting, size_after) == (1, 0)
    assert server.connections[0].client_closed


# Answers' heads


@bounded
async def test_an_early_hints_answer_alone_does_not_end_the_wait_for_the_real_one() -> None:
    async def hints_only(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n")

    async with LoopbackServer(hints_only) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            with pytest.raises(UpstreamTimeout):
                await client.request(_get(), None, SHORT)


@bounded
async def test_an_early_hints_answer_before_the_real_one_is_skipped() -> None:
    async def hints_first(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n")
        await conn.writer.drain()
        conn.send(answer(b"real", status="201 Created", headers=("x-kind: final",)))

    async with LoopbackServer(hints_first) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get(), None, PATIENT)
            head = (reply.status, reply.headers)
            body = await reply.read()
            again = await _fetch(client)

    assert head == (201, {"content-length": "4", "x-kind": "final"})
    assert body == b"real"
    assert again == (201, b"real")
    assert len(server.connections) == 1


@bounded
async def test_header_names_are_lower_case_and_repeated_headers_joined() -> None:
    async def mixed_case(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Trace: a\r\nx-TRACE: b\r\n"
            b"Content-Length: 2\r\n\r\n{}"
        )

    async with LoopbackServer(mixed_case) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get(), None, PATIENT)
            headers = reply.headers
            await reply.read()

    assert headers == {"content-type": "application/json", "x-trace": "a, b", "content-length": "2"}


# Back-pressure


@bounded
async def test_a_consumer_that_does_not_read_stops_the_client_reading_until_it_does() -> None:
    body = bytes(range(256)) * (40 * MIB // 256)
    drained = asyncio.Event()

    async def large_body(conn: ServerConnection, request: ReceivedRequest) -> None:
        if request.request_line != "GET /large HTTP/1.1":
            conn.send(answer(b"small"))
            return
        # A small send buffer, so what the kernels hold in between is bounded by the client's side.
        conn.writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        conn.send(answer(body))
        await conn.writer.drain()
        drained.set()

    async with LoopbackServer(large_body) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get("/large"), None, PATIENT)
            # The one look inside: whether the client's transport still reads. It must stop on its own,
            # with the consumer reading nothing; each turn of this loop lets the event loop run once.
            client_side = reply._conn.transport
            while client_side.is_reading():  # noqa: ASYNC110 - no event to wait on: pausing is the client's own
                await asyncio.sleep(0)
            held_back = server.connections[0].transport.get_write_buffer_size()
            other_work = await _fetch(client, "/small")  # the loop goes on; the paused answer stays paused
            still_held_back = (
                client_side.is_reading(),
                server.connections[0].transport.get_write_buffer_size(),
            )
            drained_while_paused = drained.is_set()
            pieces = [piece async for piece in reply.iter_any()]
            reply.release()
            await drained.wait()

    # Of the 40 MiB the server wrote, the kernels can hold at most the client's receive buffer (tcp_rmem's
    # maximum, 32 MiB here) and the server's small send buffer; the client itself holds under 1 MiB.
    assert held_back > 4 * MIB
    assert other_work == (200, b"small")
    assert still_held_back[0] is False and still_held_back[1] > 4 * MIB
    assert not drained_while_paused
    assert b"".join(pieces) == body
    # Never more than the pause threshold (256 KiB) plus one read of the transport buffered at a time.
    assert max(len(p) for p in pieces) <= MIB


@bounded
async def test_read_takes_a_whole_body_larger_than_the_back_pressure_threshold() -> None:
    body = bytes(range(256)) * (4 * MIB // 256)

    async def large_body(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(answer(body))

    async with LoopbackServer(large_body) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=2.0)
            result = await _fetch(client)

    assert result == (200, body)


@bounded
async def test_read_n_takes_more_than_the_back_pressure_threshold_at_once() -> None:
    body = bytes(range(256)) * (2 * MIB // 256)

    async def large_body(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(answer(body))

    async with LoopbackServer(large_body) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=2.0)
            reply = await client.request(_get(), None, PATIENT)
            first = await reply.read(MIB)
            rest = await reply.read()

    assert (first, rest) == (body[:MIB], body[MIB:])


# The pool's life


@bounded
async def test_an_idle_connection_is_closed_once_its_keep_alive_has_passed() -> None:
    async with LoopbackServer(_echo_request_line) as server:
        with contextlib.closing(_pool(server, keepalive_seconds=SHORT)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            await _fetch(client)
            idle_after_answer = pool.idle
            await server.connections[0].ended.wait()  # closed by the pool's sweeper, nobody else
            sizes = (pool.size, pool.idle)
            again = await _fetch(client, "/again")

    assert idle_after_answer == 1
    assert server.connections[0].client_closed
    assert sizes == (0, 0)
    assert again == _echoed("/again")
    assert len(server.connections) == 2


@bounded
async def test_closing_the_pool_closes_idle_connections_and_refuses_new_requests() -> None:
    async with LoopbackServer(_echo_request_line) as server:
        pool = _pool(server)
        client = HttpClient(pool, read_timeout=PATIENT)
        await _fetch(client)
        pool.close()
        size = pool.size
        await server.connections[0].ended.wait()
        with pytest.raises(UpstreamBrokeOff):
            await client.request(_get(), None, PATIENT)

    assert size == 0
    assert server.connections[0].client_closed
    assert len(server.connections) == 1


@bounded
async def test_closing_the_pool_fails_requests_in_flight_and_waiting() -> None:
    async def holds_the_first_connection(conn: ServerConnection, request: ReceivedRequest) -> None:
        if conn.index > 0:  # a connection opened after close() would be answered at once
            conn.send(answer(b"should never be asked"))

    async with LoopbackServer(holds_the_first_connection) as server:
        pool = _pool(server, limit=1)
        client = HttpClient(pool, read_timeout=PATIENT)
        in_flight = asyncio.create_task(_fetch(client, "/a"))
        await server.wait_for_requests(1)
        waiting = await _started(_fetch(client, "/b"))
        pool.close()
        outcomes = await asyncio.gather(in_flight, waiting, return_exceptions=True)
        await server.connections[0].ended.wait()
        size = pool.size

    assert [type(o) for o in outcomes] == [UpstreamBrokeOff, UpstreamBrokeOff]
    assert len(server.connections) == 1
    assert [r.request_line for r in server.requests] == ["GET /a HTTP/1.1"]
    assert size == 0


# TLS


@bounded
async def test_a_connection_still_opening_when_the_pool_closes_is_closed_too() -> None:
    async with LoopbackServer(_echo_request_line) as server:
        pool = _pool(server)
        client = HttpClient(pool, read_timeout=PATIENT)
        opening = await _started(client.request(_get(), None, PATIENT))  # waits inside the connect
        pool.close()
        with pytest.raises(UpstreamBrokeOff):
            await opening
        for conn in server.connections:
            await conn.ended.wait()
        size = pool.size

    assert server.requests == []
    assert all(conn.client_closed for conn in server.connections)
    assert size == 0


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    return self_signed_certificate(tmp_path_factory.mktemp("tls"), "modelgate test provider")


def _tls_server_context(tls_files: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls_files)
    return context


@bounded
async def test_an_https_pool_trusting_the_providers_certificate_keeps_its_connection(
    tls_files: tuple[Path, Path],
) -> None:
    trusting = ssl.create_default_context(cafile=str(tls_files[0]))
    async with LoopbackServer(_echo_request_line, ssl_context=_tls_server_context(tls_files)) as server:
        with contextlib.closing(_pool(server, tls=trusting)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            results = [await _fetch(client, "/a"), await _fetch(client, "/b")]

    assert results == [_echoed("/a"), _echoed("/b")]
    assert len(server.connections) == 1


@bounded
async def test_an_https_pool_refuses_a_certificate_it_does_not_trust(tls_files: tuple[Path, Path]) -> None:
    async with LoopbackServer(_echo_request_line, ssl_context=_tls_server_context(tls_files)) as server:
        with contextlib.closing(_pool(server, tls=ssl.create_default_context())) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            with pytest.raises(ssl.SSLCertVerificationError):
                await client.request(_get(), None, PATIENT)
            size = pool.size

    assert server.requests == []
    assert size == 0


# Memory


@bounded
async def test_an_answer_read_to_its_end_is_freed_without_the_garbage_collector() -> None:
    # A reference cycle per answer (it once referred to itself as its own `content`) left every request's
    # answer for the collector: thousands of cyclic objects a second under load, and their collections.
    async with LoopbackServer(_echo_request_line) as server:
        with contextlib.closing(_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            gc.collect()
            gc.disable()
            try:
                for _ in range(3):
                    reply = await client.request(_get(), None, PATIENT)
                    assert (reply.status, await reply.read()) == _echoed("/x")
                del reply
                left = [o for o in gc.get_objects() if isinstance(o, UpstreamAnswer)]
            finally:
                gc.enable()

    assert left == []


# Piping (the stream relay's path: pieces handed over from the connection's callback)


def _chunked_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


async def _piping(reply: UpstreamAnswer, sink: Any) -> asyncio.Future[None]:
    """`reply.pipe(sink)` running: its task has taken its first step (the sink is in place) on return."""
    piping = asyncio.ensure_future(reply.pipe(sink))
    await asyncio.sleep(0)  # one turn of the loop: the task's first step runs (not a timing wait)
    return piping


@bounded
async def test_a_piped_answer_hands_each_piece_over_and_leaves_its_last_to_the_reader() -> None:
    took: list[bytes] = []
    piped, taken = asyncio.Event(), asyncio.Event()

    def sink(piece: bytes) -> bool:
        took.append(piece)
        taken.set()
        return True

    async def piece_by_piece(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(_chunked_head() + chunk(b"first"))
        await piped.wait()
        for piece in (b"second", b"third"):
            conn.send(chunk(piece))
            await taken.wait()  # the next once this one was handed over: separate reads
            taken.clear()
        conn.send(chunk(b"last") + chunk(b""))

    async with LoopbackServer(piece_by_piece) as server:
        with contextlib.closing(_pool(server)) as pool:
            reply = await HttpClient(pool, read_timeout=PATIENT).request(_get(), None, PATIENT)
            pieces = aiter(reply.iter_any())
            first = await anext(pieces)
            piping = await _piping(reply, sink)
            piped.set()
            await piping  # returns when the answer ends
            rest = [piece async for piece in pieces]
            reply.release()
            kept_alive = pool.idle

    assert (first, took, rest) == (b"first", [b"second", b"third"], [b"last"])
    assert kept_alive == 1  # read to its end: its connection is back in the pool


@bounded
async def test_a_sink_that_refuses_stops_the_piping_and_the_reader_reads_on() -> None:
    took: list[bytes] = []
    piped, refused = asyncio.Event(), asyncio.Event()

    def refusing_sink(piece: bytes) -> bool:
        took.append(piece)
        refused.set()
        return False  # as the relay's does when the client is behind

    async def pieces_on_demand(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(_chunked_head() + chunk(b"first"))
        await piped.wait()
        conn.send(chunk(b"second"))
        await refused.wait()
        conn.send(chunk(b"after") + chunk(b""))

    async with LoopbackServer(pieces_on_demand) as server:
        with contextlib.closing(_pool(server)) as pool:
            reply = await HttpClient(pool, read_timeout=PATIENT).request(_get(), None, PATIENT)
            pieces = aiter(reply.iter_any())
            await anext(pieces)
            piping = await _piping(reply, refusing_sink)
            piped.set()
            await piping
            rest = b"".join([piece async for piece in pieces])

    assert took == [b"second"]
    assert rest == b"after"


@bounded
async def test_a_piped_answer_times_out_a_read_timeout_after_its_last_piece_not_its_first() -> None:
    took: list[bytes] = []

    def sink(piece: bytes) -> bool:
        took.append(piece)
        return True

    async def steady_then_silent(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.send(_chunked_head() + chunk(b"first"))
        for index in range(6):  # 6 x SHORT / 2: longer in all than the read timeout (SHORT)
            await asyncio.sleep(SHORT / 2)  # the provider's pace, not a synchronisation
            conn.send(chunk(b"piece %d" % index))

    async with LoopbackServer(steady_then_silent) as server:
        with contextlib.closing(_pool(server)) as pool:
            reply = await HttpClient(pool, read_timeout=SHORT).request(_get(), None, PATIENT)
            pieces = aiter(reply.iter_any())
            await anext(pieces)
            await reply.pipe(sink)
            with pytest.raises(UpstreamTimeout):
                await anext(pieces)

    assert took == [b"piece %d" % index for index in range(6)]
