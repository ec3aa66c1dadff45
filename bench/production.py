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


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    return inodes


def _local_ports(pids: list[int]) -> set[int]:
    """Local TCP ports of the sockets these processes hold (from /proc/net/tcp, matched by inode)."""
    inodes = _socket_inodes(pids)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def foreign_redis_clients(gateway_pids: list[int]) -> int:
    """Redis clients connected now that are neither the gateway's nor this query's: while there are any,
    the server-wide command counts include their commands too."""
    import redis

    ours = _local_ports(gateway_pids)
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        clients = client.client_list()
    finally:
        client.close()
    return sum(
        1
        for entry in clients
        if entry.get("cmd") != "client|list" and int(entry["addr"].rsplit(":", 1)[1]) not in ours
    )
