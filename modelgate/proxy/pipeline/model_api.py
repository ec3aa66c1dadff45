"""The model API request pipeline: run the plugin chain, then answer locally or forward upstream.

Every failure becomes a typed GatewayError rendered in the request's envelope; an unexpected exception is
logged with its traceback and answered as a generic 500, never with the traceback.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any, overload

from aiohttp import web

from modelgate.domain.errors import GatewayError, InternalError
from modelgate.proxy.http.front_request import FrontRequest, FrontStream
from modelgate.proxy.pipeline.chain import PluginChain
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.envelopes import render_error
from modelgate.proxy.pipeline.forward import Forwarder
from modelgate.proxy.pipeline.model_list import get_model, list_models
from modelgate.proxy.upstream.model_rows import ModelCatalog

log = logging.getLogger("modelgate.model_api")

_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

# A route the gateway answers itself after the chain (video list, realtime secrets and WebSocket).
LocalHandler = Callable[[RequestContext], Awaitable[web.StreamResponse]]


_ID_PREFIX = "req_" + secrets.token_hex(8)
_id_counter = itertools.count(1)


def new_request_id() -> str:
    """Unique per process by a counter, across processes by a random 64-bit prefix (no syscall each)."""
    return f"{_ID_PREFIX}{next(_id_counter):08x}"


def request_id_of(request: web.Request | FrontRequest) -> str:
    """The client's `x-request-id` when it is sane, otherwise a fresh one."""
    supplied = request.headers.get("x-request-id")
    if supplied is not None and _VALID_REQUEST_ID.match(supplied):
        return supplied
    return new_request_id()


async def answer_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send `response` with `Connection: close`, then close at once: a body refused unread (413) is not
    worth reading, and aiohttp would otherwise read and discard it for up to 10 s before closing."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    transport = request.transport
    if transport is not None:
        if transport.can_write_eof():
            transport.write_eof()  # the client sees the end of the answer even if unread bytes reset it later
        transport.close()  # asyncio sends what is still buffered first
    return response


class Completions:
    """Completion phases that run to their end even when their request's handler is cancelled (its client
    left while a hook waited on Redis); the gateway awaits them before it stops the ledger."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: set[asyncio.Task] = set()

    def run(self, phase: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(phase)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    def run_eagerly(self, phase: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        """Run `phase` now, in the caller, up to its first real wait: None when it ended without one (the
        usual completion: its hooks only queue work), else the task that carries it on from that wait.

        A task per request costs more than the whole completion phase of most; cancelling the caller can
        only reach a coroutine at a wait, and there the phase is handed to a task of its own. What Python
        3.12 calls an eager task (`asyncio.Task(..., eager_start=True)`), on 3.11: the phase's first step is
        taken here (`coroutine.send`, the coroutine protocol a task itself uses), the rest by the task.
        """
        try:
            waiting = phase.send(None)
        except StopIteration:
            return None
        return self.run(_carried_on(phase, waiting))

    def track(self, handler: asyncio.Task) -> None:
        """A request's handler that goes on after its client left (its non-streamed answer is read to its
        end, then settled and written): the server no longer waits for it, so the stop does, as for a
        completion phase."""
        if handler not in self._pending:
            self._pending.add(handler)
            handler.add_done_callback(self._pending.discard)

    async def drain(self, seconds: float) -> None:
        """Wait for every completion phase still running (at most `seconds`)."""
        deadline = asyncio.get_running_loop().time() + seconds
        while self._pending:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                log.warning("%d request completions were still running at stop", len(self._pending))
                return
            await asyncio.wait(self._pending, timeout=left)


async def _carried_on(phase: Coroutine[Any, Any, None], waiting: object) -> None:
    """The rest of a phase whose first step was taken outside any task, as a task's coroutine."""
    await _Resumed(phase, waiting)


