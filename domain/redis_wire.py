"""A lean Redis connection for the counters' two hot scripts: one connection per process, commands
pipelined on it (a turn of the event loop's calls in one write; replies are matched to calls in order),
encoded and parsed by hiredis. A call costs a fraction of the Python that redis-py's asyncio client, with a
connection pool, spends on it (bench/results/design-measurements.md).

Errors are redis-py's exceptions, so callers handle one family: `ConnectionError` when Redis cannot be
reached or a reply takes longer than `timeout` (the connection is then dropped and every call waiting on
it fails; the next call connects again), `ResponseError` for an error reply. Scripts are called by SHA and
sent once in full when Redis does not know them (after a restart).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from typing import Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError


class Script:
    """A Lua script known by its SHA1."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source.encode()
        self.sha = hashlib.sha1(self.source).hexdigest().encode()


class _Wire(asyncio.Protocol):
    """One connection: writes requests, hands replies to the calls waiting for them in order.

    The commands of one turn of the event loop go out in one write at its end (`send`): under load several
    requests reach the counters in the same turn, and a write is a system call that costs more than the
    command itself; Redis then answers them in one read too. A lone command waits one turn of the loop."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader(replyError=ResponseError)
        self.waiting: deque[tuple[asyncio.Future, float]] = deque()
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self._outgoing: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, command: bytes, loop: asyncio.AbstractEventLoop) -> None:
        outgoing = self._outgoing
        if not outgoing:
            loop.call_soon(self._flush)
        outgoing.append(command)

    def _flush(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        if not self.lost:  # else connection_lost already failed their calls
            self.transport.write(outgoing[0] if len(outgoing) == 1 else b"".join(outgoing))

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        waiting = self.waiting
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            future = waiting.popleft()[0]
            if not future.done():
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        while self.waiting:
            future = self.waiting.popleft()[0]
            if not future.done():
                future.set_exception(RedisConnectionError(f"connection to Redis lost: {exc!r}"))


class RedisWire:
    """Pipelined calls on one connection to the Redis at `host:port` (database `db`, optional AUTH)."""

    def __init__(
        self,
        host: str,
        port: int,
        db: int = 0,
        *,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        self._address = (host, port)
        self._setup: list[tuple[Any, ...]] = []
        if password:
            self._setup.append(("AUTH", username, password) if username else ("AUTH", password))
        if db:
            self._setup.append(("SELECT", db))
        self._timeout = timeout
        self._wire: _Wire | None = None
        self._connecting: asyncio.Future | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    async def script(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """Run `script` (EVALSHA; the whole source once if Redis does not know it)."""
        try:
            return await self.call(b"EVALSHA", script.sha, len(keys), *keys, *args)
        except ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            return await self.call(b"EVAL", script.source, len(keys), *keys, *args)

    async def call(self, *parts: Any) -> Any:
        """Send one command and wait for its reply (an error reply raises)."""
        wire = self._wire
        if wire is None or wire.lost:
            wire = await self._connect()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        wire.waiting.append((future, time.monotonic()))
        wire.send(hiredis.pack_command(parts), loop)  # RESP, encoded in C
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout, self._watch)
        reply = await future
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def _watch(self) -> None:
        """Drop the connection when its oldest call has waited longer than the timeout."""
        self._watchdog = None
        wire = self._wire
        if wire is None or wire.lost or not wire.waiting:
            return
        waited = time.monotonic() - wire.waiting[0][1]
        if waited >= self._timeout:
            wire.transport.abort()  # connection_lost fails every waiting call
            return
        self._watchdog = asyncio.get_running_loop().call_later(self._timeout - waited, self._watch)

    async def _connect(self) -> _Wire:
        if self._connecting is None:
            self._connecting = asyncio.get_running_loop().create_task(self._open())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if self._connecting is connecting and connecting.done():
                self._connecting = None

    async def _open(self) -> _Wire:
        loop = asyncio.get_running_loop()
        try:
            _transport, wire = await asyncio.wait_for(
                loop.create_connection(_Wire, *self._address), self._timeout
            )
        except (TimeoutError, OSError) as exc:
            raise RedisConnectionError(f"cannot connect to Redis at {self._address}: {exc!r}") from exc
        self._wire = wire
        for setup in self._setup:
            await self.call(*setup)
        return wire

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._wire is not None and self._wire.transport is not None:
            self._wire.transport.close()
        self._wire = None


def wire_for(client: Any) -> RedisWire | None:
    """A RedisWire to the same server as a redis-py client on plain TCP; None for TLS or a Unix socket
    (the counters then use the client for every call)."""
    from redis.asyncio.connection import Connection

    pool = client.connection_pool
    if pool.connection_class is not Connection:
        return None
    options = pool.connection_kwargs
    return RedisWire(
        options.get("host", "localhost"),
        int(options.get("port", 6379)),
        int(options.get("db", 0) or 0),
        username=options.get("username"),
        password=options.get("password"),
        timeout=float(options.get("socket_timeout") or 5.0),
    )
