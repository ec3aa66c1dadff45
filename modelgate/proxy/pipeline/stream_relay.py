"""The relay of a streamed answer: each piece of the upstream's body through the chain's response steps, then
to the client, as it arrives; never buffered, so back-pressure reaches the provider.

The forwarder (modelgate/proxy/pipeline/forward.py) picks the row and hands over an answer whose first bytes
are in; from here on there is no failover. The relay only relays: it counts what reached the client
(`ctx.bytes_sent`), and says how the stream ended (`ctx.outcome`). What the stream means — its usage, and
whether its final event has passed (modelgate/plugins/usage_metering.py) — is the response steps' business.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol

import aiohttp
from aiohttp import web

from modelgate.proxy.http.front_request import FrontRequest, FrontStream
from modelgate.proxy.pipeline.chain import PluginChain, StreamCut, StreamStep
from modelgate.proxy.pipeline.context import AnswerHead, RequestContext
from modelgate.proxy.pipeline.failover import log_failed_attempt
from modelgate.proxy.upstream.http_client import UpstreamAnswer, UpstreamBrokeOff, piped_answer
from modelgate.proxy.upstream.providers import UpstreamResponse

log = logging.getLogger("modelgate.forward")

# What a provider breaking off a stream raises, from the pooled client or aiohttp's (an upload's answer).
_BROKE_OFF = (
    UpstreamBrokeOff,
    aiohttp.ClientPayloadError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
    TimeoutError,
)


class ClientStream(Protocol):
    """The streamed answer on the client's connection: the front's `FrontStream`, or aiohttp's
    StreamResponse."""

    async def write(self, data: bytes) -> None: ...
    async def write_eof(self, data: bytes = b"") -> None: ...


class StreamRelay:
    """Relays streamed answers through the chain's response steps (`stream_step`, `on_end`,
    `on_stream_error`)."""

    __slots__ = ("_end_hooks", "_error_hooks", "_stream_steps")

    def __init__(self, chain: PluginChain) -> None:
        self._stream_steps = chain.stream_steps
        self._end_hooks = chain.end_hooks
        self._error_hooks = chain.stream_error_hooks

    async def relay(
        self,
        ctx: RequestContext,
        upstream: UpstreamResponse,
        head: AnswerHead,
        opening: bytes,
        rest: AsyncIterator[bytes],
    ) -> web.StreamResponse | FrontStream:
        """Relay `opening` (the first piece, maybe empty), then each read of `rest` (whatever arrived
        meanwhile, as one piece: one write), to its end; a provider breaking off ends the stream with the
        chain's error event. The head goes out with the first bytes of the body, or alone if the first piece
        is held back by a step (not yet a whole event)."""
        response, opened = _stream_response(ctx.request, head)
        released = False
        try:
            if opened is not None:  # aiohttp's stream: prepared before its first write
                await opened
                del opened  # spent: not held (a GC-tracked coroutine) for as long as the stream is open
            await self._pieces(ctx, response, upstream, opening, rest)
            ctx.outcome = "completed"
            released = True
        except _BROKE_OFF as exc:
            # Bytes already reached the client: no failover, but the chain ends the stream (an error event).
            if ctx.row is not None:
                log_failed_attempt(ctx, ctx.row, "broke off a stream", exc)
            if not await self._end_with_error_event(ctx, response, exc, "upstream_error"):
                return response  # the client left too
        except StreamCut as cut:
            # A step ended the stream (a content rule): its closing event goes out, the provider is let go.
            try:
                await response.write(cut.closing)
            except ConnectionError:
                return response
        except ConnectionError:
            # The client went away mid-stream: charged for what it was sent (see BillingGate.final_cost).
            if not ctx.outcome:
                ctx.outcome = ctx.metering.outcome_when_left(ctx.bytes_sent, "client_closed")
            ctx.status = 499
            return response
        except Exception as exc:
            # A response step failed on a piece: a bug, not the client's or the provider's doing. The stream
            # still ends the way a broken one does (the chain's error event, then its end), and is charged
            # for what it delivered; the provider is let go.
            log.exception(
                "a response step failed mid-stream in request %s",
                ctx.request_id,
                extra={"request_id": ctx.request_id},
            )
            if not await self._end_with_error_event(ctx, response, exc, "internal_error"):
                return response
        finally:
            # Read to its end, its connection serves another request; otherwise it is closed.
            upstream.release() if released else upstream.close()
        try:
            await response.write_eof()
        except ConnectionError:
            if not ctx.outcome:
                ctx.outcome = "client_closed"
        return response

    async def _pieces(
        self,
        ctx: RequestContext,
        response: ClientStream,
        upstream: UpstreamResponse,
        chunk: bytes,
        rest: AsyncIterator[bytes],
    ) -> None:
        """The loop: each piece through the steps and out, then the steps' tail with the end of the answer.

        The rest is read to its end (StopAsyncIteration), whatever kind of body it is. A piece read once the
        upstream's whole body is in (`at_eof`) is its last: held back, never waiting for anything, to go out
        with the end of the answer in one write."""
        # This stream's own steps: those of plugins with nothing to do with it are never called.
        steps: tuple[StreamStep, ...] = ()
        for make in self._stream_steps:
            if (step := make(ctx)) is not None:
                steps += (step,)
        body = upstream.content
        # The pooled client's answer relayed to the gateway's own front is piped: the pieces between the
        # first and the last go out from the provider connection's callback, without a task switch each.
        # (No bound methods kept for the loop: piped, it turns a few times a stream, and every open stream
        # would hold them.)
        pusher = _Pusher.of(ctx, steps, response, rest)
        last = b""
        head_sent = False
        while True:
            for step in steps:  # the opening is empty when the stream ended before its first byte
                if not chunk:
                    break  # held back by a step (or nothing yet): the later ones see it once released
                chunk = step(chunk)
            if chunk:
                if ctx.first_byte_at is None:
                    ctx.first_byte_at = time.perf_counter()
                if body.at_eof():
                    last = chunk
                else:
                    await response.write(chunk)
                    head_sent = True
                    ctx.bytes_sent += len(chunk)
            elif not head_sent:  # the first bytes are not a whole line or event yet: the head goes now
                await response.write(b"")
                head_sent = True
            if pusher is not None and not last:
                # Pipe until the answer ends or the piping stops (awaited here, not in a coroutine of the
                # pusher's: one less for every open stream); then raise what stopped it, or wait for the
                # client to catch up.
                await pusher.answer.pipe(pusher.push)
                pusher.raise_error()
                await pusher.stream.drained()
            try:
                chunk = await rest.__anext__()  # directly, not through a generator that chains the opening in
            except StopAsyncIteration:
                break
            if last:  # not the last after all
                await response.write(last)
                ctx.bytes_sent += len(last)
                last = b""
        tail = b""
        for hook in self._end_hooks:
            tail = hook(ctx, tail)
        if last or tail:
            await response.write_eof(last + tail if tail else last)
            ctx.bytes_sent += len(last)

    async def _end_with_error_event(
        self, ctx: RequestContext, response: ClientStream, exc: Exception, outcome: str
    ) -> bool:
        """Record how the stream ended and write the chain's error event; False when the client has left."""
        ctx.error = exc
        ctx.outcome = outcome
        try:
            await response.write(b"".join([hook(ctx, exc) for hook in self._error_hooks]))
        except ConnectionError:
            return False
        return True


