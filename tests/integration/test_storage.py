"""The storage layer behaves the same on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time

import pytest

from modelgate.storage import (
    MIGRATIONS,
    IntegrityViolation,
    Migration,
    MigrationError,
    apply_migrations,
    open_database,
)
from modelgate.storage.migrations import current_version


async def test_migrations_bring_an_empty_database_to_the_latest_version(storage_url: str) -> None:
    db = await open_database(storage_url)
    try:
        applied = await apply_migrations(db)
        assert applied == [m.version for m in MIGRATIONS]
        assert await current_version(db) == MIGRATIONS[-1].version
    finally:
        await db.close()


async def test_migrations_are_idempotent(storage_url: str) -> None:
    db = await open_database(storage_url)
    try:
        await apply_migrations(db)
        assert await apply_migrations(db) == []
        assert await db.fetchval("SELECT COUNT(*) FROM schema_version") == len(MIGRATIONS)
    finally:
        await db.close()


async def test_a_failed_migration_leaves_the_database_unchanged(storage_url: str) -> None:
    db = await open_database(storage_url)
    try:
        await apply_migrations(db)
        before = await current_version(db)
        broken = Migration(
            version=9999,
            name="broken",
            sql={"common": "CREATE TABLE half_done (id TEXT PRIMARY KEY); SELECT * FROM no_such_table"},
        )
        with pytest.raises(MigrationError, match="9999_broken"):
            await apply_migrations(db, (*MIGRATIONS, broken))
        assert await current_version(db) == before
        # The table created by the first statement was rolled back with the failure.
        await db.execute("CREATE TABLE half_done (id TEXT PRIMARY KEY)")
    finally:
        await db.close()


async def test_two_concurrent_migrators_apply_each_step_once(storage_url: str) -> None:
    first, second = await open_database(storage_url), await open_database(storage_url)
    try:
        results = await asyncio.gather(apply_migrations(first), apply_migrations(second))
        assert sorted(results[0] + results[1]) == [m.version for m in MIGRATIONS]
    finally:
        await first.close()
        await second.close()


async def _insert_org(db, org_id: str) -> None:
    await db.execute(
        "INSERT INTO organizations (id, legal_name, plan_code, created_at) VALUES ($1, $2, $3, $4)",
        org_id,
        "Ünïcode GmbH — 株式会社",
        "free",
        time.time(),
    )


async def test_rows_round_trip_as_dicts_with_unicode(db) -> None:
    await _insert_org(db, "org_1")
    row = await db.fetchrow("SELECT id, legal_name, balance_micros FROM organizations WHERE id = $1", "org_1")
    assert row == {"id": "org_1", "legal_name": "Ünïcode GmbH — 株式会社", "balance_micros": 0}


async def test_unique_constraint_raises_integrity_violation(db) -> None:
    await _insert_org(db, "org_1")
    with pytest.raises(IntegrityViolation):
        await _insert_org(db, "org_1")


async def test_transaction_rolls_back_on_error(db) -> None:
    with pytest.raises(RuntimeError):
        async with db.transaction() as tx:
            await _insert_org(tx, "org_rolled_back")
            raise RuntimeError("abort")
    assert await db.fetchval("SELECT COUNT(*) FROM organizations") == 0


async def test_execute_reports_affected_rows(db) -> None:
    await _insert_org(db, "org_1")
    await _insert_org(db, "org_2")
    assert await db.execute("UPDATE organizations SET balance_micros = balance_micros + $1", 5) == 2


async def test_conditional_update_is_atomic_under_concurrency(db) -> None:
    """The primitive behind overspend-free balances: UPDATE … WHERE balance >= cost."""
    await _insert_org(db, "org_1")
    await db.execute("UPDATE organizations SET balance_micros = 10 WHERE id = $1", "org_1")

    async def spend() -> int:
        return await db.execute(
            "UPDATE organizations SET balance_micros = balance_micros - 1"
            " WHERE id = $1 AND balance_micros >= 1",
            "org_1",
        )

    results = await asyncio.gather(*(spend() for _ in range(30)))
    assert sum(results) == 10
    assert await db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", "org_1") == 0


async def test_notify_reaches_a_listener(db) -> None:
    received: asyncio.Queue[str] = asyncio.Queue()
    await db.listen("modelgate_test", received.put_nowait)
    await db.notify("modelgate_test", "hello")
    assert await asyncio.wait_for(received.get(), timeout=5) == "hello"


_INSERT_ORG = "INSERT INTO organizations (id, legal_name, plan_code, created_at) VALUES ($1, $2, $3, $4)"


async def test_executemany_writes_every_row_in_one_transaction(db) -> None:
    rows = [(f"org_{i}", "Org", "free", time.time()) for i in range(50)]
    async with db.transaction() as tx:
        await tx.executemany(_INSERT_ORG, rows)
    assert await db.fetchval("SELECT COUNT(*) FROM organizations") == 50


async def test_executemany_with_a_duplicate_rolls_back_the_whole_batch(db) -> None:
    rows = [("org_same", "Org", "free", time.time())] * 2
    with pytest.raises(IntegrityViolation):
        async with db.transaction() as tx:
            await tx.executemany(_INSERT_ORG, rows)
    assert await db.fetchval("SELECT COUNT(*) FROM organizations") == 0


_INSERT_LEDGER = (
    "INSERT INTO usage_ledger (id, organization_id, key_id, system_id, model, request_id, status, units,"
    " cost_micros, created_at, usage_estimated) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
)


async def test_executemany_stores_each_value_as_one_insert_does(db) -> None:
    # PostgreSQL takes a plain INSERT's rows as COPY: NULLs, floats, integers and booleans arrive the same.
    one = ("row_one", "org_1", None, "sys_1", "m", "req_1", 200, 1.5, 2**40, 1700000000.25, True)
    many = [("row_many", *one[1:]), ("row_zero", "org_1", "key_1", None, "m", "req_2", 0, 0.0, 0, 0.0, False)]
    await db.execute(_INSERT_LEDGER, *one)
    async with db.transaction() as tx:
        await tx.executemany(_INSERT_LEDGER, many)
        await tx.executemany(_INSERT_LEDGER, [])
    rows = await db.fetch(
        "SELECT id, organization_id, key_id, system_id, model, request_id, status, units, cost_micros,"
        " created_at, usage_estimated, input_tokens, outcome FROM usage_ledger ORDER BY id"
    )
    by_id = {row["id"]: row for row in rows}
    assert {**by_id["row_many"], "id": "row_one"} == by_id["row_one"]
    assert by_id["row_zero"]["key_id"] == "key_1" and by_id["row_zero"]["system_id"] is None
    assert by_id["row_zero"]["usage_estimated"] in (False, 0) and by_id["row_zero"]["input_tokens"] == 0
    assert by_id["row_zero"]["outcome"] == "completed"  # columns left out take their defaults
