"""The upstream hot path's HTTP/1.1 client: a keep-alive connection pool per provider, llhttp parsing.

Why not aiohttp's ClientSession for this: on the benchmark, `ClientSession.request` costs a large part of
what a bare aiohttp passthrough spends in all, and this client a small fraction of that (the figures are in
bench/results/design-measurements.md).
It does only what a provider call needs: one origin, requests whose body is already in memory, answers
with a Content-Length, chunked or read to the end of the connection. aiohttp's ClientSession stays for the
rest (streamed multipart uploads, the realtime WebSocket).

Costs are paid only when something happens: a timer exists only while a read actually waits, an answer
that arrives with its head is parsed in the same callback, a connection goes back to the pool the moment
its answer has been read to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from bisect import bisect_left
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, cast

import httptools

from modelgate.proxy.http.outbox import outbox_for

log = logging.getLogger("modelgate.upstream")

# A saturated pool (a request had to wait for a connection) is logged at most this often.
_SATURATION_LOG_INTERVAL = 60.0
# Bounds of the pool-wait histogram, seconds (a wait is bounded by the provider's pool_wait_timeout).
POOL_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

# A consumer this far behind pauses reading from the provider (back-pressure); reading resumes once the
# consumer has taken what was buffered.
_PAUSE_ABOVE = 256 * 1024


class UpstreamBrokeOff(Exception):
    """The connection failed, closed or stalled before the answer was complete."""


class UpstreamTimeout(UpstreamBrokeOff):
    """The provider sent nothing for longer than the allowed wait."""


class PoolSaturated(UpstreamBrokeOff):
    """Every connection the operator's cap allows was busy for the whole `pool_wait_timeout`: the provider
    never saw the request."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; the parser's callbacks feed the answer in flight."""

    __slots__ = ("_out", "_outbox", "answer", "closed", "idle_since", "loop", "parser", "pool", "transport")

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        # Its loop, looked up once: on Python 3.11 each `asyncio.get_running_loop()` is a getpid() syscall.
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: UpstreamAnswer | None = None
        self.closed = False
        self.idle_since = 0.0
        self._out: tuple[bytes, bytes | None] | None = None  # a request queued in the outbox
        self._outbox = outbox_for(self.loop)

    def send(self, head: bytes, body: bytes | None) -> None:
        """Write a request: now if it is the pass's first write, else at the start of the next pass with the
        others of this one (modelgate/proxy/http/outbox.py). A connection aborted meanwhile never sends it."""
        if self._outbox.first():
            self._write(head, body)
        else:
            self._out = (head, body)
            self._outbox.queue(self)

    def flush_out(self) -> None:
        out, self._out = self._out, None
        transport = self.transport
        if out is not None and not self.closed and transport is not None and not transport.is_closing():
            self._write(*out)

    def _write(self, head: bytes, body: bytes | None) -> None:
        transport = self.transport
        if transport is None:  # never: a connection is used once connected
            return
        if body:
            transport.writelines((head, body))
        else:
            transport.write(head)

    # asyncio protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's: reads and writes

    def data_received(self, data: bytes) -> None:
        answer = self.answer
        if answer is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.abort()
            return
        answer.received = True
        try:
            self.parser.feed_data(data)
            if answer._sink is not None:
                # While piped (`UpstreamAnswer.pipe`), here rather than in a method (a call less a piece): the
                # pieces of this read to the sink as one, unless the answer ended or failed in this read,
                # whose last piece the piping caller reads itself (its end woke the caller).
                chunks = answer._chunks
                if chunks and not answer._done and answer._error is None:
                    chunk = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    chunks.clear()
                    answer._buffered = 0
                    if answer._paused:
                        answer._resume()
                    answer._pushed_at = self.loop.time()
                    if not answer._sink(chunk):  # the sink stops: its caller takes over
                        answer._sink = None
                        answer._wake()
        except httptools.HttpParserUpgrade:
            answer.fail(UpstreamBrokeOff("the provider switched protocols"))
            self.abort()
        except httptools.HttpParserError as exc:
            answer.fail(UpstreamBrokeOff(f"malformed answer from the provider: {exc}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._out = None
        answer = self.answer
        if answer is not None:
            answer.connection_lost(exc)
        self.pool.forget(self)

    # httptools callbacks

    def on_message_begin(self) -> None:
        answer = self.answer
        if answer is not None and answer._done:
            # A second answer behind the one asked for (more bytes than announced, or one never asked
            # for): none of it belongs to this request, and the connection cannot be trusted any more.
            self.abort()

    # (data_received feeds the parser only while an answer is awaited: `answer` is set in each of these)

    def on_header(self, name: bytes, value: bytes) -> None:
        answer = self.answer
        if answer is not None:
            answer.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        answer = self.answer
        if answer is not None and not self.closed:
            answer.head_complete(self.parser.get_status_code(), self.parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        # The answer's feed, inline (a call less a piece): kept until read or pushed; a consumer far behind
        # pauses reading (back-pressure); a reader waiting (not piped) is woken.
        answer = self.answer
        if answer is not None and not self.closed:
            answer._chunks.append(body)
            answer._buffered += len(body)
            if answer._buffered > _PAUSE_ABOVE and not answer._paused and self.transport is not None:
                answer._paused = True
                self.transport.pause_reading()
            if answer._waiter is not None and answer._sink is None:  # a later piece of a read finds it gone
                answer._wake()

    def on_message_complete(self) -> None:
        answer = self.answer
        if answer is not None and not self.closed:
            answer.message_complete()

    def abort(self) -> None:
        self.closed = True
        self._out = None
        if self.transport is not None:
            self.transport.abort()


class UpstreamAnswer:
    """A provider's answer: an `UpstreamResponse` whose body (`content`) is itself, an `AnswerBody`
    (modelgate/proxy/upstream/providers.py); headers by lower-case name.
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_deadlines",
        "_done",
        "_error",
        "_head_seen",
        "_interim",
        "_keep_alive",
        "_loop",
        "_paused",
        "_pushed_at",
        "_read_timeout",
        "_sink",
        "_waiter",
        "credential",
        "headers",
        "raw_headers",
        "received",
        "status",
    )

    def __init__(self, conn: _Connection, read_timeout: float | None) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        # the fingerprint of the key it was asked with (modelgate/proxy/upstream/key_ring.py)
        self.credential = ""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.received = False  # any byte of an answer arrived on the connection for this request
        self._conn: _Connection | None = conn
        self._deadlines = conn.pool.deadlines
        self._loop = conn.loop
        self._read_timeout = read_timeout
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._head_seen = False
        self._interim = False
        self._done = False
        self._keep_alive = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._sink: Callable[[bytes], bool] | None = None  # while piped (`pipe`)
        self._pushed_at = 0.0

    @property
    def content(self) -> UpstreamAnswer:
        """The body reader (aiohttp's name for it): the answer itself. A property, not an attribute: a
        reference to itself would make every answer a reference cycle, left for the garbage collector."""
        return self

    # fed by the connection

    def head_complete(self, status: int, keep_alive: bool) -> None:
        if status < 200:  # an interim answer (103 Early Hints): the real one follows
            self.raw_headers.clear()
            self._interim = True
            return
        headers: dict[str, str] = {}
        for name, value in self.raw_headers:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            prior = headers.get(key)
            headers[key] = text if prior is None else f"{prior}, {text}"
        self.raw_headers.clear()
        self.headers = headers
        self.status = status
        self._keep_alive = keep_alive
        self._head_seen = True
        self._wake()

    def message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._done = True
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._done:
            return
        headers = self.headers
        read_to_close = (
            self._head_seen
            and exc is None
            and "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "")
        )
        if read_to_close:  # an answer delimited by the end of the connection, complete now
            self._done = True
            self._keep_alive = False
            self._wake()
        else:
            self.fail(UpstreamBrokeOff("the provider closed the connection" + (f": {exc}" if exc else "")))

    def fail(self, error: BaseException) -> None:
        if self._error is None and not self._done:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None  # met: its deadline no longer applies (time_out), and nothing wakes it twice
            if not waiter.done():
                waiter.set_result(None)

    # waiting

    async def _wait(self, seconds: float | None, what: str) -> None:
        """Until the connection feeds something, fails, or `seconds` pass with nothing."""
        waiter = self._arm(seconds, what)
        try:
            await waiter
        finally:
            self._disarm(waiter, seconds)

    def _arm(self, seconds: float | None, what: str) -> asyncio.Future:
        """The future a wait awaits (`_wait`), watched for `seconds`; `_disarm` once it was awaited."""
        self._waiter = waiter = self._loop.create_future()
        if seconds:
            self._deadlines.watch(waiter, self, seconds, what)
        return waiter

    def _disarm(self, waiter: asyncio.Future, seconds: float | None) -> None:
        self._waiter = None
        if seconds:
            self._deadlines.forget(waiter)

    def time_out(self, waiter: asyncio.Future, seconds: float, what: str) -> None:
        """Called by the Deadlines when `waiter` waited `seconds` in vain."""
        # Not when the wait was met in the same turn of the loop, before the waiting task could run.
        if waiter is self._waiter and not waiter.done():
            if self._sink is not None:  # piped: the wait is for the next piece after the last one pushed
                due = self._pushed_at + seconds
                if due > self._loop.time():
                    self._deadlines.watch_until(waiter, self, due, seconds, what)
                    return
            self.fail(UpstreamTimeout(f"no {what} within {seconds:g}s"))
            self._drop()

    async def wait_head(self, seconds: float | None) -> None:
        while not self._head_seen:
            if self._error is not None:
                raise self._error
            waiter = self._arm(seconds, "response")  # `_wait`, inline: one coroutine less per request
            try:
                await waiter
            finally:
                self._disarm(waiter, seconds)

    # reading

    async def read(self, n: int = -1) -> bytes:
        """The whole body (n < 0), or up to n bytes of it; the connection is released at the end."""
        while not self._done and (n < 0 or self._buffered < n):
            if self._error is not None:
                raise self._error
            self._resume()  # the reader wants more than is buffered: back-pressure must not starve it
            await self._wait(self._read_timeout, "data")
        if self._error is not None:
            raise self._error
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if 0 <= n < len(body):
            self._chunks = [body[n:]]
            self._buffered = len(body) - n
            return body[:n]
        chunks.clear()
        self._buffered = 0
        if self._done:
            self.release()
        else:
            self._resume()
        return body

    def iter_any(self) -> AsyncIterator[bytes]:
        """Each piece of the body as it arrives (several arrived together come as one)."""
        return _Pieces(self)

    async def next_piece(self) -> bytes:
        """What arrived since the last piece, waiting for it if nothing has; StopAsyncIteration at the end."""
        while True:
            chunks = self._chunks
            if chunks:
                chunk = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._buffered = 0
                self._resume()
                return chunk
            if self._error is not None:
                raise self._error
            if self._done:
                raise StopAsyncIteration
            await self._wait(self._read_timeout, "data")

    async def pipe(self, sink: Callable[[bytes], bool]) -> None:
        """Hand each piece to `sink` as it arrives, from the connection's callback (what arrived in one read
        as one piece), until the answer ends, fails, or `sink` returns False; the caller is woken only then,
        not once a piece, and reads what is left (the last piece, an error) as usual. The read timeout
        counts from the last piece pushed."""
        if self._chunks or self._done or self._error is not None:
            return  # something to read already
        self._sink = sink
        self._pushed_at = self._loop.time()
        # `_wait`, inline: one coroutine less held by every piped stream, for as long as it is open.
        seconds = self._read_timeout
        waiter = self._arm(seconds, "data")
        try:
            await waiter
        finally:
            self._sink = None
            self._disarm(waiter, seconds)

    def at_eof(self) -> bool:
        """Whether the whole body is in and has been read (aiohttp's StreamReader.at_eof)."""
        return self._done and not self._chunks and self._error is None

    def _resume(self) -> None:
        conn = self._conn
        if self._paused and conn is not None and not conn.closed and conn.transport is not None:
            self._paused = False
            conn.transport.resume_reading()

    # letting go

    def release(self) -> None:
        """Give the connection back to the pool if this answer was read to its end, else drop it."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        if self._done and self._error is None and self._keep_alive and not conn.closed:
            if self._paused and conn.transport is not None:
                # Back-pressure paused reading as the answer's last bytes came in: a connection pooled
                # paused would never see the next answer (it would wait out its first-byte timeout).
                self._paused = False
                conn.transport.resume_reading()
            conn.answer = None
            conn.pool.put(conn)
        else:
            conn.answer = None
            conn.pool.drop(conn)

    close = release

    def _drop(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.answer = None
            conn.pool.drop(conn)


class _Pieces:
    """The iterator of `UpstreamAnswer.iter_any`: a plain object, not an async generator, whose first step
    would register it in the event loop's weak set of generators (and its end unregister it), on every
    stream."""

    __slots__ = ("_answer",)

    def __init__(self, answer: UpstreamAnswer) -> None:
        self._answer = answer

    def __aiter__(self) -> _Pieces:
        return self

    def __anext__(self) -> Coroutine[Any, Any, bytes]:
        answer = self._answer
        if answer._done and not answer._chunks and answer._error is None:
            # Read to its end: said at once, without a coroutine (the relay reads every stream to its end).
            raise StopAsyncIteration
        return answer.next_piece()


def piped_answer(pieces: AsyncIterator[bytes]) -> UpstreamAnswer | None:
    """The answer whose pieces (`iter_any`) these are, which can be piped (`pipe`); None for any other
    body."""
    return pieces._answer if isinstance(pieces, _Pieces) else None


class Deadlines:
    """The timeouts of every wait on one pool, checked by one periodic timer.

    A timer per wait (uvloop: a libuv timer started and stopped) would be paid on every request and, in a
    stream, on every chunk; a wait here costs a clock read and two dict operations. A wait times out
    between its deadline and one tick later; the tick is a tenth of the shortest timeout watched (10 ms to
    1 s), so a 60 s timeout fires within 61 s.
    """

    __slots__ = ("_tick", "_timer", "_waits")

    def __init__(self) -> None:
        self._waits: dict[asyncio.Future, tuple[float, UpstreamAnswer, float, str]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._tick = 1.0

    def watch(self, waiter: asyncio.Future, answer: UpstreamAnswer, seconds: float, what: str) -> None:
        loop = answer._loop
        self._waits[waiter] = (loop.time() + seconds, answer, seconds, what)
        if self._timer is not None and seconds >= self._tick * 10:
            return  # the usual wait: the running timer already ticks often enough for it
        tick = min(max(seconds / 10, 0.01), 1.0)
        if self._timer is None or tick < self._tick:
            if self._timer is not None:
                self._timer.cancel()
            self._tick = tick
            self._timer = loop.call_later(tick, self._check, loop)

    def watch_until(
        self, waiter: asyncio.Future, answer: UpstreamAnswer, deadline: float, seconds: float, what: str
    ) -> None:
        """Watch `waiter` again, to `deadline` (from `time_out`, inside a tick: the timer runs on)."""
        self._waits[waiter] = (deadline, answer, seconds, what)

    def forget(self, waiter: asyncio.Future) -> None:
        self._waits.pop(waiter, None)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        expired = [(waiter, entry) for waiter, entry in self._waits.items() if entry[0] <= now]
        for waiter, (_deadline, answer, seconds, what) in expired:
            del self._waits[waiter]
            answer.time_out(waiter, seconds, what)
        if self._waits:
            self._timer = loop.call_later(self._tick, self._check, loop)
        else:
            self._timer = None
            self._tick = 1.0

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waits.clear()


class ConnectionPool:
    """Keep-alive connections to one origin, idle ones reused newest first; at most `limit` open when the
    operator set a cap (None: as many as requests need, bounded by the open-files limit).

    Over the cap a request waits for a connection at most `wait_timeout` seconds, then gets PoolSaturated;
    waits are counted (`waiting`, `wait_counts`, `wait_seconds`, `wait_timeouts`) for the metrics, and a
    saturated pool is logged at most once a minute.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None,
        limit: int | None,
        connect_timeout: float,
        keepalive_seconds: float = 30.0,
        wait_timeout: float | None = None,
        name: str = "",
    ) -> None:
        self.name = name or f"{host}:{port}"
        self._host = host
        self._port = port
        self._tls = tls
        self._limit = limit if limit else None
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive_seconds
        self._wait_timeout = wait_timeout
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()  # connected or connecting, idle or busy
        self._connecting = 0
        self._waiters: deque[asyncio.Future] = deque()
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False
        self.deadlines = Deadlines()
        # Only requests that found the pool full move these: the usual request pays nothing for them.
        self.wait_counts = [0] * (len(POOL_WAIT_BUCKETS) + 1)  # per bucket, not cumulative
        self.wait_seconds = 0.0
        self.wait_timeouts = 0
        self._saturated_since_log = 0
        self._saturation_logged_at = -_SATURATION_LOG_INTERVAL

    @property
    def size(self) -> int:
        """Connections open or being opened."""
        return len(self._open) + self._connecting

    @property
    def idle(self) -> int:
        return len(self._idle)

    @property
    def busy(self) -> int:
        """Connections carrying a request (or being opened for one)."""
        return len(self._open) + self._connecting - len(self._idle)

    @property
    def waiting(self) -> int:
        """Requests waiting for a connection now."""
        return len(self._waiters)

    @property
    def limit(self) -> int | None:
        return self._limit

    async def acquire(self, *, fresh: bool = False) -> tuple[_Connection, bool]:
        """(a connection, whether it served an earlier request); over the cap, waits at most `wait_timeout`
        for a place, then raises PoolSaturated."""
        if not fresh:
            conn = self.idle_connection()
            if conn is not None:
                return conn, True
        elif self._closed:
            raise UpstreamBrokeOff("the client is closed")
        idle = self._idle
        loop = asyncio.get_running_loop()
        limit = self._limit
        if limit is not None and self.size >= limit:
            if fresh and idle:  # make room for a new connection
                self.drop(idle.pop(0))
            if self.size >= limit:
                handed = await self._wait_for_place(loop, limit, fresh)
                if handed is not None:
                    return handed, True
        self._connecting += 1
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self),
                    self._host,
                    self._port,
                    ssl=self._tls,
                    server_hostname=self._host if self._tls is not None else None,
                )
        except BaseException:
            self._connecting -= 1
            self._wake_one()
            raise
        self._connecting -= 1
        if self._closed:  # closed while connecting: nobody would ever close this one
            conn.abort()
            raise UpstreamBrokeOff("the client is closed")
        self._open.add(conn)
        return conn, False

    def idle_connection(self) -> _Connection | None:
        """A kept-alive connection ready for a request (the newest), without waiting; None when there is none
        (`acquire` then opens one, or waits for a place)."""
        if self._closed:
            raise UpstreamBrokeOff("the client is closed")
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.loop.time() - conn.idle_since < self._keepalive:
                if conn.transport is not None and not conn.transport.is_closing():
                    return conn
            self.drop(conn)
        return None

    async def _wait_for_place(
        self, loop: asyncio.AbstractEventLoop, limit: int, fresh: bool
    ) -> _Connection | None:
        """Wait while `limit` connections are busy, at most `wait_timeout` in all: a kept-alive connection
        handed over by a request that finished (unless `fresh`), or None when a place is free to open one."""
        started = time.perf_counter()
        self._note_saturation(limit)
        deadline = None if self._wait_timeout is None else loop.time() + self._wait_timeout
        try:
            while self.size >= limit:
                waiter = loop.create_future()
                self._waiters.append(waiter)
                timer = None
                if deadline is not None:
                    timer = loop.call_at(deadline, _expire, waiter)
                try:
                    handed = await waiter
                except PoolSaturated:
                    self.wait_timeouts += 1
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                    raise PoolSaturated(
                        f"all {limit} connections busy for {self._wait_timeout:g}s (pool_size)"
                    ) from None
                except BaseException:
                    if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                        if waiter.result() is not None:
                            self.put(waiter.result())  # handed over just as we were cancelled: pass it on
                    else:
                        with contextlib.suppress(ValueError):
                            self._waiters.remove(waiter)
                    raise
                finally:
                    if timer is not None:
                        timer.cancel()
                if handed is not None:
                    if not handed.closed and not fresh:
                        return handed
                    self.drop(handed)
            return None
        finally:
            waited = time.perf_counter() - started
            self.wait_counts[bisect_left(POOL_WAIT_BUCKETS, waited)] += 1
            self.wait_seconds += waited

    def _note_saturation(self, limit: int) -> None:
        self._saturated_since_log += 1
        now = time.monotonic()
        if now - self._saturation_logged_at >= _SATURATION_LOG_INTERVAL:
            self._saturation_logged_at = now
            log.warning(
                "upstream %s: all %d connections of its pool are busy (pool_size); requests wait %s for one, "
                "then fail over (%d waited since the last message)",
                self.name,
                limit,
                "without a deadline" if self._wait_timeout is None else f"up to {self._wait_timeout:g}s",
                self._saturated_since_log,
            )
            self._saturated_since_log = 0

    def put(self, conn: _Connection) -> None:
        """A connection whose answer was read to its end: to a waiter, else to the idle list."""
        if self._closed or conn.closed:
            self.drop(conn)
            return
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        loop = conn.loop
        conn.idle_since = loop.time()
        self._idle.append(conn)
        if self._sweep is None:
            self._sweep = loop.call_later(self._keepalive, self._close_stale)

    def drop(self, conn: _Connection) -> None:
        """Close a connection that cannot serve another request."""
        conn.abort()
        self.forget(conn)

    def forget(self, conn: _Connection) -> None:
        """A connection is gone (closed by us or by the provider): free its place."""
        if conn in self._open:
            self._open.discard(conn)
            if conn.answer is None:
                with contextlib.suppress(ValueError):
                    self._idle.remove(conn)
            self._wake_one()

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # a place is free: open a new connection
                return

    def _close_stale(self) -> None:
        self._sweep = None
        now = asyncio.get_running_loop().time()
        for conn in [c for c in self._idle if now - c.idle_since >= self._keepalive]:
            self.drop(conn)
        if self._idle:
            oldest = min(c.idle_since for c in self._idle)
            self._sweep = asyncio.get_running_loop().call_later(
                max(0.05, oldest + self._keepalive - now), self._close_stale
            )

    def close(self) -> None:
        """Close every connection; answers still being read break off."""
        self._closed = True
        self.deadlines.close()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        # Waiters first: each connection dropped below frees a place, which would wake one to connect anew.
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(UpstreamBrokeOff("the client is closed"))
        for conn in list(self._open):
            self.drop(conn)
        self._idle.clear()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(PoolSaturated("pool wait timed out"))


class HttpClient:
    """Requests to one origin over a ConnectionPool."""

    def __init__(self, pool: ConnectionPool, read_timeout: float | None) -> None:
        self.pool = pool
        self._read_timeout = read_timeout

    async def request(
        self, head: bytes, body: bytes | None, first_byte_seconds: float | None
    ) -> UpstreamAnswer:
        """Send `head` (request line and headers, ending in a blank line) and `body`; return once the
        answer's head is in. A kept-alive connection the provider closed before answering at all is
        retried once on a new connection: the provider never saw that request.
        """
        fresh = False
        pool = self.pool
        while True:
            # A kept-alive connection (the usual case) is taken without a coroutine of the pool's.
            conn = None if fresh else pool.idle_connection()
            if conn is not None:
                reused = True
            else:
                conn, reused = await pool.acquire(fresh=fresh)
            answer = UpstreamAnswer(conn, self._read_timeout)
            conn.answer = answer
            conn.send(head, body)
            try:
                await answer.wait_head(first_byte_seconds)
            except UpstreamTimeout:
                answer.close()
                raise
            except UpstreamBrokeOff:
                answer.close()
                if reused and not answer.received and not fresh:
                    fresh = True
                    continue
                raise
            except BaseException:  # cancelled (the client went away): let go of the provider at once
                answer.close()
                raise
            return answer