class _Pusher:
    """The relay's end of a piped answer (UpstreamAnswer.pipe): each piece through the chain's steps and onto
    the client's connection, called from the provider connection's callback. It stops the piping (returns
    False) when the client is behind or a step raised; the relay's task then waits for the client, or raises
    what the step raised, where the unpiped loop would have."""

    __slots__ = ("_ctx", "_error", "_steps", "answer", "stream")

    def __init__(
        self,
        ctx: RequestContext,
        steps: tuple[StreamStep, ...],
        stream: FrontStream,
        answer: UpstreamAnswer,
    ) -> None:
        self._ctx = ctx
        self._steps = steps
        self.stream = stream
        self.answer = answer
        self._error: Exception | None = None

    @classmethod
    def of(
        cls,
        ctx: RequestContext,
        steps: tuple[StreamStep, ...],
        response: ClientStream,
        rest: AsyncIterator[bytes],
    ) -> _Pusher | None:
        """A pusher for the pooled client's answer relayed to the gateway's own front; None otherwise."""
        if not isinstance(response, FrontStream):
            return None
        answer = piped_answer(rest)
        return None if answer is None else cls(ctx, steps, response, answer)

    def raise_error(self) -> None:
        """Once the piping stopped: raise what a step raised on a piece, if anything."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def push(self, chunk: bytes) -> bool:
        """The sink of the piping (a method, not `__call__`: calling an instance goes through its type's
        slot, several hundred instructions a piece more)."""
        try:
            for step in self._steps:
                if not chunk:
                    return True  # held back by a step
                chunk = step(chunk)
            if not chunk:
                return True
            ctx = self._ctx
            if ctx.first_byte_at is None:
                ctx.first_byte_at = time.perf_counter()
            keeps_up = self.stream.push(chunk)
            ctx.bytes_sent += len(chunk)
            return keeps_up
        except Exception as exc:  # StreamCut, the client gone, a step's bug: the relay's task handles it
            self._error = exc
            return False


def _stream_response(
    request: web.Request | FrontRequest, head: AnswerHead
) -> tuple[web.StreamResponse | FrontStream, Awaitable[object] | None]:
    """The streamed answer for the entry the request came through, and its opening to await (None: it is
    open) — the gateway's own HTTP front writes to its connection (modelgate/proxy/http/front.py), prepared
    here without a coroutine; aiohttp's server through its StreamResponse."""
    if isinstance(request, FrontRequest):
        stream = FrontStream(head.status, head.headers)
        stream.attach(request)
        return stream, None
    response = _RelayedStream(status=head.status, headers=head.headers)
    return response, response.prepare(request)


class _RelayedStream(web.StreamResponse):
    """A streamed answer whose head goes out with the first piece of its body, in one write rather than two
    (aiohttp's own switch, the one web.Response uses; aiohttp is pinned to 3.14.x). The relay prepares it only
    once the upstream's first bytes are in hand, so the head is never held waiting for the provider."""

    _send_headers_immediately = False
