"""The ledger's daily sums (`usage_days`, migration 0024), which the cabinet's usage reports read: kept by the
ledger's flush in the rows' own transaction, equal to the sums of `usage_ledger` whatever the writes, on each
storage backend."""

from __future__ import annotations

import os
import shutil
from datetime import date
from pathlib import Path
from typing import cast

from modelgate.cabinet.usage_repository import usage_breakdown
from modelgate.domain.charges import charge_row
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.usage import Usage
from modelgate.infra.spool import Spool, database_identity
from modelgate.storage import Database, open_database
from modelgate.storage.migrations import MIGRATIONS, apply_migrations
from tests.support.ledger_rows import new_organization

DAY = 86400
MIDNIGHT = 20_000 * DAY  # 2024-10-04T00:00:00Z
_FROM_DAYS = (
    "SELECT day, model, key_id, system_id, requests, refused, errors, input_tokens, cached_input_tokens,"
    " output_tokens, cost_micros FROM usage_days WHERE organization_id = $1"
)


async def _organization(db: Database) -> str:
    return await new_organization(db, "Daily Sums", 1_000_000)


def _add(
    writer: LedgerWriter,
    org_id: str,
    at: float,
    *,
    model: str = "gpt-4o",
    key_id: str | None = "key_a",
    system_id: str | None = None,
    status: int = 200,
    cost: int = 100,
) -> None:
    usage = Usage(input_tokens=10, cached_input_tokens=4, output_tokens=7) if status == 200 else None
    outcome = "completed" if status == 200 else "refused"
    row_id = writer.new_row_id(at)
    who = (row_id, org_id, key_id, system_id, model, None, f"req_{os.urandom(6).hex()}")
    writer.add_row(charge_row(*who, status, outcome, usage, cost, at, ()), False)


def _spool(directory: Path, storage_url: str) -> Spool:
    return Spool(directory, database_identity(storage_url), fsync="never", fsync_interval=1.0)


def _as_set(rows: list[dict]) -> set[tuple]:
    return {tuple(int(v) if not isinstance(v, str) else v for v in row.values()) for row in rows}


