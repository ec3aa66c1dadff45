"""The ledger's admission journal: a request admitted and never completed (its process died) gets exactly one
"crashed" row at the next start; a completed one only its own row. On a real spool directory and database.

A process "dies" here by releasing its spool files without stopping its writer (what the death of a process
does to its locks); tests/integration/billing/test_admission_journal.py kills a real gateway.
"""

from __future__ import annotations

import fcntl
import os
import time
import tracemalloc
from pathlib import Path

import orjson

from modelgate.domain.ledger import LedgerWriter
from modelgate.infra.spool import Spool, database_identity
from modelgate.storage import Database
from tests.support.ledger_rows import add_row, admit_row

CRASH_COST = 40
COST = 100


async def _organization(db: Database, balance: int) -> str:
    org_id = f"org_journal_{os.urandom(4).hex()}"
    await db.execute(
        "INSERT INTO organizations (id, legal_name, plan_code, balance_micros, created_at)"
        " VALUES ($1, $2, $3, $4, $5)",
        org_id,
        "Journal Test",
        "free",
        balance,
        time.time(),
    )
    return org_id


def _crash(writer: LedgerWriter, org_id: str, n: int, budgets: tuple[tuple[str, float], ...] = ()) -> str:
    return admit_row(
        writer, org_id, f"req_journal_{n}", CRASH_COST, key_id="key_journal", input_tokens=10, budgets=budgets
    )


def _completed(writer: LedgerWriter, org_id: str, n: int, row_id: str | None = None) -> str:
    return add_row(
        writer,
        org_id,
        f"req_journal_{n}",
        COST,
        row_id=row_id,
        key_id="key_journal",
        input_tokens=10,
        output_tokens=5,
    )


def _writer(db: Database, directory: Path, storage_url: str) -> tuple[LedgerWriter, Spool]:
    spool = Spool(directory, database_identity(storage_url), fsync="never", fsync_interval=1.0)
    return LedgerWriter(db, interval=600.0, batch_size=4, spool=spool), spool


async def _rows(db: Database, org_id: str) -> list[tuple[str, str, int, int]]:
    """(request id, outcome, status, cost) of the organization's ledger rows, by request id."""
    rows = await db.fetch(
        "SELECT request_id, outcome, status, cost_micros FROM usage_ledger WHERE organization_id = $1"
        " ORDER BY request_id",
        org_id,
    )
    return [(r["request_id"], r["outcome"], int(r["status"]), int(r["cost_micros"])) for r in rows]


