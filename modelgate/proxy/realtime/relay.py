"""GET /v1/realtime: a WebSocket relayed to the chosen row's realtime endpoint, frame by frame.

The plugin chain has already authenticated the key, claimed the client secret, resolved the model, and
admitted the session under the organization's concurrency cap and balance. Here the row's upstream WebSocket
is opened first (failing over between rows, since nothing has reached the client yet), then the client is
upgraded (101) and the secret becomes used. Text and binary frames pass both ways unchanged, with
back-pressure on each side; when either side closes, the other is closed with the same code. Each model
response is reserved, settled and written to the ledger on its own as the session goes
(proxy.realtime.billing); when the client leaves mid-response, the running responses are cancelled upstream
and their usage awaited for a moment, so what was generated is charged.

When the gateway stops, the server closes every session before aiohttp's own shutdown begins (from then on
aiohttp drops every byte a client sends, WebSocket frames included, so a session could neither hear a
`response.create` nor the client's close): the client is told 1001 going away and its closing handshake is
completed, the running responses are cancelled and settled as above, and a session still being established
is refused with 503 instead of being upgraded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
import orjson
from aiohttp import WSMsgType, web

from modelgate.domain.accounts import Accounts
from modelgate.domain.errors import InvalidRequest, ServiceUnavailable, UpstreamUnavailable
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.overruns import OverrunReport
from modelgate.proxy.http.front_request import FrontRequest
from modelgate.proxy.pipeline.context import PhaseError, RequestContext
from modelgate.proxy.pipeline.failover import RowAttempts
from modelgate.proxy.realtime.billing import SessionBilling
from modelgate.proxy.realtime.secrets import RealtimeClaim, RealtimeSecrets
from modelgate.proxy.upstream.model_rows import RoutingRow, RowSelector
from modelgate.proxy.upstream.providers import UpstreamFailure

if TYPE_CHECKING:
    from modelgate.proxy.pipeline.model_api import Completions

log = logging.getLogger("modelgate.realtime")

MAX_FRAME = 16 * 1024 * 1024
_GOING_AWAY = 1001
# How long a session whose client left waits for the usage of the responses it cancels upstream.
_DRAIN_SECONDS = 2.0
# How long a close the gateway starts waits for the peer's close frame before dropping the connection.
_CLOSE_HANDSHAKE_SECONDS = 2.0
_SHUTTING_DOWN = "the gateway is shutting down; connect again to open a new realtime session"


def _close_code(code: int | None, fallback: int = 1000) -> int:
    """A code that may be sent on: the peer's, unless it is reserved (1005/1006/1015) or missing."""
    if code is not None and (1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999):
        return code
    return fallback


class RealtimeSessions:
    """The realtime sessions of this process, so a shutdown closes them (1001 going away) instead of waiting
    them out, and refuses new ones."""

    def __init__(self) -> None:
        self._open: set[web.WebSocketResponse] = set()
        self._closing = asyncio.Event()
        self._handlers = 0  # realtime handlers running: connecting, relaying or settling
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def stopping(self) -> bool:
        """Whether the gateway stops: sessions ending now end because of it, and new ones are refused."""
        return self._closing.is_set()

    async def closing(self) -> None:
        """Return once the gateway starts closing its sessions."""
        await self._closing.wait()

    def add(self, client: web.WebSocketResponse) -> None:
        self._open.add(client)

    def discard(self, client: web.WebSocketResponse) -> None:
        self._open.discard(client)

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """The span of one realtime handler, from before its upstream connect to its session's last row."""
        self._handlers += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._handlers -= 1
            if self._handlers == 0:
                self._idle.set()

    async def close_all(self, seconds: float) -> None:
        """Tell every session to close and refuse new ones; wait (at most `seconds`) until every realtime
        handler has ended, so the rows of their responses are written while the ledger still runs."""
        self._closing.set()
        try:
            await asyncio.wait_for(self._idle.wait(), seconds)
        except TimeoutError:
            log.warning("%d realtime session(s) still closing after %gs", self._handlers, seconds)


@dataclass(frozen=True, slots=True)
class RealtimeState:
    """What realtime keeps for the life of the gateway (across config reloads)."""

    secrets: RealtimeSecrets
    sessions: RealtimeSessions


def _json(event: dict) -> str:
    return orjson.dumps(event).decode()


