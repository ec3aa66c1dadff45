"""A streamed answer's pieces go through each plugin's step for that stream (`Plugin.stream_step`), made once
when its head is in: a plugin with nothing to do with the stream is never called for its pieces, one with
state of the stream's own is called on that state directly, and any other sees `on_chunk` with its request.
Driven on the lean front, with the real relay and chain."""

from __future__ import annotations

import gc

from aiohttp import web

from modelgate.domain.usage import StreamUsageScanner
from modelgate.plugins.content_policy import AnswerPolicy
from modelgate.plugins.object_binding import ObjectBindingPlugin
from modelgate.plugins.translation import Translation
from modelgate.plugins.usage_filter import UsageFilter
from modelgate.plugins.usage_metering import UsageMetering
from modelgate.proxy.http.front_request import FrontRequest
from modelgate.proxy.pipeline.chain import Plugin, PluginChain, StreamStep
from modelgate.proxy.pipeline.context import AnswerHead, RequestContext
from modelgate.proxy.pipeline.route_table import ROUTES
from modelgate.proxy.pipeline.stream_relay import StreamRelay
from modelgate.proxy.translation.model_name import ModelNameStream
from tests.support.front_wire import connect, connections_closed_afterwards, make_server, post  # noqa: F401
from tests.unit.test_relay_guard import _dechunked, _rest
from tests.unit.test_relay_guard import _Provider as _BrokenOffProvider


class _Provider(_BrokenOffProvider):
    def release(self) -> None:  # read to its end
        self.closed = True


class _NotForThisStream(Plugin):
    name = "not_for_this_stream"

    def stream_step(self, ctx: RequestContext) -> StreamStep | None:
        return None

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        raise AssertionError("called for a stream it has nothing to do with")


class _Numbered:
    """A stream's own state: numbers its pieces."""

    def __init__(self) -> None:
        self.pieces = 0

    def feed(self, chunk: bytes) -> bytes:
        self.pieces += 1
        return chunk.replace(b"data: ", b"data: %d " % self.pieces)


class _OwnStep(Plugin):
    name = "own_step"

    def __init__(self) -> None:
        self.made: list[_Numbered] = []

    def stream_step(self, ctx: RequestContext) -> StreamStep | None:
        self.made.append(_Numbered())
        return self.made[-1].feed

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        raise AssertionError("a plugin with a step of the stream's own is called on that step")


class _OnChunk(Plugin):
    name = "on_chunk"

    def __init__(self) -> None:
        self.seen: list[tuple[RequestContext, bytes]] = []

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        self.seen.append((ctx, chunk))
        return chunk.upper()


async def test_each_plugin_sees_a_stream_through_its_own_step_and_one_with_none_is_skipped() -> None:
    own, plain = _OwnStep(), _OnChunk()
    relay = StreamRelay(PluginChain([_NotForThisStream(), own, plain]))
    provider = _Provider()
    contexts: list[RequestContext] = []

    async def handler(request: FrontRequest) -> web.StreamResponse:
        ctx = RequestContext(request, "req_steps", 0.0)  # type: ignore[arg-type]
        contexts.append(ctx)
        ctx.answer = head = AnswerHead(200, {"content-type": "text/event-stream"}, provider.headers, True)
        return await relay.relay(ctx, provider, head, b'data: {"n":1}\n\n', _rest())  # type: ignore[arg-type]

    _conn, transport = connect(make_server(handler))
    transport.send(post())
    await transport.until(lambda: transport.written.endswith(b"0\r\n\r\n"))

    body = _dechunked(transport.written.partition(b"\r\n\r\n")[2])
    assert body == b'DATA: 1 {"N":1}\n\nDATA: 2 {"N":2}\n\nDATA: 3 {"N":3}\n\n'
    assert len(own.made) == 1 and own.made[0].pieces == 3  # one step for the stream, made once
    (ctx,) = contexts
    assert [seen_ctx for seen_ctx, _ in plain.seen] == [ctx, ctx, ctx]


