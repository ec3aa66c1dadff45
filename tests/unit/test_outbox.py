"""Socket writes gathered per pass of the event loop (modelgate/proxy/http/outbox.py), and the front's use of
them: the first write of a pass goes out at once, the rest at the start of the next pass (or mid-pass, once a
long pass has held them too long), and whatever the front does to a connection later (a close, a hand-over)
comes after the bytes it queued; a client gone meanwhile is written nothing, and neither is a provider whose
connection the lean client aborted meanwhile.

"The same pass" is made the way it happens under load: several handlers woken by one event run one after
another before the loop polls again, and an observer woken last sees what each wrote by then.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from modelgate.proxy.http import outbox as outbox_module
from modelgate.proxy.http.front_request import FrontRequest
from modelgate.proxy.http.outbox import Outbox, outbox_for
from modelgate.proxy.upstream.http_client import ConnectionPool, _Connection
from tests.support.front_wire import (
    WAIT,
    AiohttpSide,
    FakeTransport,
    connect,
    connections_closed_afterwards,  # noqa: F401 (an autouse fixture)
    make_server,
    parse,
    post,
)


class Recorder:
    """A writer that notes in `log` when the outbox flushes it."""

    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    def flush_out(self) -> None:
        self.log.append(self.name)
        if self.fail:
            raise OSError("the connection broke")


async def _next_pass() -> None:
    await asyncio.sleep(0)


async def test_the_first_write_of_a_pass_goes_now_and_the_others_at_the_start_of_the_next_pass() -> None:
    log: list[str] = []
    outbox = Outbox(asyncio.get_running_loop())
    asyncio.get_running_loop().call_soon(log.append, "a callback queued before the first write")

    firsts = [outbox.first(), outbox.first(), outbox.first()]
    outbox.queue(Recorder("second", log))
    outbox.queue(Recorder("third", log))
    asyncio.get_running_loop().call_soon(log.append, "a callback queued after it")
    flushed_in_this_pass = list(log)
    await _next_pass()
    await _next_pass()

    assert firsts == [True, False, False]
    assert flushed_in_this_pass == []
    assert log == [
        "a callback queued before the first write",
        "second",
        "third",
        "a callback queued after it",
    ]
    assert outbox.first() is True  # a new pass: its first write goes now again


@pytest.mark.parametrize("held_too_long", [True, False])
async def test_a_queue_held_too_long_goes_out_mid_pass_at_its_next_check(
    held_too_long: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long pass (hundreds of pieces relayed) is made here by lowering the bound to nothing.
    monkeypatch.setattr(outbox_module, "HOLD_AT_MOST", 0.0 if held_too_long else 3600.0)
    log: list[str] = []
    outbox = Outbox(asyncio.get_running_loop())
    outbox.first()
    for n in range(1, 16):
        outbox.queue(Recorder(str(n), log))
    before_the_check = list(log)
    outbox.queue(Recorder("16", log))  # the 16th: the clock is read
    outbox.queue(Recorder("17", log))  # after the check: waits for the next check or the pass's end
    in_this_pass = list(log)
    await _next_pass()
    await _next_pass()

    assert before_the_check == []
    assert in_this_pass == ([str(n) for n in range(1, 17)] if held_too_long else [])
    assert log == [str(n) for n in range(1, 18)]


async def test_a_writer_that_fails_does_not_keep_the_others_bytes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []
    outbox = Outbox(asyncio.get_running_loop())
    outbox.first()
    for writer in (Recorder("a", log), Recorder("broken", log, fail=True), Recorder("c", log)):
        outbox.queue(writer)
    with caplog.at_level(logging.ERROR, logger="modelgate.http"):
        await _next_pass()
        await _next_pass()

    assert log == ["a", "broken", "c"]
    assert [r.getMessage() for r in caplog.records] == ["a queued socket write failed"]


async def test_each_event_loop_has_one_outbox() -> None:
    loop = asyncio.get_running_loop()
    other = asyncio.new_event_loop()
    try:
        assert outbox_for(loop) is outbox_for(loop)
        assert outbox_for(other) is not outbox_for(loop)
    finally:
        other.close()


# The front


class _OnePass:
    """Handlers that wait for one release and answer together, in the order they started waiting; the
    observer (woken last, in the same pass) records what each connection had written by then."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.waiting = 0
        self.all_waiting = asyncio.Event()
        self.release = asyncio.Event()

    async def handler(self, request: FrontRequest) -> web.Response:
        self.waiting += 1
        if self.waiting == self.count:
            self.all_waiting.set()
        await self.release.wait()
        return web.Response(body=b"answer " + request.headers["x-n"].encode())

    async def answer_together(self, transports: list[FakeTransport]) -> list[int]:
        """Release the handlers; the writes each transport had when the pass of their answers ended."""
        await asyncio.wait_for(self.all_waiting.wait(), WAIT)

        async def observe() -> list[int]:
            await self.release.wait()
            return [len(transport.writes) for transport in transports]

        observer = asyncio.create_task(observe())
        await asyncio.sleep(0)  # the observer waits after the handlers
        self.release.set()
        return await asyncio.wait_for(observer, WAIT)


