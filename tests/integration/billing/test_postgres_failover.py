"""A PostgreSQL primary that disappears and a replica promoted in its place (issue #37): the gateway, given
both hosts in one URL with `target_session_attrs=read-write`, serves through the failover and loses no
ledger row, charges none twice, and works against the promoted replica afterwards (new keys, revocations);
an operator's balance change while no primary exists is refused with 503 (never a 500) and made once after
the promotion; a stored response's binding made meanwhile reaches the promoted replica.

Real servers: a primary and its streaming replica started by the test (tests/support/pg_pair.py), the gateway
as a `modelgate serve` process under load from a client thread.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from modelgate.proxy.state.objects import ObjectBinding, ObjectStore
from modelgate.storage import open_database
from modelgate.storage.database import StorageUnavailable
from modelgate.storage.migrations import apply_migrations
from tests.integration.billing.test_ledger_spool import (
    _assert_charged_once,
    _config,
    _rows_of,
    _wait_until,
)
from tests.support.chat_load import ChatLoad
from tests.support.gateway import GatewayProcess, register_tenant, revoke_key
from tests.support.pg_pair import PostgresPair, postgres_binaries
from tests.support.services import service_unavailable


@pytest.fixture
def pair():
    if postgres_binaries() is None:
        binaries = "PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup)"
        service_unavailable(binaries, FileNotFoundError())
    try:
        started = PostgresPair().__enter__()
    except (OSError, subprocess.CalledProcessError) as exc:
        service_unavailable("a PostgreSQL primary and replica of the test's own", exc)
        raise
    yield started
    started.close()


def _chat(base_url: str, api_key: str) -> int:
    reply = httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {api_key}"},
        json={"model": "metered", "messages": [{"role": "user", "content": "after"}]},
        timeout=30,
    )
    return reply.status_code


def test_a_promoted_replica_takes_over_and_no_row_is_lost_or_charged_twice(
    tmp_path: Path, pair: PostgresPair
) -> None:
    promoted = pair.url_of(pair.replica_port)
    config = _config(tmp_path, pair.url, flush_interval=0.2)
    with GatewayProcess(config, cwd=tmp_path) as gateway:
        tenant = register_tenant(gateway.base_url)
        with ChatLoad(gateway.base_url, tenant.api_key) as load:
            assert _wait_until(lambda: len(load.served) >= 20), "no load before the failover"
            pair.stop_primary()
            at_stop = len(load.served)
            # Requests go on while no primary exists (the key is known; rows wait in the spool).
            assert _wait_until(lambda: len(load.served) >= at_stop + 20), "nothing served without a primary"
            pair.promote()
            at_promotion = len(load.served)
            assert _wait_until(lambda: len(load.served) >= at_promotion + 20), "nothing served after it"
        assert load.refused == [], f"requests refused during the failover: {load.refused[:5]}"
        # Every served request reaches the promoted replica: the spool's rows replayed, none twice.
        assert _wait_until(lambda: _rows_of(promoted, tenant.email) == len(load.served), timeout=60)

        # The gateway works against the new primary: a new tenant, its key, and that key's revocation.
        newcomer = register_tenant(gateway.base_url)
        assert _chat(gateway.base_url, newcomer.api_key) == 200
        assert revoke_key(gateway.base_url, newcomer).status_code in (200, 204)
        deadline = time.monotonic() + 10
        while _chat(gateway.base_url, newcomer.api_key) != 401:
            assert time.monotonic() < deadline, "a key revoked on the promoted replica still serves"
            time.sleep(0.05)  # polling the revocation's arrival, bounded by the deadline
        log = gateway.output()
    _assert_charged_once(promoted, tenant.email, load.served)
    assert "Traceback" not in log


OPERATOR_TOKEN = "operator-failover-token-0123456789"


def _top_up(base_url: str, organization_id: str, micros: int) -> httpx.Response:
    return httpx.post(
        f"{base_url}/api/operator/organizations/{organization_id}/top-up",
        json={"amountMicros": micros},
        headers={"authorization": f"Bearer {OPERATOR_TOKEN}"},
        timeout=30,
    )


async def _organization_of(url: str, email: str) -> str:
    db = await open_database(url, pool_size=1)
    try:
        return await db.fetchval("SELECT organization_id FROM users WHERE email = $1", email)
    finally:
        await db.close()


async def _top_ups_of(url: str, email: str) -> list[int]:
    db = await open_database(url, pool_size=1)
    try:
        rows = await db.fetch(
            "SELECT e.amount_micros FROM balance_events e"
            " JOIN users u ON u.organization_id = e.organization_id"
            " WHERE u.email = $1 AND e.kind = 'top_up' ORDER BY e.seq",
            email,
        )
    finally:
        await db.close()
    return [int(row["amount_micros"]) for row in rows]


def test_an_operator_top_up_without_a_primary_is_refused_503_and_made_once_after_promotion(
    tmp_path: Path, pair: PostgresPair
) -> None:
    config = _config(tmp_path, pair.url, flush_interval=0.2)
    config.write_text(
        config.read_text().replace("[server]\n", f'[server]\noperator_token = "{OPERATOR_TOKEN}"\n', 1)
    )
    with GatewayProcess(config, cwd=tmp_path) as gateway:
        tenant = register_tenant(gateway.base_url, fund_usd=None)
        organization_id = asyncio.run(_organization_of(pair.url, tenant.email))
        pair.stop_primary()
        refused = _top_up(gateway.base_url, organization_id, 7_000)
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        pair.promote()
        assert _wait_until(lambda: _top_up(gateway.base_url, organization_id, 7_000).status_code == 201)
        log = gateway.output()
    assert asyncio.run(_top_ups_of(pair.url_of(pair.replica_port), tenant.email)) == [7_000]
    assert "Traceback" not in log


async def test_an_object_bound_without_a_primary_reaches_the_promoted_replica(pair: PostgresPair) -> None:
    db = await open_database(pair.url, pool_size=2)
    try:
        await apply_migrations(db)
        store = ObjectStore(db)
        await asyncio.to_thread(pair.stop_primary)
        store.remember(ObjectBinding("resp_failover", "org_a", "response", "m", "row"))
        await asyncio.to_thread(pair.promote)
        await store.drain()
        # Another process, from the promoted replica: the binding was written there once it answered.
        binding = await ObjectStore(db).find("resp_failover", "org_a", "response")
    finally:
        await db.close()
    assert binding is not None and binding.row_key == "row"


async def test_a_transaction_cut_by_the_primarys_crash_raises_storage_unavailable(pair: PostgresPair) -> None:
    """Not the rollback's complaint about a closed connection (asyncpg's InterfaceError), which the cabinet
    answered 500 with a traceback: the statement's own failure, as every caller handles a failover."""
    db = await open_database(pair.url, pool_size=1)
    try:
        with pytest.raises(StorageUnavailable):
            async with db.transaction() as tx:
                await tx.execute("CREATE TABLE cut (n int)")
                await asyncio.to_thread(pair.stop_primary)
                await tx.execute("INSERT INTO cut VALUES (1)")
        with pytest.raises(StorageUnavailable):  # no primary: a standby refuses to be one
            await db.fetchval("SELECT 1")
    finally:
        await db.close()
