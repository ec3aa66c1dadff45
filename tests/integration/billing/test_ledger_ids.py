"""Ledger row ids: unique across writers (processes) and in time order (the primary key grows at its end)."""

from __future__ import annotations

from modelgate.domain.ledger import LedgerWriter
from tests.support.ledger_rows import add_row


def _add(writer: LedgerWriter, request_id: str, created_at: float) -> None:
    add_row(writer, "org_ids", request_id, 0, created_at=created_at, key_id="key_ids", row_key="p/m@h")


async def test_ids_are_unique_across_writers_and_follow_the_entries_time(db) -> None:
    first, second = (LedgerWriter(db, interval=60.0, batch_size=1000) for _ in range(2))
    # Two writers (as two gateway processes would) interleaving entries of the same milliseconds.
    for n in range(50):
        _add(first, f"req_a{n}", 1_700_000_000.0 + n * 0.0005)
        _add(second, f"req_b{n}", 1_700_000_000.0 + n * 0.0005)
    later = 1_700_000_100.0
    _add(first, "req_late", later)
    assert await first.flush() == 51 and await second.flush() == 50

    rows = await db.fetch("SELECT id, request_id, created_at FROM usage_ledger ORDER BY id")
    assert len({row["id"] for row in rows}) == 101
    assert all(row["id"].startswith("led_") for row in rows)
    # Ordered by id, the rows are ordered by time (a millisecond's rows may come in any writer order).
    times = [int(row["created_at"] * 1000) for row in rows]
    assert times == sorted(times)
    assert rows[-1]["request_id"] == "req_late"
    # One writer's rows of the same millisecond keep the order they were added in.
    mine = [row["request_id"] for row in rows if row["request_id"].startswith("req_a")]
    assert mine == [f"req_a{n}" for n in range(50)]
