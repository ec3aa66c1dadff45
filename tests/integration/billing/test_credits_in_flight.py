"""Credits while requests are in flight: a CLI top-up reaches running gateways however busy the organization
is, and no gateway forgets another's spend when it takes a credit in (defects: a top-up was lost while any
request was in flight; a rebuild from the database forgot other processes' unwritten spend)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelgate.storage import open_database
from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import GatewayProcess, Tenant, register_tenant

CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
USD = 1_000_000


def _toml(storage_url: str, redis_url: str | None, upstream: FakeUpstream, flush_seconds: float) -> str:
    redis = f'[redis]\nurl = "{redis_url}"\n' if redis_url else ""
    return f"""
[server]
shutdown_grace_seconds = 10.0

[storage]
url = "{storage_url}"

{redis}
[billing]
ledger_flush_interval_seconds = {flush_seconds}

[logging]
level = "warning"

[[providers]]
name = "fake"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[models]]
name = "chat"
kinds = ["chat"]
[[models.rows]]
provider = "fake"
upstream_model = "gpt-4o-mini"
[models.prices]
per_request = 1.0

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture(params=["sqlite", "postgres+redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'credits.db'}", None
    return request.getfixturevalue("pg_server_url"), request.getfixturevalue("redis_url")


def _chat(base_url: str, tenant: Tenant) -> int:
    reply = httpx.post(
        f"{base_url}/v1/chat/completions",
        json=CHAT,
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    )
    return reply.status_code


def _organization(storage_url: str, email: str) -> tuple[str, int]:
    async def read() -> tuple[str, int]:
        db = await open_database(storage_url)
        try:
            row = await db.fetchrow(
                "SELECT o.id, o.balance_micros FROM organizations o JOIN users u ON u.organization_id = o.id"
                " WHERE u.email = $1",
                email,
            )
            return row["id"], int(row["balance_micros"])
        finally:
            await db.close()

    return asyncio.run(read())


def _cli_top_up(config: Path, organization_id: str, usd: str, cwd: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelgate",
            "billing",
            "top-up",
            organization_id,
            usd,
            "--config",
            str(config),
        ],
        cwd=cwd,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_a_cli_top_up_reaches_the_gateway_while_a_request_is_in_flight(
    tmp_path: Path, upstream: FakeUpstream, backend: tuple[str, str | None]
) -> None:
    storage_url, redis_url = backend
    config = tmp_path / "credits.toml"
    config.write_text(_toml(storage_url, redis_url, upstream, flush_seconds=0.2))
    with GatewayProcess(config, cwd=tmp_path) as gateway:
        tenant = register_tenant(gateway.base_url, fund_usd=1.0)
        organization_id, _ = _organization(storage_url, tenant.email)
        upstream.add_fault("/v1/chat/completions", Fault(hold_before_last_chunk="held"))
        with httpx.stream(
            "POST",
            f"{gateway.base_url}/v1/chat/completions",
            json={**CHAT, "stream": True},
            headers={"authorization": f"Bearer {tenant.api_key}"},
            timeout=30,
        ) as held:
            assert held.status_code == 200
            chunks = held.iter_bytes()
            next(chunks)
            assert upstream.wait_held("held", timeout=10)
            assert _chat(gateway.base_url, tenant) == 402  # the one dollar is reserved by the stream

            _cli_top_up(config, organization_id, "5", tmp_path)
            # The CLI tells the gateway through the host channel (and it reads balance events every second).
            deadline = time.monotonic() + 10
            while (status := _chat(gateway.base_url, tenant)) == 402 and time.monotonic() < deadline:
                time.sleep(0.05)  # polling a refused request costs nothing; bounded by the deadline
            # Five more dollars, with the stream's reservation still held: exactly five more requests.
            statuses = [status] + [_chat(gateway.base_url, tenant) for _ in range(5)]
            assert statuses == [200] * 5 + [402], statuses
            upstream.release("held")
            assert b"[DONE]" in b"".join(chunks)
    assert _organization(storage_url, tenant.email)[1] == 0


def test_a_credit_does_not_make_a_gateway_forget_another_gateways_unwritten_spend(
    tmp_path: Path, upstream: FakeUpstream, pg_server_url: str, redis_url: str
) -> None:
    config = tmp_path / "two.toml"
    # The ledger writes nothing while the test runs: every spend below is only in the live counters.
    config.write_text(_toml(pg_server_url, redis_url, upstream, flush_seconds=600))
    first = GatewayProcess(config, cwd=tmp_path).start()
    second = GatewayProcess(config, cwd=tmp_path).start()
    try:
        tenant = register_tenant(first.base_url, fund_usd=20.0)
        organization_id, _ = _organization(pg_server_url, tenant.email)
        assert [_chat(first.base_url, tenant) for _ in range(10)] == [200] * 10
        _cli_top_up(config, organization_id, "1", tmp_path)
        statuses = [_chat(gateway.base_url, tenant) for _ in range(15) for gateway in (second, first)]
        assert statuses.count(200) == 11, statuses  # 20 - 10 spent + 1 credited
    finally:
        for gateway in (first, second):
            gateway.terminate()
        for gateway in (first, second):
            assert gateway.wait(timeout=60) == 0
    assert _organization(pg_server_url, tenant.email)[1] == 0