async def _pump(
    source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    relay_text: Callable[[str], Awaitable[None]],
    closing: asyncio.Event | None = None,
) -> int | None:
    """Frames from `source` to `sink` (text through `relay_text`) until `source` closes, or the gateway is
    `closing` it; the code it closed with (None: it went away, or the gateway closes it)."""
    try:
        while closing is None or not closing.is_set():
            message = await source.receive()
            kind = message.type
            if kind is WSMsgType.TEXT:
                await relay_text(message.data)
            elif kind is WSMsgType.BINARY:
                await sink.send_bytes(message.data)
            elif kind is WSMsgType.CLOSE:
                return message.data
            elif kind in (WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return None
    except (ConnectionError, aiohttp.ClientError) as exc:
        log.info("realtime relay: a side went away mid-frame (%r)", exc)
    return None


async def _closed_with_handshake(
    upstream: aiohttp.ClientWebSocketResponse, pump: asyncio.Future, closing: asyncio.Event, code: int
) -> None:
    """Close the provider's side with `code` while `pump` may still be reading it. aiohttp's close breaks a
    receive in progress, but a receive called after that closes the connection itself (with code 1000):
    `closing` stops the pump before it reads again. A provider that never answers the close frame is
    dropped after `_CLOSE_HANDSHAKE_SECONDS`."""
    closing.set()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_CLOSE_HANDSHAKE_SECONDS):
            await upstream.close(code=code)
    await pump


async def _stopped(pump: asyncio.Future) -> None:
    pump.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pump


