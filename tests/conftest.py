"""Shared fixtures: real storage backends (SQLite file, throwaway PostgreSQL database) and Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from modelgate.storage import Database, apply_migrations, open_database
from tests.support.services import (
    REDIS_URL,
    create_pg_database,
    drop_pg_database,
    service_unavailable,
)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A database on the machine's PostgreSQL, created for this test session and dropped after it."""
    try:
        url = asyncio.run(create_pg_database())
    except (OSError, Exception) as exc:
        service_unavailable("PostgreSQL at 127.0.0.1:5432", exc)
        raise
    yield url
    asyncio.run(drop_pg_database(url))


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """A brand-new empty PostgreSQL database for one test (migration tests need an empty schema)."""
    try:
        url = asyncio.run(create_pg_database())
    except (OSError, Exception) as exc:
        service_unavailable("PostgreSQL at 127.0.0.1:5432", exc)
        raise
    yield url
    asyncio.run(drop_pg_database(url))


@pytest.fixture
def redis_url() -> str:
    """The machine's Redis, flushed of this suite's keys is the caller's job (keys are namespaced)."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except Exception as exc:
        service_unavailable("Redis at 127.0.0.1:6379", exc)
    return REDIS_URL


@pytest.fixture(params=["sqlite", "postgres"])
def storage_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """The same test on both storage backends: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'modelgate.db'}"
    else:
        yield request.getfixturevalue("fresh_pg_url")


@pytest.fixture
async def db(storage_url: str) -> AsyncIterator[Database]:
    """An open, migrated database on each backend."""
    database = await open_database(storage_url)
    await apply_migrations(database)
    try:
        yield database
    finally:
        await database.close()
