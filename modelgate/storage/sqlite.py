"""SQLite backend (aiosqlite, WAL mode): the embedded default.

One connection serves the process; an asyncio lock serialises statements so a transaction opened by one
coroutine never swallows another coroutine's statements. Several processes may share the file: WAL plus a
busy timeout lets them take turns, and `BEGIN IMMEDIATE` takes the write lock up front.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from itertools import chain
from pathlib import Path
from typing import Any

import aiosqlite

from modelgate.storage.database import IntegrityViolation, NotifyHandler, Row, StorageError, plain_insert

_PLACEHOLDER = re.compile(r"\$(\d+)")

# The sqlite3 module binds int, float and str directly; for any other parameter it first looks for an
# adapter and, finding none, tries two attribute lookups (one raises and clears an AttributeError): ~2,000
# instructions each for the None and the bool of every ledger row. Registered, each costs a lookup and a
# call, and binds what it bound before: NULL, and a bool as the integer 0 or 1.
sqlite3.register_adapter(bool, int)
sqlite3.register_adapter(type(None), lambda value: value)

_translated: dict[str, str] = {}

# Rows per statement of an executemany of a plain INSERT: each statement's fixed work (a statement journal,
# its halt and reset) is paid once per block, not once per row; a fixed size keeps the statement cached.
_BLOCK_ROWS = 50
_blocks: dict[str, str | None] = {}


def to_sqlite(sql: str) -> str:
    """Rewrite `$1` placeholders to SQLite's `?1`; cached because queries are a fixed set."""
    out = _translated.get(sql)
    if out is None:
        out = _PLACEHOLDER.sub(r"?\1", sql)
        _translated[sql] = out
    return out


def block_insert(sql: str) -> str | None:
    """For a plain INSERT of one row, the same INSERT of `_BLOCK_ROWS` rows (SQLite's form); else None."""
    if sql in _blocks:
        return _blocks[sql]
    block = None
    target = plain_insert(sql)
    if target is not None:
        table, columns = target
        one = "(" + ", ".join(["?"] * len(columns)) + ")"
        block = f"INSERT INTO {table} ({', '.join(columns)}) VALUES " + ", ".join([one] * _BLOCK_ROWS)
    _blocks[sql] = block
    return block


def _rows(cursor_rows: Iterable[sqlite3.Row]) -> list[Row]:
    return [dict(r) for r in cursor_rows]


class _Tx:
    """Statements inside an open SQLite transaction (the lock is already held)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, *args: Any) -> int:
        try:
            cur = await self._conn.execute(to_sqlite(sql), args)
        except sqlite3.IntegrityError as exc:
            raise IntegrityViolation(str(exc)) from exc
        return cur.rowcount

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """Run `sql` once per row. A plain INSERT goes `_BLOCK_ROWS` rows a statement (the same rows, types
        and constraints; a failing row undoes its block, as a failing COPY does on PostgreSQL, and the ledger,
        the caller, rolls the transaction back), the rows past the last whole block one a statement."""
        block = block_insert(sql)
        whole = len(rows) - len(rows) % _BLOCK_ROWS if block is not None else 0
        try:
            if whole:
                blocks = [
                    tuple(chain.from_iterable(rows[start : start + _BLOCK_ROWS]))
                    for start in range(0, whole, _BLOCK_ROWS)
                ]
                await self._conn.executemany(block, blocks)
            if whole < len(rows):
                await self._conn.executemany(to_sqlite(sql), rows[whole:] if whole else rows)
        except sqlite3.IntegrityError as exc:
            raise IntegrityViolation(str(exc)) from exc

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        try:
            cur = await self._conn.execute(to_sqlite(sql), args)
        except sqlite3.IntegrityError as exc:
            raise IntegrityViolation(str(exc)) from exc
        return _rows(await cur.fetchall())

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return next(iter(row.values())) if row else None


class SQLiteDatabase:
    """The Database interface over one aiosqlite connection."""

    dialect = "sqlite"

    def __init__(self, conn: aiosqlite.Connection, path: str) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()
        self._tx = _Tx(conn)
        self.path = path
        self._listeners: dict[str, list[NotifyHandler]] = {}

    @classmethod
    async def open(cls, path: str) -> SQLiteDatabase:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA busy_timeout=10000")
        await conn.execute("PRAGMA foreign_keys=ON")
        await conn.execute("PRAGMA synchronous=NORMAL")
        return cls(conn, path)

    async def execute(self, sql: str, *args: Any) -> int:
        async with self._lock:
            return await self._tx.execute(sql, *args)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        async with self._lock:
            return await self._tx.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        async with self._lock:
            return await self._tx.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        async with self._lock:
            return await self._tx.fetchval(sql, *args)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Tx]:
        async with self._lock:
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StorageError(f"cannot begin transaction: {exc}") from exc
            try:
                yield self._tx
            except BaseException:
                await self._conn.execute("ROLLBACK")
                raise
            else:
                await self._conn.execute("COMMIT")

    async def ping(self) -> None:
        await self.fetchval("SELECT 1")

    async def close(self) -> None:
        await self._conn.close()

    async def notify(self, channel: str, payload: str) -> None:
        # SQLite has no pub/sub; in-process listeners hear it, other processes rely on Redis when configured.
        for handler in self._listeners.get(channel, ()):
            result = handler(payload)
            if result is not None:
                await result

    async def listen(self, channel: str, handler: NotifyHandler) -> None:
        self._listeners.setdefault(channel, []).append(handler)

    def on_listen_restored(self, callback: Callable[[], None]) -> None:
        return None  # notifications stay in this process: there is no connection to lose

    def on_listen_lost(self, callback: Callable[[], None]) -> None:
        return None

    async def execute_on_listener(self, sql: str, *args: Any) -> None:
        await self.execute(sql, *args)
