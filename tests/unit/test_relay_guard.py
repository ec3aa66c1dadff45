"""A response step that fails in the middle of a relayed stream (a bug of ours, not the client's nor the
provider's doing) ends the stream the way a broken one ends: the chain's error event, here an internal
error, then the end of the stream; the request is marked `internal_error` (charged for what it delivered)
and the provider is let go. Driven on the lean front, with the real relay and chain."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from modelgate.plugins.stream_errors import StreamErrors
from modelgate.proxy.http.front_request import FrontRequest
from modelgate.proxy.pipeline.chain import Plugin, PluginChain
from modelgate.proxy.pipeline.context import AnswerHead, RequestContext
from modelgate.proxy.pipeline.stream_relay import StreamRelay
from tests.support.front_wire import connect, connections_closed_afterwards, make_server, post  # noqa: F401


class _Envelope(Plugin):
    """Stands in for route_support, which provides the envelope the error event is written in."""

    name = "envelope_for_the_test"
    provides = frozenset({"envelope"})


class _FailsOnTheSecondPiece(Plugin):
    name = "fails_on_the_second_piece"

    def __init__(self) -> None:
        self.pieces = 0

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        self.pieces += 1
        if self.pieces == 2:
            raise RuntimeError("a bug in a response step")
        return chunk


class _Provider:
    """The provider's side of a streamed answer: what the relay reads, and whether it was let go."""

    status = 200
    headers: dict[str, str] = {"content-type": "text/event-stream"}

    def __init__(self) -> None:
        self.closed = False
        self.content = self

    def at_eof(self) -> bool:
        return False

    async def read(self) -> bytes:
        return b""

    def close(self) -> None:
        self.closed = True


async def _rest() -> AsyncIterator[bytes]:
    yield b'data: {"n":2}\n\n'
    yield b'data: {"n":3}\n\n'


async def test_a_step_failing_mid_stream_ends_it_with_an_internal_error_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chain = PluginChain([_Envelope(), _FailsOnTheSecondPiece(), StreamErrors()])
    relay = StreamRelay(chain)
    provider = _Provider()
    seen: list[RequestContext] = []

    async def handler(request: FrontRequest) -> web.StreamResponse:
        ctx = RequestContext(request, "req_guard", 0.0)  # type: ignore[arg-type]
        seen.append(ctx)
        head = AnswerHead(200, {"content-type": "text/event-stream"}, provider.headers, True)
        ctx.answer = head
        return await relay.relay(ctx, provider, head, b'data: {"n":1}\n\n', _rest())  # type: ignore[arg-type]

    caplog.set_level(logging.ERROR, logger="modelgate.forward")
    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: transport.written.endswith(b"0\r\n\r\n"))

    body = _dechunked(transport.written.partition(b"\r\n\r\n")[2])
    events = [line.removeprefix(b"data: ") for line in body.split(b"\n\n") if line]
    assert events[0] == b'{"n":1}'  # what went out before the failure stays out
    assert b'{"n":2}' not in body and b'{"n":3}' not in body
    error = orjson.loads(events[-1])["error"]
    assert error["message"] == "internal error" and error["type"] == "server_error"
    (ctx,) = seen
    assert ctx.outcome == "internal_error" and isinstance(ctx.error, RuntimeError)
    assert provider.closed
    assert not transport.closing  # the stream ended properly: the connection serves on
    assert any("failed mid-stream" in record.getMessage() for record in caplog.records)


def _dechunked(data: bytes) -> bytes:
    body = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return body
        body, data = body + data[:size], data[size + 2 :]
