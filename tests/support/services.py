"""Access to the machine's real PostgreSQL and Redis for tests.

Outside CI a test that needs a service that is down is skipped with the reason; under CI=true it fails.
"""

from __future__ import annotations

import os
import secrets

import asyncpg
import pytest

PG_ADMIN_URL = os.environ.get("MODELGATE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("MODELGATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def service_unavailable(what: str, exc: BaseException) -> None:
    """Skip (locally) or fail (in CI) a test whose service is not reachable."""
    message = f"{what} is not reachable: {exc!r}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: service tests must run)")
    pytest.skip(message)


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


async def create_pg_database() -> str:
    """Create a throwaway database and return its URL."""
    name = f"modelgate_test_{secrets.token_hex(6)}"
    conn = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return _with_database(PG_ADMIN_URL, name)


async def drop_pg_database(url: str) -> None:
    """Drop a database made by create_pg_database, ending leftover connections first."""
    name = url.rpartition("/")[2]
    conn = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
