"""The answers the lean HTTP front writes: streamed answers (chunked framing, one chunk a write, the head with
the first bytes, back-pressure, a stream cut short or replaced), the response-splitting guard, bodiless
statuses, and the model API answering before its completion phase.

Each test drives a real `FrontConnection` over the fake transport of tests/support/front_wire.py.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.http.front_request import FrontRequest, FrontStream
from modelgate.proxy.pipeline.chain import Plugin, PluginChain
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.model_api import ModelApi
from tests.support.front_wire import (
    WAIT,
    FakeTransport,
    connect,
    connections_closed_afterwards,  # noqa: F401 (an autouse fixture)
    make_server,
    parse,
    post,
)

# Streamed answers


async def test_a_front_stream_is_sent_with_chunked_framing() -> None:
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
    await transport.until(lambda: transport.written.endswith(b"0\r\n\r\n"))

    [[head]] = snapshots  # write(b"") before any data: the head alone
    status, headers, rest = parse(head)
    assert status == "HTTP/1.1 200 OK"
    assert rest == b""
    assert headers["Transfer-Encoding"] == "chunked"
    assert headers["content-type"] == "text/event-stream"
    assert headers["Server"] == "modelgate"
    assert "Date" in headers
    assert "Content-Length" not in headers
    # (written in one pass, the three pieces leave together: modelgate/proxy/http/outbox.py)
    assert b"".join(transport.writes[1:]) == b"a\r\ndata: hi\n\n\r\n11\r\n" + b"x" * 17 + b"\r\n0\r\n\r\n"
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
