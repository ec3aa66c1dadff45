"""A lean Redis connection for the counters' two hot scripts: one connection per process, commands
pipelined on it (written at once on a connection awaiting at most one reply, else a turn of the event
loop's calls in one write; replies are matched to calls in order), parsed by hiredis. A call costs a
fraction of the Python that redis-py's asyncio client, with a connection pool, spends on it
(bench/results/design-measurements.md).

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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from modelgate.infra.redis_cluster import ClusterWire

# RESP headers of short arrays and bulk strings, made once.
_ARRAY_HEADS = [b"*%d\r\n" % n for n in range(256)]
_BULK_HEADS = [b"$%d\r\n" % n for n in range(256)]
_BULKS_KEPT = 4096  # the arguments whose encoding is kept (`_BULKS`)


def _bulk(value: str | bytes | int) -> bytes:
    """One argument of a command as a RESP bulk string."""
    if type(value) is str:
        data = value.encode()
    elif type(value) is bytes:
        data = value
    elif type(value) is int:
        data = b"%d" % value
    else:  # never a bool either: True == 1, so it could be sent as a 1 found in `_BULKS`
        raise TypeError(f"a Redis argument is str, bytes or int, not {type(value).__name__}")
    size = len(data)
    return (_BULK_HEADS[size] if size < 256 else b"$%d\r\n" % size) + data + b"\r\n"


class Memo(dict):
    """Values made from their keys by `make`, kept: a key seen lately costs a dict lookup. Emptied when it
    holds `limit`, so unique keys (row ids) do not grow it without end."""

    __slots__ = ("_limit", "_make")

    def __init__(self, make: Callable[[Any], Any], limit: int) -> None:
        super().__init__()
        self._make = make
        self._limit = limit

    def __missing__(self, key: Any) -> Any:
        if len(self) >= self._limit:
            self.clear()
        value = self[key] = self._make(key)
        return value


# The RESP encodings of the arguments sent lately. Most arguments of the counters' scripts come back request
# after request (key names, limits, amounts, the process id, operation codes), and a lookup costs a third of
# what hiredis.pack_command spends on an argument (a repr, an sprintf and two copies).
_BULKS = Memo(_bulk, _BULKS_KEPT)


def pack(parts: tuple | list) -> bytes:
    """A command (str, bytes or int arguments) in RESP, as hiredis.pack_command would encode it."""
    count = len(parts)
    head = _ARRAY_HEADS[count] if count < 256 else b"*%d\r\n" % count
    return head + b"".join(map(_BULKS.__getitem__, parts))  # in C, bar the first encoding of a value


class Script:
    """A Lua script known by its SHA1."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source.encode()
        self.sha = hashlib.sha1(self.source).hexdigest().encode()