async def _from_ledger(db: Database, org_id: str) -> set[tuple]:
    """The ledger's own sums per (day, model, key, system), summed here, as usage_days should hold them."""
    sums: dict[tuple, list[int]] = {}
    for row in await db.fetch("SELECT * FROM usage_ledger WHERE organization_id = $1", org_id):
        group = (int(row["created_at"] // DAY), row["model"], row["key_id"] or "", row["system_id"] or "")
        status = row["status"]
        refused = status in (402, 403, 429)
        counts = (1, refused, (status >= 400 or status == 0) and not refused)
        tokens = (row["input_tokens"], row["cached_input_tokens"], row["output_tokens"], row["cost_micros"])
        total = sums.setdefault(group, [0] * 7)
        for n, value in enumerate((*counts, *tokens)):
            total[n] += int(value)
    return {(*group, *total) for group, total in sums.items()}


async def test_each_flush_adds_its_rows_to_their_day_model_key_and_system(db: Database) -> None:
    org_id = await _organization(db)
    writer = LedgerWriter(db, interval=600.0, batch_size=3)
    _add(writer, org_id, MIDNIGHT - 0.5)  # the day before
    _add(writer, org_id, MIDNIGHT)
    _add(writer, org_id, MIDNIGHT + 10, key_id=None, system_id="sys_a", cost=5)
    _add(writer, org_id, MIDNIGHT + 20, status=429, cost=0)
    _add(writer, org_id, MIDNIGHT + 30, status=502, cost=0)
    _add(writer, org_id, MIDNIGHT + 40, model="claude")
    assert await writer.flush() == 6  # in batches of 3: groups met in two transactions are added up
    _add(writer, org_id, MIDNIGHT + 50)
    assert await writer.flush() == 1

    stored = _as_set(await db.fetch(_FROM_DAYS, org_id))
    assert stored == {
        (19_999, "gpt-4o", "key_a", "", 1, 0, 0, 10, 4, 7, 100),
        (20_000, "gpt-4o", "key_a", "", 4, 1, 1, 20, 8, 14, 200),
        (20_000, "gpt-4o", "", "sys_a", 1, 0, 0, 10, 4, 7, 5),
        (20_000, "claude", "key_a", "", 1, 0, 0, 10, 4, 7, 100),
    }
    assert stored == await _from_ledger(db, org_id)


async def test_a_replayed_spool_whose_rows_were_committed_adds_nothing_twice(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    org_id = await _organization(db)
    directory = tmp_path / "spool"
    first = LedgerWriter(db, interval=600.0, batch_size=4, spool=_spool(directory, storage_url))
    await first.open()
    for n in range(5):
        _add(first, org_id, MIDNIGHT + n, cost=100 + n)
    # The process dies between the commit and the deletion of the segment: the file outlives its rows.
    (segment,) = directory.glob("*.spool")
    shutil.copy(segment, directory / "ledger-dead-000001.spool")
    assert await first.flush() == 5
    await first.stop(5.0)

    second = LedgerWriter(db, interval=600.0, batch_size=4, spool=_spool(directory, storage_url))
    assert await second.open() == 5
    assert await second.flush() == 0  # every row is in the database already
    await second.stop(5.0)
    stored = _as_set(await db.fetch(_FROM_DAYS, org_id))
    assert stored == {(20_000, "gpt-4o", "key_a", "", 5, 0, 0, 50, 20, 35, 510)}
    assert stored == await _from_ledger(db, org_id)


async def test_the_migration_sums_the_rows_written_before_it(storage_url: str) -> None:
    db = await open_database(storage_url)
    try:
        await apply_migrations(db, tuple(m for m in MIGRATIONS if m.version < 24))
        org_id = await _organization(db)
        for n, (at, status, key) in enumerate(
            [
                (MIDNIGHT - 1, 200, "key_a"),
                (MIDNIGHT, 200, None),
                (MIDNIGHT + 1, 402, None),
                (MIDNIGHT + 2, 0, "key_a"),
            ]
        ):
            await db.execute(
                "INSERT INTO usage_ledger (id, organization_id, key_id, model, request_id, status,"
                " input_tokens, cost_micros, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                f"led_{n}",
                org_id,
                key,
                "gpt-4o",
                f"req_{n}",
                status,
                3,
                50,
                at,
            )
        assert 24 in await apply_migrations(db)
        stored = _as_set(await db.fetch(_FROM_DAYS, org_id))
        assert stored == {
            (19_999, "gpt-4o", "key_a", "", 1, 0, 0, 3, 0, 0, 50),
            (20_000, "gpt-4o", "", "", 2, 1, 0, 6, 0, 0, 100),
            (20_000, "gpt-4o", "key_a", "", 1, 0, 1, 3, 0, 0, 50),
        }
    finally:
        await db.close()


class _Planner:
    """Stands for the database in one report call: answers no rows, keeps the plan of the query sent."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.dialect = db.dialect
        self.plan = ""

    async def fetch(self, sql: str, *args: object) -> list:
        explain = "EXPLAIN (COSTS OFF)" if self.dialect == "postgres" else "EXPLAIN QUERY PLAN"
        rows = await self.db.fetch(f"{explain} {sql}", *args)
        self.plan = "\n".join(str(row.get("QUERY PLAN", row.get("detail"))) for row in rows)
        return []


async def test_a_months_report_reads_its_organizations_days_by_the_primary_key(db: Database) -> None:
    sums = [
        (f"org_{n:03}", 20_000 + day, f"model-{m}", "key_a", "", 1, 0, 0, 1, 0, 1, 1)
        for n in range(50)
        for day in range(30)
        for m in range(10)
    ]
    async with db.transaction() as tx:
        await tx.executemany(
            "INSERT INTO usage_days (organization_id, day, model, key_id, system_id, requests, refused,"
            " errors, input_tokens, cached_input_tokens, output_tokens, cost_micros)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            sums,
        )
    await db.execute("ANALYZE usage_days" if db.dialect == "postgres" else "ANALYZE")
    planner = _Planner(db)

    await usage_breakdown(
        cast(Database, planner), "org_007", date(2024, 10, 4), date(2024, 11, 2), "day", "model"
    )

    assert (
        "usage_days_pkey" if db.dialect == "postgres" else "sqlite_autoindex_usage_days_1"
    ) in planner.plan
    assert "Seq Scan" not in planner.plan, planner.plan
