"""What exact revocation on PostgreSQL alone costs (modelgate/storage/presence.py): the revoke waits until
every live gateway process acted on it; a model API request costs nothing more (the cache hit path has no
check of its own: a lapsed lease empties the cache and a flag stops refilling it).

Starts two `modelgate serve` processes on a fresh PostgreSQL database (no Redis), then `--revokes` times:
creates a key, uses it once through the second process (so it is cached there), revokes it through the
first and times the revoke; also times 500 chat requests with a cached key on the second. Prints p50 and
p99 of both, and the lease renewals the processes wrote meanwhile (their fixed cost). Wall-clock figures:
meaningful on a quiet machine only.

    PYTHONPATH=. python bench/revocation_ack.py [--pg postgresql://postgres@127.0.0.1:5432/postgres]

(it starts the gateways with the test suite's GatewayProcess, hence the PYTHONPATH).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

from tests.support.gateway import GatewayProcess, register_tenant

CONFIG = """
[storage]
url = "{url}"

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "mock-chat"
kinds = ["chat"]
[[models.rows]]
provider = "mock"

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


def _percentiles(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p50, p99 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms (n={len(ordered)})"


async def _fresh_database(server: str) -> str:
    name = f"bench_revocation_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return server.rsplit("/", 1)[0] + "/" + name


async def _drop_database(server: str, url: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}"')
    finally:
        await conn.close()


async def _renewal_count(url: str) -> int:
    """Row updates of gateway_processes so far (each renewal is one)."""
    conn = await asyncpg.connect(url)
    try:
        value = await conn.fetchval(
            "SELECT n_tup_upd + n_tup_ins FROM pg_stat_user_tables WHERE relname = 'gateway_processes'"
        )
    finally:
        await conn.close()
    return int(value or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--revokes", type=int, default=100)
    args = parser.parse_args()
    url = asyncio.run(_fresh_database(args.pg))
    try:
        _measure(url, args.revokes)
    finally:
        asyncio.run(_drop_database(args.pg, url))


def _measure(url: str, count: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "modelgate.toml"
        config.write_text(CONFIG.format(url=url))
        with (
            GatewayProcess(config, cwd=Path(folder)) as first,
            GatewayProcess(config, cwd=Path(folder)) as second,
        ):
            tenant = register_tenant(first.base_url)
            owner = {"authorization": f"Bearer {tenant.session_token}"}
            revokes: list[float] = []
            body = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
            with httpx.Client(timeout=30) as client:
                for index in range(count):
                    key = client.post(
                        f"{first.base_url}/api/organization/api-keys",
                        json={"alias": f"k{index}"},
                        headers=owner,
                    )
                    secret = key.json()["secret"]
                    used = client.post(
                        f"{second.base_url}/v1/chat/completions",
                        json=body,
                        headers={"authorization": f"Bearer {secret}"},
                    )
                    assert used.status_code == 200, used.text
                    started = time.perf_counter()
                    revoked = client.post(
                        f"{first.base_url}/api/organization/api-keys/{key.json()['id']}/revoke", headers=owner
                    )
                    revokes.append(time.perf_counter() - started)
                    assert revoked.status_code == 200, revoked.text
                chats: list[float] = []
                renewals_before = asyncio.run(_renewal_count(url))
                for _ in range(500):
                    started = time.perf_counter()
                    client.post(
                        f"{second.base_url}/v1/chat/completions",
                        json=body,
                        headers={"authorization": f"Bearer {tenant.api_key}"},
                    )
                    chats.append(time.perf_counter() - started)
                renewals = asyncio.run(_renewal_count(url)) - renewals_before
                chat_seconds = sum(chats)
    print(f"revoke, answered after both processes acted on it: {_percentiles(revokes)}")
    print(f"chat with a cached key (no per-request check):     {_percentiles(chats)}")
    print(f"lease renewals during the chats: {renewals} in {chat_seconds:.1f} s (two processes)")


if __name__ == "__main__":
    main()
