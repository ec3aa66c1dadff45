"""The database interface both backends implement.

Queries are written once, in PostgreSQL style (`$1` placeholders, portable types); the SQLite backend
rewrites the placeholders to its numbered `?1` form. Rows come back as plain dicts on both backends.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import lru_cache
from typing import Any, Protocol

Row = dict[str, Any]
NotifyHandler = Callable[[str], Awaitable[None] | None]


# A plain INSERT of one row per tuple, its placeholders $1..$n in column order (nothing after VALUES). Names
# in lower case only: PostgreSQL's COPY quotes them, where the INSERT would fold upper case to lower.
_PLAIN_INSERT = re.compile(
    r"INSERT INTO ([a-z_][a-z0-9_]*) \(([a-z0-9_, ]+)\) VALUES \((\$\d+(?:, \$\d+)*)\)"
)


@lru_cache(maxsize=256)  # the statements are a fixed set
def plain_insert(sql: str) -> tuple[str, tuple[str, ...]] | None:
    """(table, columns) of a plain INSERT, which a backend's `executemany` may send in bulk (COPY, rows per
    statement) with the same rows, types and constraints; None for any other statement."""
    match = _PLAIN_INSERT.fullmatch(sql)
    if match is None:
        return None
    table, columns, placeholders = match.groups()
    names = tuple(column.strip() for column in columns.split(","))
    if placeholders.split(", ") != [f"${n}" for n in range(1, len(names) + 1)]:
        return None
    return table, names


class StorageError(Exception):
    """A storage operation failed for a reason other than a constraint."""


class StorageUnavailable(StorageError):
    """No server that takes the statement answers (an outage, a failover under way): a later try may
    succeed. A write that raised it may have been committed when the answer to its COMMIT was lost."""


class IntegrityViolation(StorageError):
    """A UNIQUE / FOREIGN KEY / CHECK constraint rejected a write."""


class Executor(Protocol):
    """Anything that runs SQL: the database itself or an open transaction."""

    async def execute(self, sql: str, *args: Any) -> int: ...
    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...
    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...
    async def fetchval(self, sql: str, *args: Any) -> Any: ...


class Transaction(Executor, Protocol):
    """An open transaction: it also takes many rows at once (a plain INSERT in bulk where it can)."""

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...


class Database(Executor, Protocol):
    """A connection pool (PostgreSQL) or a serialised connection (SQLite)."""

    dialect: str

    def transaction(self) -> AbstractAsyncContextManager[Transaction]: ...
    async def ping(self) -> None: ...
    async def close(self) -> None: ...
    async def notify(self, channel: str, payload: str) -> None: ...
    async def listen(self, channel: str, handler: NotifyHandler) -> None: ...
    def on_listen_restored(self, callback: Callable[[], None]) -> None: ...
    def on_listen_lost(self, callback: Callable[[], None]) -> None: ...
    async def execute_on_listener(self, sql: str, *args: Any) -> None: ...


async def open_database(url: str, *, pool_size: int = 10) -> Database:
    """Open the backend named by the URL scheme: `sqlite:///path` or `postgresql://…`."""
    if url.startswith("sqlite:///"):
        from modelgate.storage.sqlite import SQLiteDatabase

        return await SQLiteDatabase.open(url.removeprefix("sqlite:///") or "modelgate.db")
    if url.startswith(("postgresql://", "postgres://")):
        from modelgate.storage.postgres import PostgresDatabase

        return await PostgresDatabase.open(url, pool_size=pool_size)
    raise StorageError(f"unsupported storage URL scheme: {url.split(':', 1)[0]!r}")
