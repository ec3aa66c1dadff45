"""The usage ledger: every request served is written, also when the gateway stops under load."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx

from modelgate.storage import open_database
from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import GatewayProcess, register_tenant


def _config(tmp_path: Path, storage_url: str, upstream: FakeUpstream) -> Path:
    path = tmp_path / "ledger.toml"
    # A long flush interval: rows reach the database only through the shutdown flush.
    path.write_text(f"""
[server]
shutdown_grace_seconds = 30.0

[storage]
url = "{storage_url}"

[billing]
ledger_flush_interval_seconds = 600.0

[[providers]]
name = "slow"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[models]]
name = "slow-chat"
kinds = ["chat"]
[[models.rows]]
provider = "slow"
[models.prices]
input_per_mtok = 1.0
output_per_mtok = 2.0

[[plans]]
code = "free"
rpm = 0
tpm = 0
""")
    return path


async def _ledger(storage_url: str, email: str) -> tuple[int, int, int]:
    db = await open_database(storage_url)
    try:
        row = await db.fetchrow(
            "SELECT COUNT(*) AS rows, COALESCE(SUM(l.output_tokens), 0) AS output_tokens,"
            " COALESCE(SUM(l.cost_micros), 0) AS cost FROM usage_ledger l"
            " JOIN users u ON u.organization_id = l.organization_id WHERE u.email = $1 AND l.status = 200",
            email,
        )
        return int(row["rows"]), int(row["output_tokens"]), int(row["cost"])
    finally:
        await db.close()


def test_no_ledger_row_is_lost_when_the_gateway_stops_gracefully_under_load(
    tmp_path: Path, storage_url: str
) -> None:
    with FakeUpstream("slow") as upstream:
        upstream.add_fault("/v1/chat/completions", Fault(delay_before_headers=0.3), times=-1)
        gateway = GatewayProcess(_config(tmp_path, storage_url, upstream), cwd=tmp_path).start()
        try:
            tenant = register_tenant(gateway.base_url)
            results: list[int] = []
            started = threading.Event()

            async def load() -> None:
                async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:

                    async def one(i: int) -> None:
                        try:
                            reply = await client.post(
                                "/v1/chat/completions",
                                headers={"authorization": f"Bearer {tenant.api_key}"},
                                json={
                                    "model": "slow-chat",
                                    "messages": [{"role": "user", "content": f"n {i}"}],
                                },
                            )
                            results.append(reply.status_code)
                        except httpx.TransportError:
                            results.append(0)  # refused after the listener closed: not served

                    tasks = [asyncio.create_task(one(i)) for i in range(40)]
                    started.set()
                    await asyncio.gather(*tasks)

            runner = threading.Thread(target=asyncio.run, args=(load(),))
            runner.start()
            assert started.wait(timeout=10)
            # Stop while requests are in flight at the slow upstream.
            reached = _wait_for_requests(upstream, 10)
            gateway.terminate()
            runner.join(timeout=60)
            assert reached, "the load never reached the upstream"
            assert gateway.wait(timeout=60) == 0
        finally:
            gateway.kill()
    served = results.count(200)
    assert served >= 10
    rows, output_tokens, cost = asyncio.run(_ledger(storage_url, tenant.email))
    assert rows == served
    assert output_tokens > 0 and cost > 0


def _wait_for_requests(upstream: FakeUpstream, count: int, timeout: float = 10.0) -> bool:
    """True once the upstream has received `count` requests (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(upstream.requests_to("/v1/chat/completions")) >= count:
            return True
        time.sleep(0.01)
    return False