class RealtimeRelay:
    """The local handler of GET /v1/realtime."""

    def __init__(
        self,
        selector: RowSelector,
        state: RealtimeState,
        accounts: Accounts,
        ledger: LedgerWriter,
        completions: Completions,
        overruns: OverrunReport | None = None,
    ) -> None:
        self._completions = completions
        self._overruns = overruns
        self._selector = selector
        self._secrets = state.secrets
        self._sessions = state.sessions
        self._accounts = accounts
        self._ledger = ledger

    async def handle(self, ctx: RequestContext) -> web.StreamResponse:
        with self._sessions.handling():
            return await self._handle(ctx)

    async def _handle(self, ctx: RequestContext) -> web.StreamResponse:
        client = web.WebSocketResponse(
            max_msg_size=MAX_FRAME, autoping=True, timeout=_CLOSE_HANDSHAKE_SECONDS
        )
        request = ctx.request
        # The lean front serves plain POSTs only: an upgrade always comes through aiohttp.
        if type(request) is FrontRequest or not client.can_prepare(request).ok:
            raise InvalidRequest(
                "GET /v1/realtime is a WebSocket endpoint: send an `Upgrade: websocket` request"
            )
        if self._sessions.stopping:
            raise ServiceUnavailable(_SHUTTING_DOWN)
        upstream, row = await self._connect(ctx)
        try:
            if self._sessions.stopping:  # it began while the provider answered: not upgraded, secret unused
                raise ServiceUnavailable(_SHUTTING_DOWN)
            # The provider accepted the session: the secret is used from here on, before the client sees its
            # 101 (so a connect after that is 404, never the 409 of one still being established).
            claim = _claim_of(ctx)
            claim.established = True
            try:
                await self._secrets.consume(claim.value)
            except ServiceUnavailable:  # still single-use: its claim stays taken until it expires
                log.error("realtime session %s: the client secret could not be marked used", ctx.request_id)
            await client.prepare(request)
        except BaseException:
            await upstream.close()
            raise
        ctx.row, ctx.status = row, 101
        ctx.first_byte_at = time.perf_counter()
        billing = SessionBilling(self._accounts, self._ledger, ctx, self._overruns)
        # A task the gateway awaits before its ledger stops: the session's last rows are written first.
        session = self._completions.run(self._session(ctx, client, upstream, billing))
        try:
            await asyncio.shield(session)
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client's connection drops, also right after a clean close,
            # and again when a graceful stop runs out of time. The session ends by itself then (its client
            # side is gone, or the stop closes it), closing the provider's side with the client's code; it is
            # still a session that ran, metered as such, and no cancellation may cut its end short.
            handler = asyncio.current_task()
            while not session.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(session)
            while handler is not None and handler.cancelling():
                handler.uncancel()
        return client

    async def _session(
        self,
        ctx: RequestContext,
        client: web.WebSocketResponse,
        upstream: aiohttp.ClientWebSocketResponse,
        billing: SessionBilling,
    ) -> None:
        """Apply the secret's session options, relay until a side closes, then settle and close both."""
        claim = _claim_of(ctx)
        self._sessions.add(client)
        outcome = "upstream_error"
        try:
            if claim.secret.session:
                update = {"type": "session.update", "session": {"type": "realtime", **claim.secret.session}}
                billing.open_with(update["session"])
                await upstream.send_str(_json(update))
            outcome = await self._relay(client, upstream, billing)
        except Exception as exc:  # the client is upgraded: no HTTP error can be sent any more
            log.warning("realtime session %s ended with an error: %r", ctx.request_id, exc)
            ctx.error = exc
        finally:
            self._sessions.discard(client)
            try:
                await billing.end("shutdown" if self._sessions.stopping else outcome)
            except Exception:
                log.exception("realtime session %s: settling its last responses failed", ctx.request_id)
            await upstream.close(code=_GOING_AWAY)
            await client.close(code=_GOING_AWAY)

    async def _connect(self, ctx: RequestContext) -> tuple[aiohttp.ClientWebSocketResponse, RoutingRow]:
        """The first row whose realtime endpoint accepts the handshake; nothing reached the client yet."""
        attempts = RowAttempts(self._selector, ctx)
        for row in attempts:
            connect = getattr(row.upstream, "connect_realtime", None)
            if connect is None:
                attempts.cannot_carry(row, "no_realtime", "has no realtime endpoint")
                continue
            try:
                upstream = await connect(row.upstream_model, ctx.request_id)
            except UpstreamFailure as exc:
                attempts.failed(row, "unreachable", "failed the realtime handshake", exc)
                continue
            attempts.succeeded(row)
            return upstream, row
        raise UpstreamUnavailable()

    async def _relay(
        self,
        client: web.WebSocketResponse,
        upstream: aiohttp.ClientWebSocketResponse,
        billing: SessionBilling,
    ) -> str:
        """Both directions at once; the first side to close (or fail) ends the session for both. Returns
        how it ended for the responses still running: "client_closed", "shutdown" or "upstream_error".

        The pump reading the provider is never cancelled: the provider's side is closed with a close
        handshake, which ends that pump. aiohttp's client drops a connection whose receive was cancelled
        without one, and a connection closed with frames still unread is reset: the provider then loses what
        it had not read yet (the last audio the client appended, the client's close code). The pump reading
        the client is cancelled before the client's side is closed (aiohttp's server still shakes hands
        then, where a close breaking its receive from another task would not)."""
        # Once the client is gone, the provider's events only settle its responses (nothing is forwarded).
        gone: list[str] = []
        heard = asyncio.Event()  # an event from the provider was settled after the client left

        async def client_text(text: str) -> None:
            refusal = await billing.from_client(text)
            if refusal is None:
                await upstream.send_str(text)
            else:  # not forwarded: the balance cannot cover the response it asks for
                await client.send_str(_json(refusal))

        async def upstream_text(text: str) -> None:
            if gone:
                await billing.from_upstream(text, gone[0])
                heard.set()
                return
            refused = await billing.from_upstream(text)
            if refused is not None:  # a response the server started, over the balance
                await upstream.send_str(_json(refused[0]))
            # A client that just left is noticed by its own pump, which ends the session; this one goes on
            # reading the provider (whose events still settle the responses).
            with contextlib.suppress(ConnectionError):
                await client.send_str(text)
                if refused is not None:
                    await client.send_str(_json(refused[1]))

        to_upstream = asyncio.ensure_future(_pump(client, upstream, client_text))
        closing = asyncio.Event()
        to_client = asyncio.ensure_future(_pump(upstream, client, upstream_text, closing))
        stopping = asyncio.ensure_future(self._sessions.closing())
        tasks = (to_upstream, to_client, stopping)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if to_upstream in done:  # the client closed (or went away): pass its code on
                ending = "shutdown" if self._sessions.stopping else "client_closed"
                gone.append(ending)
                await self._drain(upstream, billing, to_client, heard)
                await _closed_with_handshake(
                    upstream, to_client, closing, _close_code(to_upstream.result(), _GOING_AWAY)
                )
                return ending
            if to_client in done:  # the provider closed: the client gets its code
                await _stopped(to_upstream)
                await client.close(code=_close_code(to_client.result()))
                return "upstream_error"
            # The gateway stops. The client is told at once, and its close awaited (nobody reads it any more:
            # a frame it sent meanwhile is dropped, never forwarded), while the running responses are
            # cancelled upstream and their usage awaited.
            gone.append("shutdown")
            await _stopped(to_upstream)
            await asyncio.gather(
                client.close(code=_GOING_AWAY, message=b"server shutting down"),
                self._drain(upstream, billing, to_client, heard),
            )
            await _closed_with_handshake(upstream, to_client, closing, _GOING_AWAY)
            return "shutdown"
        finally:
            # Both sides are closed by now (a close ends the pump reading it), unless the session itself was
            # cancelled: then the pumps are.
            for task in tasks:
                await _stopped(task)

    async def _drain(
        self,
        upstream: aiohttp.ClientWebSocketResponse,
        billing: SessionBilling,
        reading: asyncio.Future,
        heard: asyncio.Event,
    ) -> None:
        """The client is gone: cancel its running responses upstream and wait, briefly, for their usage
        (which the pump `reading` the provider settles, signalling each event on `heard`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _DRAIN_SECONDS
        cancelled: set[str] = set()
        try:
            while billing.in_flight and not reading.done():
                for response_id in billing.running:
                    if response_id not in cancelled:
                        cancelled.add(response_id)
                        await upstream.send_str(
                            _json({"type": "response.cancel", "response_id": response_id})
                        )
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return
                heard.clear()
                hearing = asyncio.ensure_future(heard.wait())
                try:
                    await asyncio.wait(
                        (hearing, reading), timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    hearing.cancel()
        except (ConnectionError, aiohttp.ClientError):
            return


def _claim_of(ctx: RequestContext) -> RealtimeClaim:
    """The client secret the connect claimed (plugins.realtime_credentials, before a connect is relayed)."""
    claim = ctx.realtime
    if claim is None:
        raise PhaseError("realtime", "realtime_credentials")
    return claim