class _Resumed:
    """A coroutine started outside any task that yielded `waiting` (the future it awaits, or None for a bare
    yield), as an awaitable: `waiting` goes to the task as if the coroutine had yielded it there itself, then
    the task drives the coroutine on (`yield from`). A cancellation of the task meets it where it waits."""

    __slots__ = ("_phase", "_waiting")

    def __init__(self, phase: Coroutine[Any, Any, None], waiting: object) -> None:
        self._phase = phase
        self._waiting = waiting

    def __await__(self) -> Generator[object, None, None]:
        steps = self._phase.__await__()
        waiting = self._waiting
        while True:
            try:
                yield waiting
            except (
                BaseException
            ) as thrown:  # the task was cancelled while the phase waited: the phase hears it
                try:
                    waiting = steps.throw(thrown)
                except StopIteration:
                    return
                continue
            yield from steps
            return


class ModelApi:
    """The handler behind every /v1 path."""

    def __init__(
        self,
        chain: PluginChain,
        forwarder: Forwarder,
        catalog: ModelCatalog,
        handlers: Mapping[str, LocalHandler] | None = None,
        shutting_down: Callable[[], bool] = lambda: False,
        completions: Completions | None = None,
        finish_abandoned: bool = True,
        complete_inline: bool = False,
    ) -> None:
        self._chain = chain
        self._finish_abandoned = finish_abandoned  # `[billing] abandoned_calls = "finish"`
        self._shutting_down = shutting_down
        self._completions = completions
        # The completion phase runs in the handler (its hooks never really wait: no Redis), not in a task.
        self._complete_inline = complete_inline or completions is None
        # What the front calls with the handler of a non-streamed call whose client left (it goes on).
        self._on_loss: Callable[[asyncio.Task], None] = (
            completions.track if completions is not None else _goes_on_untracked
        )
        self._handlers = dict(handlers or {})
        self._forwarder = forwarder
        self._local: dict[str, Callable[[ModelCatalog, RequestContext], web.StreamResponse]] = {
            "models": list_models,
            "models_get": get_model,
        }
        self._catalog = catalog

    @overload
    async def handle(self, request: web.Request) -> web.StreamResponse: ...

    @overload
    async def handle(self, request: FrontRequest) -> web.StreamResponse | FrontStream: ...

    async def handle(self, request: web.Request | FrontRequest) -> web.StreamResponse | FrontStream:
        """Serve one model API request, from whichever entry it came through: a request of the front's
        (modelgate/proxy/http/front.py) may be answered with a `FrontStream`, aiohttp's with its response."""
        ctx = RequestContext(request, request_id_of(request), time.perf_counter())
        try:
            response = await self._respond(ctx)
            if type(request) is FrontRequest:
                # The answer goes out before the completion phase (as a stream's last bytes do): the
                # client's wait does not include the metering, the settlement or the log line.
                request.protocol.answer(request, response)
            return response
        finally:
            if self._complete_inline or self._completions is None:
                await self._complete(ctx)
            elif (rest := self._completions.run_eagerly(self._complete(ctx))) is not None:
                # A hook waits on shared state (Redis): a client leaving now cancels this handler, which
                # must not cut the settlement, the ledger row or the id's release in half.
                await asyncio.shield(rest)

    async def _respond(self, ctx: RequestContext) -> web.StreamResponse | FrontStream:
        """The request phase, then a local answer or the forwarded one; every failure as its answer."""
        request = ctx.request
        try:
            for hook in self._chain.request_hooks:
                if (waiting := hook(ctx)) is not None:
                    await waiting
            route = ctx.matched_route
            local = self._local.get(route.name)
            if local is not None:
                response = local(self._catalog, ctx)
                ctx.status = response.status
                return response
            handler = self._handlers.get(route.name)
            if handler is not None:
                return await handler(ctx)
            if ctx.stream or not self._finish_abandoned:
                return await self._forwarder.forward(ctx)
            # A non-streamed call is read to its end even if its client leaves meanwhile (the provider
            # finishes and bills it): charged its usage, outcome `client_closed`. The front does not cancel a
            # handler that waits for it (`finish_on_loss`), at no cost; under aiohttp, see `_forward_apart`.
            if type(request) is not FrontRequest:
                return await self._forward_apart(ctx)
            protocol = request.protocol
            protocol.finish_on_loss = self._on_loss
            try:
                response = await self._forwarder.forward(ctx)
            finally:
                protocol.finish_on_loss = None
            if protocol.client_gone:
                _abandoned(ctx)
            return response
        except GatewayError as error:
            ctx.error = error
            ctx.status = error.status
            response = render_error(error, ctx.envelope, ctx.request_id)
            if error.status == 413 and type(request) is not FrontRequest and not request.content.is_eof():
                return await answer_and_close(request, response)
            return response
        except (asyncio.CancelledError, ConnectionResetError):
            ctx.status = 499  # the client went away, or a graceful stop ran out of time for it
            upload = ctx.body_stream
            if (
                not ctx.answered_status
                and ctx.attempts
                and not ctx.stream
                and (upload is None or upload.complete)
            ):
                # Sent, then let go of before its answer came: the provider billed at least the prompt.
                ctx.metering.abandoned = True
            if (ctx.answered_status or ctx.metering.abandoned) and not ctx.outcome:
                left = "shutdown" if self._shutting_down() else "client_closed"
                ctx.outcome = ctx.metering.outcome_when_left(ctx.bytes_sent, left)
            raise
        except Exception as exc:
            log.exception(
                "unexpected error in request %s", ctx.request_id, extra={"request_id": ctx.request_id}
            )
            ctx.error = exc
            ctx.status = 500
            return render_error(InternalError(), ctx.envelope, ctx.request_id)

    async def _forward_apart(self, ctx: RequestContext) -> web.StreamResponse | FrontStream:
        """Forward a non-streamed call in a task of its own, which aiohttp's cancellation of the handler
        (its client left) does not reach: the answer is read to its end. A graceful stop, or a client that
        leaves before its upload was whole, still cancels it."""
        forwarding = asyncio.get_running_loop().create_task(self._forwarder.forward(ctx))
        try:
            return await asyncio.shield(forwarding)
        except asyncio.CancelledError:
            unsent = ctx.body_stream is not None and not ctx.body_stream.complete  # left mid-upload
            if self._shutting_down() or forwarding.done() or unsent:
                forwarding.cancel()
                await asyncio.wait((forwarding,))  # its upstream is let go before the completion phase
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # the client left: the answer is read to its end all the same
                if self._completions is not None:  # and a graceful stop waits for its row
                    self._completions.track(current)
        try:
            response = await forwarding
        finally:
            _abandoned(ctx)
        return response

    async def _complete(self, ctx: RequestContext) -> None:
        """The completion phase: every hook runs, whatever the others do."""
        for hook in self._chain.complete_hooks:
            try:
                if (waiting := hook(ctx)) is not None:
                    await waiting
            except Exception:
                log.exception(
                    "completion hook failed for request %s",
                    ctx.request_id,
                    extra={"request_id": ctx.request_id},
                )
        if ctx.error is not None:
            drop_tracebacks(ctx.error)


def _goes_on_untracked(handler: asyncio.Task) -> None:
    """No completions to wait for (a ModelApi built without them): the handler goes on all the same."""


def _abandoned(ctx: RequestContext) -> None:
    """The client left while its non-streamed call was read to its end: charged as answered, not sent."""
    ctx.status = 499
    if ctx.answered_status:
        ctx.outcome = "client_closed"


def drop_tracebacks(error: BaseException) -> None:
    """Let go of the frames an error kept on a request's context holds through its traceback (and those of
    the errors it was raised from or during), once nothing reads them any more. Those frames hold the context
    itself: each refused request would otherwise be a reference cycle, its body and parsed payload included,
    left for the garbage collector, which runs seldom in a gateway process (modelgate.server)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
