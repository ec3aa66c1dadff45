"""PostgreSQL backend (asyncpg pool): the production storage.

LISTEN/NOTIFY carries cache invalidations (key revocation, policy changes) between gateway processes. A
statement that fails because no read-write server answers (refused or lost connections, a server shutting
down, a standby or a demoted primary refusing writes: a failover under way) raises `StorageUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from modelgate.storage.database import (
    IntegrityViolation,
    NotifyHandler,
    Row,
    StorageError,
    StorageUnavailable,
    plain_insert,
)

log = logging.getLogger("modelgate.storage")

# No read-write server answers: connections refused, reset or lost, a server shutting down or starting,
# a standby (or a demoted primary) refusing a write, no listed host that takes writes; and a server that
# does not answer within `command_timeout` (TimeoutError is an OSError).
_UNAVAILABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.TargetServerAttributeNotMatched,
)


@contextmanager
def _available(conn: asyncpg.Connection | PoolConnectionProxy | None = None) -> Iterator[None]:
    """Raise what a constraint or a lost server makes of a statement as the storage's own errors. On `conn`,
    a use refused because the server closed it (a rollback after the primary died, say) is one too."""
    try:
        yield
    except asyncpg.IntegrityConstraintViolationError as exc:
        raise IntegrityViolation(str(exc)) from exc
    except _UNAVAILABLE as exc:
        raise StorageUnavailable(f"PostgreSQL unavailable: {exc!r}") from exc
    except asyncpg.InterfaceError as exc:
        if conn is None or not _closed(conn):
            raise  # a misuse, not an outage
        raise StorageUnavailable(f"PostgreSQL unavailable: {exc!r}") from exc


def _closed(conn: asyncpg.Connection | PoolConnectionProxy) -> bool:
    try:
        return conn.is_closed()
    except asyncpg.InterfaceError:  # the pool detached its proxy while in use: the server closed it
        return True


class _Conn:
    """Statements on one acquired connection (inside a transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: asyncpg.Connection | PoolConnectionProxy) -> None:
        self._conn = conn

    async def execute(self, sql: str, *args: Any) -> int:
        with _available(self._conn):
            status = await self._conn.execute(sql, *args)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """Run `sql` once per row. A plain INSERT goes as COPY (the same rows, types and constraints): asyncpg
        binds and executes a statement per row, at twice COPY's cost a row (the ledger writes every request's
        row this way)."""
        target = plain_insert(sql)
        with _available(self._conn):
            if target is None:
                await self._conn.executemany(sql, rows)
            elif rows:
                table, columns = target
                await self._conn.copy_records_to_table(table, records=rows, columns=list(columns))

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        with _available(self._conn):
            return [dict(r) for r in await self._conn.fetch(sql, *args)]

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        with _available(self._conn):
            row = await self._conn.fetchrow(sql, *args)
        return dict(row) if row is not None else None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        with _available(self._conn):
            return await self._conn.fetchval(sql, *args)