class _Wire(asyncio.Protocol):
    """One connection: writes requests, hands replies to the calls waiting for them in order.

    A command sent while the connection is idle (no reply awaited) is written at once: a lone request's
    admission does not wait for the rest of the turn, and a batch of settlements leaves as soon as it is made,
    instead of sitting in front of the next request's admission in one write (Redis answers a write's
    commands only once it has run them all). So is a command sent while one reply is awaited: at one request
    at a time, a batch of settlements made in the turn before often goes out in the turn that reads the next
    request, and that request's admission, written behind it at once rather than at the end of the turn,
    is not kept waiting for one more pass of the loop (Redis runs the two in order all the same). While more
    replies are awaited, the commands of one turn of the event loop go out in one write at its end: under
    load several requests reach the counters in the same turn, and a write is a system call that costs more
    than the command itself; Redis then answers them in one read too."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader(replyError=ResponseError)
        self.waiting: deque[tuple[asyncio.Future, float]] = deque()
        # Set by connection_made, which runs before the connection is handed out.
        self.transport: asyncio.Transport
        self.lost = False
        self._outgoing: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, command: bytes, loop: asyncio.AbstractEventLoop) -> None:
        """Write `command`, whose reply is the last one awaited: at once on a connection awaiting at most one
        other reply, else at the end of the turn with the turn's other commands."""
        outgoing = self._outgoing
        if not outgoing:
            if len(self.waiting) <= 2:  # idle until this command, or awaiting one reply
                self.transport.write(command)
                return
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
    """Pipelined calls on one connection to the Redis at `host:port` (database `db`, optional AUTH), or at
    the address `master` gives each time it connects (the master a Redis Sentinel service names)."""

    def __init__(
        self,
        host: str,
        port: int,
        db: int = 0,
        *,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 5.0,
        master: Callable[[], Awaitable[tuple[str, int]]] | None = None,
    ) -> None:
        self._address = (host, port)
        self._master = master
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
        reply = await self._send((b"EVALSHA", script.sha, len(keys), *keys, *args))
        if isinstance(reply, ResponseError):
            if not str(reply).startswith("NOSCRIPT"):
                raise self._failed(reply)
            return await self.call(b"EVAL", script.source, len(keys), *keys, *args)
        return reply

    async def script_asking(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """Run `script` on a slot being imported here (a Redis Cluster's ASK answer): ASKING and the call
        written together, so that no other call of this connection comes between them."""
        if self._wire is None or self._wire.lost:
            await self._connect()
        asking = self._send((b"ASKING",))
        reply = await self._send((b"EVALSHA", script.sha, len(keys), *keys, *args))
        await asking
        if isinstance(reply, ResponseError):
            if not str(reply).startswith("NOSCRIPT"):
                raise self._failed(reply)
            asking = self._send((b"ASKING",))
            reply = await self._send((b"EVAL", script.source, len(keys), *keys, *args))
            await asking
            if isinstance(reply, ResponseError):
                raise self._failed(reply)
        return reply

    async def call(self, *parts: Any) -> Any:
        """Send one command and wait for its reply (an error reply raises)."""
        reply = await self._send(parts)
        if isinstance(reply, ResponseError):
            raise self._failed(reply)
        return reply

    def _failed(self, reply: ResponseError) -> Exception:
        """The error to raise for an error reply. A master demoted to a replica by a failover answers writes
        with READONLY: Redis is then unreachable for this call, and the connection is dropped so that the
        next call connects to the master the sentinels name now."""
        if not str(reply).startswith("READONLY"):
            return reply
        wire, self._wire = self._wire, None  # the next call connects again (the calls still on it fail)
        if wire is not None and not wire.lost:
            wire.transport.abort()
        return RedisConnectionError(f"the Redis server is no longer the master: {reply}")

    def _send(self, parts: tuple) -> Awaitable[Any]:
        """Queue one command; its reply (an error reply is returned, not raised) when awaited. A plain
        function on the hot path: one coroutine per script call is enough."""
        wire = self._wire
        if wire is None or wire.lost:
            return self._send_connected(parts)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        wire.waiting.append((future, time.monotonic()))
        wire.send(pack(parts), loop)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout, self._watch)
        return future

    async def _send_connected(self, parts: tuple) -> Any:
        await self._connect()
        return await self._send(parts)

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
        if self._master is not None:  # redis-py's MasterNotFoundError is a ConnectionError too
            self._address = await asyncio.wait_for(self._master(), self._timeout)
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
        if self._wire is not None:
            self._wire.transport.close()
        self._wire = None


def wire_for(client: Any) -> RedisWire | ClusterWire | None:
    """A RedisWire to the same server as a redis-py client on plain TCP, or to the master of the same
    Sentinel service, or a ClusterWire to the same Redis Cluster; None for TLS or a Unix socket (the
    counters then use the client for every call)."""
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.connection import Connection
    from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedConnection

    from modelgate.infra.redis_cluster import ClusterWire

    if isinstance(client, RedisCluster):
        manager = client.nodes_manager
        options = manager.connection_kwargs
        return ClusterWire(
            [(node.host, int(node.port)) for node in manager.startup_nodes.values()],
            username=options.get("username"),
            password=options.get("password"),
            timeout=float(options.get("socket_timeout") or 5.0),
        )
    pool = client.connection_pool
    options = pool.connection_kwargs
    if isinstance(pool, SentinelConnectionPool) and pool.connection_class is SentinelManagedConnection:
        return RedisWire(
            "",
            0,
            int(options.get("db", 0) or 0),
            username=options.get("username"),
            password=options.get("password"),
            timeout=float(options.get("socket_timeout") or 5.0),
            master=pool.get_master_address,
        )
    if pool.connection_class is not Connection:
        return None
    return RedisWire(
        options.get("host", "localhost"),
        int(options.get("port", 6379)),
        int(options.get("db", 0) or 0),
        username=options.get("username"),
        password=options.get("password"),
        timeout=float(options.get("socket_timeout") or 5.0),
    )