async def test_answers_of_one_pass_after_the_first_go_out_at_the_start_of_the_next() -> None:
    one_pass = _OnePass(3)
    server = make_server(one_pass.handler)
    connections = [connect(server) for _ in range(3)]
    for n, (_conn, transport) in enumerate(connections):
        transport.send(post(headers=(f"x-n: {n}",)))
    transports = [transport for _conn, transport in connections]

    written_in_the_pass = await one_pass.answer_together(transports)
    for transport in transports:
        await transport.until(lambda t=transport: bool(t.writes))

    assert written_in_the_pass == [1, 0, 0]
    for n, transport in enumerate(transports):
        [answer] = transport.writes
        status, _headers, body = parse(answer)
        assert (status, body) == ("HTTP/1.1 200 OK", f"answer {n}".encode())
        assert not transport.closing


async def test_a_queued_answer_to_connection_close_is_written_before_the_connection_closes() -> None:
    one_pass = _OnePass(2)
    server = make_server(one_pass.handler)
    (_a, first), (_b, closing) = connect(server), connect(server)
    first.send(post(headers=("x-n: 0",)))
    closing.send(post(headers=("x-n: 1", "Connection: close")))

    written_in_the_pass = await one_pass.answer_together([first, closing])
    await closing.until(lambda: closing.lost)

    assert written_in_the_pass == [1, 1]  # the close made the queued answer go out first
    assert closing.names()[:2] == ["write", "close"]
    status, headers, body = parse(closing.writes[0])
    assert (status, headers["Connection"], body) == ("HTTP/1.1 200 OK", "close", b"answer 1")


async def test_a_client_that_leaves_while_its_answer_is_queued_is_written_nothing() -> None:
    one_pass = _OnePass(2)
    server = make_server(one_pass.handler)
    (_a, first), (_b, leaving) = connect(server), connect(server)
    first.send(post(headers=("x-n: 0",)))
    leaving.send(post(headers=("x-n: 1",)))
    await asyncio.wait_for(one_pass.all_waiting.wait(), WAIT)

    async def leave_once_answered() -> None:
        await one_pass.release.wait()
        leaving.lose(ConnectionResetError("gone"))

    leaver = asyncio.create_task(leave_once_answered())
    await asyncio.sleep(0)
    one_pass.release.set()
    await asyncio.wait_for(leaver, WAIT)
    await first.until(lambda: bool(first.writes))
    await _next_pass()
    await _next_pass()

    assert leaving.writes == []
    assert leaving.names() == ["lost"]


async def test_a_connection_handed_to_aiohttp_gets_its_queued_answer_before_anything_aiohttp_writes() -> None:
    aiohttp_side = AiohttpSide()
    one_pass = _OnePass(2)
    server = make_server(one_pass.handler, aiohttp_side=aiohttp_side)
    (_a, first), (_b, handed) = connect(server), connect(server)
    first.send(post(headers=("x-n: 0",)))
    # A served request, then one the front hands to aiohttp once it has answered the first.
    handed.send(post(headers=("x-n: 1",)) + b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")

    written_in_the_pass = await one_pass.answer_together([first, handed])
    await asyncio.wait_for(aiohttp_side.served.wait(), WAIT)
    await handed.until(lambda: len(handed.writes) == 2)

    assert written_in_the_pass == [1, 1]  # the hand-over made the queued answer go out first
    assert handed.names()[:2] == ["write", "set_protocol"]
    assert parse(handed.writes[0])[2] == b"answer 1"
    assert parse(handed.writes[1])[2] == b"served by aiohttp"


async def test_an_upstream_request_queued_in_the_outbox_is_not_sent_once_its_connection_is_aborted() -> None:
    # The lean client's requests use the outbox too; an abort in the pass that queued one (a pool closing)
    # must not let it reach the provider at the next pass.
    pool = ConnectionPool("127.0.0.1", 9, tls=None, limit=2, connect_timeout=1)
    await _next_pass()  # a pass of its own, whose first write is the one below
    sent, aborted = _Connection(pool), _Connection(pool)
    for connection in (sent, aborted):
        connection.connection_made(FakeTransport(connection))
    sent.send(b"POST /v1/a HTTP/1.1\r\n\r\n", b"{}")  # the pass's first write: at once
    aborted.send(b"POST /v1/b HTTP/1.1\r\n\r\n", b"{}")  # queued for the start of the next pass
    kept_connection = _Connection(pool)  # a connection whose queued request must still go, as a control
    kept = FakeTransport(kept_connection)
    kept_connection.connection_made(kept)
    kept_connection.send(b"POST /v1/c HTTP/1.1\r\n\r\n", b"{}")
    aborted.abort()
    await _next_pass()
    await _next_pass()

    assert sent.transport.writes == [b"POST /v1/a HTTP/1.1\r\n\r\n{}"]
    assert kept.writes == [b"POST /v1/c HTTP/1.1\r\n\r\n{}"]
    assert "write" not in aborted.transport.names()