def _streamed_chat(route: str = "chat_completions") -> RequestContext:
    ctx = RequestContext(None, "req_steps", 0.0)  # type: ignore[arg-type]
    ctx.route = next(known for known in ROUTES if known.name == route)
    ctx.answer = AnswerHead(200, {}, {"content-type": "text/event-stream"}, True)
    return ctx


def test_the_answer_steps_are_skipped_for_a_stream_they_have_nothing_to_do_with() -> None:
    ctx = _streamed_chat()
    assert ctx.matched_route.creates is None  # a chat completion creates no object to bind
    assert ObjectBindingPlugin(None, None).stream_step(ctx) is None  # type: ignore[arg-type]
    assert AnswerPolicy(None, None).stream_step(ctx) is None  # type: ignore[arg-type]  # no content rule
    assert Translation().stream_step(ctx) is None  # nothing to translate or rename
    assert UsageFilter().stream_step(ctx) is None  # no usage withheld


def test_the_answer_steps_of_a_stream_are_its_own_state_s() -> None:
    ctx = _streamed_chat()
    renamer = ModelNameStream("my-model")
    ctx.answer_head.stream_translator = renamer
    step = Translation().stream_step(ctx)
    assert step is not None
    assert step(b'data: {"model":"upstream-name"}\n\n') == b'data: {"model":"my-model"}\n\n'
    responses = _streamed_chat("responses")
    assert responses.matched_route.creates is not None
    assert ObjectBindingPlugin(None, None).stream_step(responses) is not None  # type: ignore[arg-type]


def test_the_metering_step_of_a_stream_is_its_scanner_s_feed_telling_usage_and_the_end_once() -> None:
    ctx = _streamed_chat()
    scanner = StreamUsageScanner(ctx.matched_route.final_events)
    ctx.metering.scanner = scanner
    step = UsageMetering(None, None).stream_step(ctx)  # type: ignore[arg-type]
    assert step == scanner.feed  # no call of the plugin's own a piece
    content = b'data: {"choices":[{"delta":{"content":"Hi"}}],"usage":null}\n\n'
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}\n\n'
    assert step(content) == content  # read, never changed
    ctx.bytes_sent = len(content)
    assert (ctx.metering.usage, ctx.metering.final_after) == (None, -1)
    assert step(usage) == usage
    read = ctx.metering.usage
    assert read is scanner.usage and read is not None
    assert (read.input_tokens, read.output_tokens) == (3, 5)
    ctx.bytes_sent += len(usage)
    assert ctx.metering.final_after == -1
    assert step(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"
    assert ctx.metering.final_after == len(content) + len(usage)  # what had gone out before the final event
    ctx.bytes_sent += 14
    assert ctx.metering.outcome_when_left(ctx.bytes_sent, "client_closed") == "completed"
    # Both told: the scanner no longer holds anything of the request (no reference cycle through it).
    assert not _holds(scanner, ctx) and not _holds(scanner, ctx.metering)


def test_a_stream_that_ends_before_its_usage_leaves_no_cycle_once_its_request_completes() -> None:
    ctx = _streamed_chat()
    scanner = StreamUsageScanner(ctx.matched_route.final_events)
    ctx.metering.scanner = scanner
    metering = UsageMetering(None, None)  # type: ignore[arg-type]
    step = metering.stream_step(ctx)
    assert step is not None
    step(b'data: {"choices":[{"delta":{"content":"Hi"}}],"usage":null}\n\n')  # then the provider broke off
    assert _holds(scanner, ctx) and _holds(scanner, ctx.metering)  # the cycles, while it streams
    metering.on_complete(ctx)  # no model or key on this context: nothing to record, but let go
    assert not _holds(scanner, ctx) and not _holds(scanner, ctx.metering)


def _holds(holder: object, target: object, depth: int = 3) -> bool:
    """Whether `target` is reachable from `holder` within `depth` references (a callback, its arguments)."""
    referents = gc.get_referents(holder)
    return any(r is target for r in referents) or (
        depth > 1 and any(_holds(r, target, depth - 1) for r in referents if not isinstance(r, type))
    )
