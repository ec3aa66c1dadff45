"""The counters' lean Redis connection (domain.redis_wire) against the real Redis: pipelined calls get
their own replies, unknown scripts are sent once, and an unreachable or silent Redis fails calls with
redis-py's ConnectionError (what the counters' fail_open handling expects)."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from modelgate.domain.redis_wire import RedisWire, Script
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


async def test_the_calls_of_one_turn_of_the_loop_go_out_in_one_write_and_keep_their_order() -> None:
    # A stand-in Redis that notes each read and answers every command it got with its position.
    reads: list[bytes] = []
    answered = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        while data := await reader.read(65536):
            reads.append(data)
            count = data.count(b"*2\r\n")  # each ECHO is an array of two
            writer.write(b"".join(b":%d\r\n" % (answered + n) for n in range(count)))
            answered += count

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    wire = RedisWire("127.0.0.1", port)
    try:
        assert await wire.call("ECHO", "warm-up") == 0  # connected: the next calls share a turn
        reads.clear()
        replies = await asyncio.gather(*(wire.call("ECHO", f"call-{n}") for n in range(20)))
        assert replies == list(range(1, 21))
        assert len(reads) == 1 and reads[0].count(b"*2\r\n") == 20
        assert await wire.call("ECHO", "alone") == 21  # a lone call still goes out at the end of its turn
    finally:
        wire.close()
        server.close()
        await server.wait_closed()