async def _balance(db: Database, org_id: str) -> int:
    return int(await db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", org_id))


def _admissions_on_disk(directory: Path) -> list[str]:
    """Request ids of the admission records in every spool file of the directory."""
    found = []
    for path in directory.glob("*.spool"):
        for line in path.read_bytes().splitlines()[1:]:
            record = orjson.loads(line)
            if record[0] == "admitted":
                found.append(record[7])
    return sorted(found)


def _spool_names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.spool"))


async def _restart(db: Database, directory: Path, storage_url: str) -> int:
    """A new process: adopt what the dead one left, write it, stop; returns the rows it adopted."""
    writer, _ = _writer(db, directory, storage_url)
    adopted = await writer.open()
    await writer.flush()
    await writer.stop(5.0)
    return adopted


async def test_an_open_admission_survives_a_seal_and_a_flush(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    directory = tmp_path / "spool"
    org_id = await _organization(db, 10_000)
    writer, spool = _writer(db, directory, storage_url)
    await writer.open()
    _crash(writer, org_id, 1)
    _completed(writer, org_id, 2)
    assert await writer.flush() == 1  # seals the segment holding the admission, and deletes it
    _completed(writer, org_id, 3)
    assert await writer.flush() == 1  # and once more: the copy carried over must be carried again
    assert _admissions_on_disk(directory) == ["req_journal_1"]
    assert writer.admitted == 1
    await spool.close()  # dies with request 1 in flight

    assert await _restart(db, directory, storage_url) == 1
    assert await _rows(db, org_id) == [
        ("req_journal_1", "crashed", 0, CRASH_COST),
        ("req_journal_2", "completed", 200, COST),
        ("req_journal_3", "completed", 200, COST),
    ]
    assert await _balance(db, org_id) == 10_000 - CRASH_COST - 2 * COST
    assert list(directory.glob("*.spool")) == []


async def test_a_replayed_admission_becomes_one_crashed_row_however_often_it_is_replayed(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    directory = tmp_path / "spool"
    org_id = await _organization(db, 10_000)
    writer, spool = _writer(db, directory, storage_url)
    await writer.open()
    _crash(writer, org_id, 1, budgets=(("rule_journal", 1000.0),))
    # Copies of the dead process's file: a second replay of it, after the first wrote its crashed row.
    (segment,) = directory.glob("*.spool")
    await spool.close()
    copy = segment.read_bytes()

    assert await _restart(db, directory, storage_url) == 1
    (directory / segment.name).write_bytes(copy)
    assert await _restart(db, directory, storage_url) == 1  # adopted again, and skipped when written

    assert await _rows(db, org_id) == [("req_journal_1", "crashed", 0, CRASH_COST)]
    assert await _balance(db, org_id) == 10_000 - CRASH_COST
    spent = await db.fetchval("SELECT spent_micros FROM policy_budget_spend WHERE rule_id = 'rule_journal'")
    assert spent == CRASH_COST


async def test_a_completed_admission_is_never_a_crashed_row(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    directory = tmp_path / "spool"
    org_id = await _organization(db, 10_000)
    writer, spool = _writer(db, directory, storage_url)
    await writer.open()
    in_same_segment = _crash(writer, org_id, 1)
    sealed_before_completion = _crash(writer, org_id, 2)
    _completed(writer, org_id, 1, in_same_segment)
    assert await writer.flush() == 1  # request 2 is still open: its admission is carried over
    _completed(writer, org_id, 2, sealed_before_completion)
    assert writer.admitted == 0
    await spool.close()  # dies before request 2's row reached the database

    assert await _restart(db, directory, storage_url) == 1
    assert await _rows(db, org_id) == [
        ("req_journal_1", "completed", 200, COST),
        ("req_journal_2", "completed", 200, COST),
    ]
    assert await _balance(db, org_id) == 10_000 - 2 * COST


async def test_a_graceful_stop_with_every_request_completed_leaves_no_spool_file(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    directory = tmp_path / "spool"
    org_id = await _organization(db, 10_000)
    writer, _ = _writer(db, directory, storage_url)
    await writer.open()
    row_id = _crash(writer, org_id, 1)
    await writer.flush()
    _completed(writer, org_id, 1, row_id)
    await writer.stop(5.0)

    assert list(directory.glob("*.spool")) == []
    assert await _rows(db, org_id) == [("req_journal_1", "completed", 200, COST)]


async def test_a_dead_process_files_are_adopted_all_together_or_not_at_all(tmp_path: Path) -> None:
    dead = Spool(tmp_path, "sqlite:/srv/gw.db", fsync="never", fsync_interval=1.0)
    for _ in range(3):
        dead.new_file()
    await dead.close()
    first = Spool(tmp_path, "sqlite:/srv/gw.db", fsync="never", fsync_interval=1.0)
    second = Spool(tmp_path, "sqlite:/srv/gw.db", fsync="never", fsync_interval=1.0)
    names = _spool_names(tmp_path)
    # Another adopter got to the last file first: the first adopter must take none of the three.
    held = os.open(tmp_path / names[-1], os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert first.adopt_orphans() == []
    finally:
        os.close(held)
    assert [f.path.name for f in second.adopt_orphans()] == names


async def test_a_dead_process_files_are_read_in_the_order_written_past_a_million_segments(
    tmp_path: Path,
) -> None:
    header = orjson.dumps({"modelgate_spool": 1, "database": "sqlite:/srv/gw.db"}) + b"\n"
    for sequence in (999_999, 1_000_000, 1_000_001):
        (tmp_path / f"ledger-1234-abcd-{sequence:06d}.spool").write_bytes(header)
    spool = Spool(tmp_path, "sqlite:/srv/gw.db", fsync="never", fsync_interval=1.0)
    assert [f.path.name for f in spool.adopt_orphans()] == [
        "ledger-1234-abcd-999999.spool",
        "ledger-1234-abcd-1000000.spool",
        "ledger-1234-abcd-1000001.spool",
    ]


async def test_an_open_admission_holds_its_line_not_the_serialiser_s_buffer(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    """A request's admission is kept for as long as it runs (a long stream: minutes). What is kept is its
    line, ~100 bytes, not the 4 KiB buffer orjson's result keeps behind it: at 10,000 open streams, 40 MB."""
    org_id = await _organization(db, 10_000)
    writer, spool = _writer(db, tmp_path / "spool", storage_url)
    await writer.open()
    _crash(writer, org_id, 0)  # the first admission opens the segment's file
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1, 201):
            _crash(writer, org_id, n)
        held = (tracemalloc.get_traced_memory()[0] - before) / 200
    finally:
        tracemalloc.stop()
    assert writer.admitted == 201
    assert held < 1024, f"{held:.0f} bytes held per open admission"
    await spool.close()
