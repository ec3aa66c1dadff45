"""The counters' lean Redis connection (infra.redis_wire) against the real Redis: pipelined calls get
their own replies, unknown scripts are sent once, and an unreachable or silent Redis fails calls with
redis-py's ConnectionError (what the counters' fail_open handling expects)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
import time
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from modelgate.infra.redis_wire import RedisWire, Script
from tests.support.gateway import free_port


async def test_pipelined_calls_each_get_their_own_reply(redis_url: str) -> None:
    wire = RedisWire("127.0.0.1", 6379)
    try:
        replies = await asyncio.gather(*(wire.call("ECHO", f"call-{n}") for n in range(50)))
        assert replies == [f"call-{n}".encode() for n in range(50)]
    finally:
        wire.close()


async def test_a_script_redis_does_not_know_is_sent_once_then_called_by_its_sha(redis_url: str) -> None:
    wire = RedisWire("127.0.0.1", 6379)
    script = Script(f"-- {os.urandom(8).hex()}\nreturn {{KEYS[1], ARGV[1]}}")
    try:
        assert await wire.call("SCRIPT", "EXISTS", script.sha) == [0]
        assert await wire.script(script, ["k"], [7]) == [b"k", b"7"]
        assert await wire.call("SCRIPT", "EXISTS", script.sha) == [1]
        assert await wire.script(script, ["j"], [-3]) == [b"j", b"-3"]
    finally:
        wire.close()


async def test_an_error_reply_raises_and_the_connection_keeps_serving(redis_url: str) -> None:
    wire = RedisWire("127.0.0.1", 6379)
    try:
        with pytest.raises(ResponseError):
            await wire.call("NOT-A-COMMAND")
        assert await wire.call("PING") == b"PONG"
    finally:
        wire.close()


async def test_a_redis_that_cannot_be_reached_fails_the_call_with_a_connection_error() -> None:
    wire = RedisWire("127.0.0.1", free_port(), timeout=1.0)
    with pytest.raises(RedisConnectionError):
        await wire.call("PING")
    wire.close()


async def test_a_redis_that_does_not_answer_fails_the_call_after_the_timeout_and_reconnects() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    wire = RedisWire("127.0.0.1", silent.getsockname()[1], timeout=0.2)
    try:
        with pytest.raises(RedisConnectionError):
            await wire.call("PING")
        with pytest.raises(RedisConnectionError):  # a new connection, silent again
            await wire.call("PING")
    finally:
        wire.close()
        silent.close()


class _StandIn:
    """A stand-in Redis on its own thread, so it reads while the event loop is busy: it notes each read and
    answers every command (an ECHO, an array of two) with its position."""

    def __init__(self) -> None:
        self.reads: list[bytes] = []
        self.got = threading.Event()  # set by each read
        self._connection: socket.socket | None = None
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        self._connection = connection
        answered = 0
        with connection:
            while data := _received(connection):
                self.reads.append(data)
                count = data.count(b"*2\r\n")
                connection.sendall(b"".join(b":%d\r\n" % (answered + n) for n in range(count)))
                answered += count
                self.got.set()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.shutdown(socket.SHUT_RDWR)  # ends its recv
        self._listener.close()
        self._thread.join(timeout=5)


def _received(connection: socket.socket) -> bytes:
    try:
        return connection.recv(65536)
    except OSError:  # shut down by close()
        return b""


@pytest.fixture
async def stand_in() -> AsyncIterator[tuple[_StandIn, RedisWire]]:
    """A stand-in Redis and a wire to it, connected by one call and idle again."""
    redis = _StandIn()
    wire = RedisWire("127.0.0.1", redis.port)
    try:
        assert await wire.call("ECHO", "warm-up") == 0
        yield redis, wire
    finally:
        wire.close()
        redis.close()


async def test_a_call_on_an_idle_connection_is_written_before_the_turn_of_the_loop_ends(stand_in) -> None:
    redis, wire = stand_in
    seen_in_the_same_turn: list[bool] = []
    redis.got.clear()
    # Runs later in the call's own turn (scheduled before the call): a call left for the end of the turn
    # could not have reached Redis while it blocks the loop.
    asyncio.get_running_loop().call_soon(lambda: seen_in_the_same_turn.append(redis.got.wait(5)))
    assert await wire.call("ECHO", "alone") == 1
    assert seen_in_the_same_turn == [True]


async def test_a_call_made_while_one_reply_is_awaited_is_written_at_once_too(stand_in) -> None:
    redis, wire = stand_in
    both_seen_in_the_same_turn: list[bool] = []

    def both_arrived() -> bool:  # the warm-up and the two calls
        deadline = time.monotonic() + 5
        while b"".join(redis.reads).count(b"*2\r\n") < 3 and time.monotonic() < deadline:
            redis.got.wait(0.05)
            redis.got.clear()
        return b"".join(redis.reads).count(b"*2\r\n") == 3

    # A settlement batch on the idle connection, then the next request's admission while its reply is
    # awaited, made in one turn: both reach Redis within it (the check, scheduled after the two calls, blocks
    # the loop until they arrive or 5 s pass).
    calls = [asyncio.ensure_future(wire.call("ECHO", name)) for name in ("batch", "admission")]
    asyncio.get_running_loop().call_soon(lambda: both_seen_in_the_same_turn.append(both_arrived()))
    assert await asyncio.gather(*calls) == [1, 2]
    assert both_seen_in_the_same_turn == [True]


async def test_the_calls_of_one_turn_made_while_two_are_awaited_go_out_in_one_write_in_order(
    stand_in,
) -> None:
    redis, wire = stand_in
    redis.reads.clear()
    replies = await asyncio.gather(*(wire.call("ECHO", f"call-{n}") for n in range(20)))
    assert replies == list(range(1, 21))
    # The first call found the connection idle and the second one reply awaited: each went at once. The 18
    # made in the same turn while two replies were awaited went in one write (Redis may read the writes as
    # fewer).
    commands = b"".join(redis.reads)
    assert [int(n) for n in re.findall(rb"call-(\d+)", commands)] == list(range(20))
    assert len(redis.reads) <= 3
    if len(redis.reads) == 3:
        assert [read.count(b"*2\r\n") for read in redis.reads] == [1, 1, 18]
