"""FakeUpstream: a real aiohttp server on 127.0.0.1, run on its own loop in a daemon thread.

Sync tests drive it from their own thread; every public method is safe to call while it serves.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from aiohttp import web

from . import media_routes, realtime_routes
from .anthropic_routes import count_tokens, messages
from .context import CONTEXT, FakeContext
from .faults import Fault
from .media_records import MediaLog, RealtimeLog
from .middleware import stamp_headers, upstream_middleware
from .model_list import list_models, retrieve_model
from .openai_chat import chat_completions, completions
from .openai_responses import create_response, delete_response, retrieve_response
from .openai_routes import decisions, embeddings
from .records import RecordedRequest

DEFAULT_MODELS = ("gpt-4o-mini", "gpt-4o", "text-embedding-3-small", "claude-sonnet-4-6", "claude-haiku-4-5")
START_TIMEOUT = 5.0
STOP_TIMEOUT = 5.0
# aiohttp waits up to twice this for handlers still running at stop(), then cancels them.
SHUTDOWN_GRACE = 0.5
# Large enough that the fake never refuses what the gateway under test lets through.
MAX_BODY = 256 * 1024 * 1024


def build_app(ctx: FakeContext) -> web.Application:
    """The fake's routes, all in one list."""
    app = web.Application(middlewares=[upstream_middleware], client_max_size=MAX_BODY)
    app[CONTEXT] = ctx
    app.on_response_prepare.append(stamp_headers)
    app.router.add_routes(
        [
            web.post("/v1/chat/completions", chat_completions),
            web.post("/v1/completions", completions),
            web.post("/v1/embeddings", embeddings),
            web.post("/v1/responses", create_response),
            web.get("/v1/responses/{response_id}", retrieve_response),
            web.delete("/v1/responses/{response_id}", delete_response),
            web.get("/v1/models", list_models),
            web.get("/v1/models/{model_id}", retrieve_model),
            web.post("/v1/decisions", decisions),
            web.post("/v1/messages", messages),
            web.post("/v1/messages/count_tokens", count_tokens),
            *media_routes.ROUTES,
            *realtime_routes.ROUTES,
        ]
    )
    return app


class FakeUpstream:
    """An OpenAI + Anthropic lookalike that records requests and misbehaves on demand."""

    def __init__(
        self,
        name: str = "fake",
        *,
        api_key: str | tuple[str, ...] | None = None,
        models: Iterable[str] = DEFAULT_MODELS,
    ) -> None:
        self.name = name
        self.api_key = api_key
        self.port = 0
        self._ctx = FakeContext(name, api_key, tuple(models))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        """Server root, without `/v1`."""
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeUpstream:
        """Bind a free port and serve in a daemon thread; returns once listening."""
        if self._thread is not None or self._ctx.stopping.is_set():
            raise RuntimeError(f"fake upstream {self.name!r} was already started; make a new one")
        loop = asyncio.new_event_loop()
        listening: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._run, args=(loop, listening), name=f"fake-upstream-{self.name}", daemon=True
        )
        self._thread.start()
        try:
            listening.result(timeout=START_TIMEOUT)
        except BaseException:
            self._thread.join(timeout=STOP_TIMEOUT)
            self._thread = None
            raise
        return self

    def _run(self, loop: asyncio.AbstractEventLoop, listening: concurrent.futures.Future[None]) -> None:
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._listen())
            except BaseException as exc:
                listening.set_exception(exc)
                return
            listening.set_result(None)
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _listen(self) -> None:
        runner = web.AppRunner(
            build_app(self._ctx),
            handle_signals=False,
            access_log=None,
            shutdown_timeout=SHUTDOWN_GRACE,
            # So a client that goes away cancels its handler, which is how cancellation is counted.
            handler_cancellation=True,
        )
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self.port = runner.addresses[0][1]

    def stop(self) -> None:
        """Stop serving (hanging and gated handlers end at once) and join the thread; bounded."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=STOP_TIMEOUT)
        except concurrent.futures.TimeoutError:
            pass  # Stop the loop regardless; the daemon thread cannot outlive the test run.
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=STOP_TIMEOUT)
            self._thread = None
            self._loop = None

    async def _shutdown(self) -> None:
        self._ctx.stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- recording ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, oldest first."""
        return self._ctx.log.snapshot()

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [record for record in self._ctx.log.snapshot() if record.path == path]

    def finish_background(
        self, response_id: str, status: str = "completed", output_tokens: int | None = None
    ) -> dict:
        """End a background response: its retrieve shows `status` and the usage the provider bills for it
        (its own echo's, or `output_tokens` of output, e.g. what a cancelled one produced); returns it."""

        def finish() -> dict:
            final = dict(self._ctx.background[response_id])
            final["status"] = status
            if output_tokens is not None:
                usage = dict(final["usage"])
                usage["output_tokens"] = output_tokens
                usage["total_tokens"] = usage["input_tokens"] + output_tokens
                final["usage"] = usage
            self._ctx.responses[response_id] = final
            return final

        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(_call(finish), self._loop)
        return future.result(timeout=STOP_TIMEOUT)

    def clear(self) -> None:
        """Forget recorded requests (uploads and realtime sessions too) and reset `cancelled_count`."""
        self._ctx.log.clear()
        self._ctx.media.clear()
        self._ctx.realtime.clear()
        self._ctx.stats.reset_cancelled()

    @property
    def media(self) -> MediaLog:
        """Multipart uploads (part sizes, bytes of the one in flight), video content size."""
        return self._ctx.media

    @property
    def realtime(self) -> RealtimeLog:
        """Realtime sessions (model, credential, events, how they closed), and the handshake hold gate."""
        return self._ctx.realtime

    # -- faults ------------------------------------------------------------------------------------

    def add_fault(self, path: str, fault: Fault, times: int = 1) -> None:
        """Apply `fault` to the next `times` requests to `path` (FIFO; -1 = until clear_faults())."""
        self._ctx.faults.add(path, fault, times)

    def clear_faults(self) -> None:
        """Drop queued faults and forget gate releases."""
        self._ctx.faults.clear()
        self._ctx.gates.reset()

    def release(self, gate: str) -> None:
        """Let streams held at `gate` finish; sticky, so it may come before the stream reaches it."""
        self._ctx.gates.release(gate)

    def wait_held(self, gate: str, timeout: float = 5.0) -> bool:
        """Block until a stream is waiting at `gate` (or the gate was already released)."""
        return self._ctx.gates.wait_held(gate, timeout)

    # -- stream observation ------------------------------------------------------------------------

    @property
    def cancelled_count(self) -> int:
        """Handlers ended by the client going away mid-request."""
        return self._ctx.stats.cancelled

    def wait_cancelled(self, n: int = 1, timeout: float = 5.0) -> bool:
        return self._ctx.stats.wait_cancelled(n, timeout)

    @property
    def active_streams(self) -> int:
        """Stream handlers currently sending."""
        return self._ctx.stats.active

    def wait_active_streams(self, n: int = 0, timeout: float = 5.0) -> bool:
        """Block until exactly `n` streams are in flight."""
        return self._ctx.stats.wait_active(n, timeout)


async def _call(function: Callable[[], Any]) -> Any:
    """Run `function` on the server loop (the state it touches is the loop's own)."""
    return function()
