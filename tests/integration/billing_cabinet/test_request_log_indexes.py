"""The request log's filters read an index of their own (migrations 0020 and 0025), on both backends: the
plan of each page's query, over a ledger where the filtered value is rare (where a scan of the organization's
rows by time would read them all)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from modelgate.cabinet.request_log_repository import RequestFilter, newest_requests
from modelgate.domain.charges import charge_row
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.usage import Usage
from modelgate.storage import Database
from tests.support.ledger_rows import new_organization


class Planner:
    """Stands for the database in one repository call: answers no rows, keeps the plan of the query sent."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.plan = ""

    async def fetch(self, sql: str, *args: Any) -> list:
        if self.db.dialect == "postgres":
            rows = await self.db.fetch(f"EXPLAIN (COSTS OFF) {sql}", *args)
            self.plan = "\n".join(row["QUERY PLAN"] for row in rows)
        else:
            rows = await self.db.fetch(f"EXPLAIN QUERY PLAN {sql}", *args)
            self.plan = "\n".join(row["detail"] for row in rows)
        return []


@pytest.mark.parametrize(
    ("only", "index"),
    [
        (RequestFilter(outcome="crashed"), "usage_ledger_by_org_outcome_time"),
        (RequestFilter(system_id="sys_quiet"), "usage_ledger_by_org_system_time"),
        (RequestFilter(status=502), "usage_ledger_by_org_status_time"),
        (RequestFilter(key_id="key_quiet"), "usage_ledger_by_org_key_time"),
        (RequestFilter(model="quiet-model"), "usage_ledger_by_org_model_time"),
    ],
)
async def test_a_filtered_page_reads_the_filters_index(db: Database, only: RequestFilter, index: str) -> None:
    org_id = await new_organization(db, "Plans", 0)
    writer = LedgerWriter(db, interval=600.0, batch_size=1000)
    now = time.time()
    for n in range(3000):
        row_id = writer.new_row_id(now - n)
        who = (row_id, org_id, f"key_{n % 8}", f"sys_{n % 3}", "gpt-4o", None, f"req_{n}")
        writer.add_row(charge_row(*who, 200, "completed", Usage(input_tokens=1), 1, now - n, ()), False)
    await writer.flush()
    if db.dialect == "postgres":
        await db.execute("ANALYZE usage_ledger")
    else:
        await db.execute("ANALYZE")

    planner = Planner(db)
    await newest_requests(planner, org_id, 51, None, only)

    assert index in planner.plan, planner.plan
