"""Production mode's services: a throwaway PostgreSQL database and the machine's Redis, as the tests use
them, and the Redis commands the gateway sends (INFO commandstats deltas)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

ADMIN_PG = os.environ.get("MODELGATE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("MODELGATE_BENCH_REDIS", "redis://127.0.0.1:6379/0")


@contextlib.contextmanager
def production_database() -> Iterator[str]:
    """A throwaway PostgreSQL database for one production-mode run, dropped after it."""
    import asyncpg

    name = f"modelgate_bench_{os.getpid()}"

    async def execute(sql: str) -> None:
        conn = await asyncpg.connect(ADMIN_PG, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(execute(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{ADMIN_PG.rpartition('/')[0]}/{name}"
    finally:
        asyncio.run(execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def redis_command_calls() -> dict[str, int]:
    """Calls so far of every command on the Redis server (INFO commandstats), by command name."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def command_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls per command between two `redis_command_calls` snapshots (commands with none left out)."""
    delta = {name: calls - before.get(name, 0) for name, calls in after.items()}
    return {name: calls for name, calls in delta.items() if calls > 0}