class PostgresDatabase:
    """The Database interface over an asyncpg pool."""

    dialect = "postgres"

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        self._pool = pool
        self._url = url
        self._listen_conn: asyncpg.Connection | None = None
        self._handlers: dict[str, list[NotifyHandler]] = {}
        self._restored: list[Callable[[], None]] = []
        self._lost: list[Callable[[], None]] = []
        self._reconnecting: asyncio.Task | None = None
        self._closing = False

    @classmethod
    async def open(cls, url: str, *, pool_size: int = 10) -> PostgresDatabase:
        # No connection floor: asyncpg restores one in the background and logs a traceback for every try
        # while the server is down; a connection is opened when a query needs one instead.
        pool = await asyncpg.create_pool(url, min_size=0, max_size=pool_size, command_timeout=30)
        try:
            await pool.fetchval("SELECT 1")  # a wrong URL or a server that is down fails here, at start
        except (OSError, asyncpg.PostgresError) as exc:
            await pool.close()
            raise StorageError(f"cannot connect to PostgreSQL: {exc}") from exc
        return cls(pool, url)

    async def execute(self, sql: str, *args: Any) -> int:
        with _available():
            async with self._pool.acquire() as conn:
                return await _Conn(conn).execute(sql, *args)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        with _available():
            async with self._pool.acquire() as conn:
                return await _Conn(conn).fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        with _available():
            async with self._pool.acquire() as conn:
                return await _Conn(conn).fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        with _available():
            async with self._pool.acquire() as conn:
                return await _Conn(conn).fetchval(sql, *args)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Conn]:
        # Connecting, BEGIN and COMMIT too: a COMMIT whose answer was lost with the server has an unknown
        # outcome, which StorageUnavailable also covers (a caller that must know reads before repeating).
        with _available():
            async with self._pool.acquire() as conn:
                with _available(conn):
                    async with conn.transaction():
                        yield _Conn(conn)

    async def ping(self) -> None:
        await self.fetchval("SELECT 1")

    async def close(self) -> None:
        self._closing = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnecting
        if self._listen_conn is not None:
            try:
                await self._listen_conn.close(timeout=5)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                self._listen_conn.terminate()  # a connection that does not close politely is dropped
        await self._pool.close()

    async def notify(self, channel: str, payload: str) -> None:
        await self.execute("SELECT pg_notify($1, $2)", channel, payload)

    async def listen(self, channel: str, handler: NotifyHandler) -> None:
        if self._listen_conn is None:
            self._listen_conn = await self._listening_connection()
        if channel not in self._handlers:
            self._handlers[channel] = []
            await self._listen_conn.add_listener(channel, self._dispatch)
        self._handlers[channel].append(handler)

    def on_listen_restored(self, callback: Callable[[], None]) -> None:
        """Called after the listening connection was lost and made again: notifications sent meanwhile were
        never delivered, so whoever caches what they announce must drop it."""
        self._restored.append(callback)

    def on_listen_lost(self, callback: Callable[[], None]) -> None:
        """Called the moment the listening connection is found lost: until it is back, notifications are not
        heard, so whoever caches what they announce must stop trusting it (see storage/presence.py)."""
        self._lost.append(callback)

    async def execute_on_listener(self, sql: str, *args: Any) -> None:
        """Run a statement on the listening connection itself: when it returns, every notification committed
        before the statement started has been delivered to this process's handlers (PostgreSQL sends them
        ahead of the statement's end), which is what a lease renewal proves (storage/presence.py)."""
        conn = self._listen_conn
        if conn is None or conn.is_closed() or self._reconnecting is not None:
            raise StorageError("the notification connection is down")
        try:
            await conn.execute(sql, *args)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StorageError(f"statement on the notification connection failed: {exc}") from exc

    async def _listening_connection(self) -> asyncpg.Connection:
        conn = await asyncpg.connect(self._url, timeout=10)
        conn.add_termination_listener(self._listener_lost)
        return conn

    def _listener_lost(self, _conn: asyncpg.Connection) -> None:
        if self._closing or self._reconnecting is not None:
            return
        log.warning("the PostgreSQL notification connection was lost; reconnecting")
        for callback in self._lost:
            callback()
        self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect(), name="pg-listen")

    async def _reconnect(self) -> None:
        delay = 0.2
        try:
            while not self._closing:
                try:
                    conn = await self._listening_connection()
                    for channel in self._handlers:
                        await conn.add_listener(channel, self._dispatch)
                except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                self._listen_conn = conn
                log.warning("the PostgreSQL notification connection is back; cached state is read afresh")
                for callback in self._restored:
                    callback()
                return
        finally:
            self._reconnecting = None

    def _dispatch(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        for handler in self._handlers.get(channel, ()):
            result = handler(payload)
            if result is not None:
                task = asyncio.ensure_future(result)
                task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("notify handler failed: %r", task.exception())
