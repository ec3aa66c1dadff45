"""Two gateway instances on one PostgreSQL and one Redis behave as one gateway: revocations, balances and
the ledger are shared exactly."""

from __future__ import annotations

import asyncio
from pathlib import Path

from modelgate.storage import open_database
from tests.integration.ops.conftest import chat, ops_toml, stop_and_collect
from tests.support.gateway import GatewayProcess, register_tenant, revoke_key


def _config(tmp_path: Path, pg_server_url: str, redis_url: str) -> Path:
    path = tmp_path / "shared.toml"
    path.write_text(ops_toml(pg_server_url, redis_url=redis_url, per_request_usd=1.0))
    return path


def _served_in_ledger(storage_url: str, owner_email: str) -> int:
    async def count() -> int:
        db = await open_database(storage_url)
        try:
            return await db.fetchval(
                "SELECT COUNT(*) FROM usage_ledger l JOIN users u ON u.organization_id = l.organization_id"
                " WHERE u.email = $1 AND l.status = 200",
                owner_email,
            )
        finally:
            await db.close()

    return asyncio.run(count())


def test_a_key_revoked_through_one_instance_is_refused_by_the_other_on_the_next_request(
    tmp_path: Path, pg_server_url: str, redis_url: str
) -> None:
    config = _config(tmp_path, pg_server_url, redis_url)
    with GatewayProcess(config, cwd=tmp_path) as first, GatewayProcess(config, cwd=tmp_path) as second:
        tenant = register_tenant(first.base_url)
        # Both instances have used (and may cache) the key before it is revoked.
        assert chat(first.base_url, tenant).status_code == 200
        assert chat(second.base_url, tenant).status_code == 200

        assert revoke_key(first.base_url, tenant).status_code == 200
        refused = chat(second.base_url, tenant)

        assert refused.status_code == 401
        assert chat(first.base_url, tenant).status_code == 401


def test_two_instances_share_one_balance_exactly_and_write_one_ledger(
    tmp_path: Path, pg_server_url: str, redis_url: str
) -> None:
    config = _config(tmp_path, pg_server_url, redis_url)
    first = GatewayProcess(config, cwd=tmp_path).start()
    second = GatewayProcess(config, cwd=tmp_path).start()
    try:
        # Enough for exactly five requests at 1 USD each.
        tenant = register_tenant(first.base_url, fund_usd=5.0)
        statuses = [chat((first, second)[i % 2].base_url, tenant).status_code for i in range(10)]
        stop_and_collect(first)
        stop_and_collect(second)
    finally:
        first.kill()
        second.kill()

    assert statuses == [200] * 5 + [402] * 5  # sequential, so the shared balance runs out at the sixth
    assert _served_in_ledger(pg_server_url, tenant.email) == 5
