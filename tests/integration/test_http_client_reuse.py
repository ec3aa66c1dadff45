"""A kept-alive connection goes back to the pool only in a state fit for the next request: never with reading
paused by back-pressure, never with bytes of another answer on it. Each test reuses one connection (pool
limit 1) after an answer that ended in one of those states; a connection pooled paused would leave the
next request waiting for its first byte until the timeout.
"""

from __future__ import annotations

import contextlib

from modelgate.proxy.upstream.http_client import ConnectionPool, HttpClient
from tests.fakes.loopback_http import (
    PATIENT,
    LoopbackServer,
    ReceivedRequest,
    ServerConnection,
    answer,
    bounded,
)

# Above the client's back-pressure threshold (256 KiB): the client pauses reading while it buffers this.
LARGE = bytes(range(256)) * (300 * 1024 // 256)
# The wait for the next answer's first byte: far longer than a loopback answer takes, far shorter than the
# test's bound, so a paused connection fails the test with UpstreamTimeout instead of hanging it.
FIRST_BYTE = 2.0


async def _large_then_small(conn: ServerConnection, request: ReceivedRequest) -> None:
    conn.send(answer(LARGE if request.request_line.startswith("GET /large ") else b"small"))


def _one_connection_pool(server: LoopbackServer) -> ConnectionPool:
    return ConnectionPool("127.0.0.1", server.port, tls=None, limit=1, connect_timeout=PATIENT)


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode()


async def _small(client: HttpClient) -> tuple[int, bytes]:
    reply = await client.request(_get("/small"), None, FIRST_BYTE)
    return reply.status, await reply.read()


@bounded
async def test_a_connection_whose_large_answer_was_read_whole_serves_the_next_request() -> None:
    async with LoopbackServer(_large_then_small) as server:
        with contextlib.closing(_one_connection_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get("/large"), None, FIRST_BYTE)
            body = await reply.read()
            following = [await _small(client), await _small(client)]

    assert body == LARGE
    assert following == [(200, b"small")] * 2
    assert len(server.connections) == 1


@bounded
async def test_a_connection_released_with_part_of_a_large_answer_unread_serves_the_next_request() -> None:
    async with LoopbackServer(_large_then_small) as server:
        with contextlib.closing(_one_connection_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get("/large"), None, FIRST_BYTE)
            # As the forwarder reads an error body: a bounded prefix, then lets go. Asking for all but the
            # last byte returns only once the whole answer is in (the last bytes end the message).
            head = await reply.read(len(LARGE) - 1)
            reply.release()
            following = await _small(client)

    assert head == LARGE[:-1]
    assert following == (200, b"small")
    assert len(server.connections) == 1


@bounded
async def test_a_stream_consumer_that_leaves_while_reading_is_paused_frees_the_place_for_a_new_one() -> None:
    async def endless_chunks(conn: ServerConnection, request: ReceivedRequest) -> None:
        if not request.request_line.startswith("GET /stream "):
            conn.send(answer(b"small"))
            return
        conn.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        conn.send(b"%x\r\n%s\r\n" % (len(LARGE), LARGE))  # and never the last chunk

    async with LoopbackServer(endless_chunks) as server:
        with contextlib.closing(_one_connection_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get("/stream"), None, FIRST_BYTE)
            async for _ in reply.iter_any():
                break  # the consumer leaves after its first piece, the answer unfinished
            reply.release()
            following = await _small(client)

    assert following == (200, b"small")
    assert len(server.connections) == 2  # the unfinished one was closed, never reused


@bounded
async def test_bytes_past_the_end_of_an_answer_are_not_taken_as_part_of_it_or_kept_for_the_next() -> None:
    async def answers_twice(conn: ServerConnection, request: ReceivedRequest) -> None:
        if request.request_line.startswith("GET /first "):
            # An answer, and in the same write a second one nobody asked for.
            conn.send(answer(b"first") + answer(b"spoof"))
            return
        conn.send(answer(b"second"))

    async with LoopbackServer(answers_twice) as server:
        with contextlib.closing(_one_connection_pool(server)) as pool:
            client = HttpClient(pool, read_timeout=PATIENT)
            reply = await client.request(_get("/first"), None, FIRST_BYTE)
            first = (reply.status, await reply.read())
            second_reply = await client.request(_get("/second"), None, FIRST_BYTE)
            second = (second_reply.status, await second_reply.read())

    assert first == (200, b"first")
    assert second == (200, b"second")
    assert len(server.connections) == 2
