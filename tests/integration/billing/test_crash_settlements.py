"""A process killed between a request's settlement in Redis and its completed row in the spool: the next start
charges that request exactly what Redis settled, in the stored balance too, and nothing twice.

Real parts: the ledger writer and its spool on each storage backend, the Redis counters on the machine's
Redis, and the cabinet's organizations table. A "death" is a writer whose spool is closed without a stop
(its files stay for the next start to adopt) and whose counters are simply dropped.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from modelgate.config import load_config
from modelgate.domain.accounts import (
    Accounts,
    CrashSettlements,
    balance_key,
    budget_key,
    org_tag,
    settled_key,
)
from modelgate.domain.counters import MoneyState, Reserve
from modelgate.domain.kept_batches import KeptJournal
from modelgate.domain.ledger import LedgerWriter, writer_of
from modelgate.domain.policy_decisions import PolicyDirectory, period_start
from modelgate.domain.policy_rules import PolicyRule
from modelgate.domain.redis_counters import RedisCounters
from modelgate.infra.spool import Spool, database_identity
from modelgate.storage.database import Database
from tests.support.ledger_rows import add_row, admit_row, new_organization

OPENING = 10_000
RESERVED = 1_000
CRASH_COST = 300  # what the admission charges should the request never complete
SETTLED = 120  # what the request really cost, settled in Redis


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[tuple[Redis, str]]:
    client = Redis.from_url(redis_url)
    prefix = f"mgtest:{secrets.token_hex(4)}:"
    try:
        yield client, prefix
    finally:
        keys = [key async for key in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


class Process:
    """One gateway process's billing parts: its Redis counters, accounts and ledger writer."""

    def __init__(self, db: Database, redis: tuple[Redis, str], directory: Path, storage_url: str) -> None:
        client, prefix = redis
        # The batches Redis did not take, in the same spool directory (as the gateway builds it).
        self.journal = KeptJournal(
            Spool(directory, database_identity(storage_url), fsync="never", fsync_interval=1.0, kind="kept")
        )
        self.counters = RedisCounters(client, prefix=prefix, journal=self.journal)
        self.spool = Spool(directory, database_identity(storage_url), fsync="never", fsync_interval=1.0)
        # As the gateway builds it: row ids name the process holding their reservations in Redis.
        self.ledger = LedgerWriter(
            db, interval=600.0, batch_size=100, spool=self.spool, writer_id=self.counters.process
        )
        self.settlements = CrashSettlements(self.counters)
        self.ledger.on_row_spooled = self.settlements.spooled
        self.accounts = Accounts(
            db, load_config(None), self.counters, self.ledger, PolicyDirectory(db), shared=True
        )

    async def start(self) -> int:
        await self.counters.adopt_stopped()  # before the ledger's replay, as the gateway does
        return await self.ledger.open(self.settlements)

    async def die(self) -> None:
        """SIGKILL as seen by the next start: the spool files stay unlocked, nothing is flushed."""
        await self.spool.close()
        await self.journal.close()


async def _organization(db: Database) -> str:
    return await new_organization(db, "Crash Test", OPENING)


async def _admitted(process: Process, org_id: str, budgets: tuple[tuple[str, float], ...] = ()) -> str:
    """A request admitted as the chain admits one: its reservation in Redis, its admission in the spool
    (charged, should it crash, to the balance and to `budgets`: (rule id, period start))."""

    async def init() -> MoneyState:
        return MoneyState(OPENING, True)

    assert await process.counters.reserve(balance_key(org_id), RESERVED, False, 0, init) == Reserve.OK
    request_id = f"req_{os.urandom(4).hex()}"
    return admit_row(process.ledger, org_id, request_id, CRASH_COST, key_id="key_crash", budgets=budgets)


async def _one_admitted(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> tuple[str, Process, str]:
    """(organization, process, row id): a new organization and a started process that admitted one request."""
    org_id = await _organization(db)
    process = Process(db, redis, tmp_path / "spool", storage_url)
    await process.start()
    return org_id, process, await _admitted(process, org_id)


async def _books(db: Database, process: Process, org_id: str) -> tuple[list[tuple[str, int]], int, int]:
    """(outcome, cost) of every stored row, the stored balance and Redis's balance, all written."""
    await process.ledger.flush()
    rows = await db.fetch(
        "SELECT outcome, cost_micros FROM usage_ledger WHERE organization_id = $1 ORDER BY id", org_id
    )
    stored = await db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", org_id)
    live = await process.counters.money(balance_key(org_id))
    assert live is not None
    return [(row["outcome"], int(row["cost_micros"])) for row in rows], int(stored), live[0]


async def _restarted(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str, org_id: str, adopted: int
) -> tuple[list[tuple[str, int]], int, int]:
    """The next start on the dead process's spool: the books once it has replayed and flushed it."""
    restarted = Process(db, redis, tmp_path / "spool", storage_url)
    assert await restarted.start() == adopted
    try:
        return await _books(db, restarted, org_id)
    finally:
        await restarted.ledger.stop(5.0)


async def test_a_request_killed_after_its_settlement_is_charged_what_redis_settled(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> None:
    org_id, dead, row_id = await _one_admitted(db, redis, tmp_path, storage_url)
    await dead.accounts.settle_all([(balance_key(org_id), RESERVED)], SETTLED, row_id)
    await dead.die()  # before its completed row reached the spool

    rows, stored, live = await _restarted(db, redis, tmp_path, storage_url, org_id, 1)
    assert rows == [("crashed", SETTLED)]
    assert stored == live == OPENING - SETTLED


async def test_a_request_killed_before_its_settlement_is_charged_its_crash_cost_in_redis_too(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> None:
    org_id, dead, _ = await _one_admitted(db, redis, tmp_path, storage_url)
    await dead.die()

    rows, stored, live = await _restarted(db, redis, tmp_path, storage_url, org_id, 1)
    assert rows == [("crashed", CRASH_COST)]
    assert stored == live == OPENING - CRASH_COST


async def test_a_crashed_requests_reservation_is_released_before_its_cost_is_charged(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> None:
    # Charged while the dead process still held its reservation, the crash cost would count twice against
    # the balance (balance - reserved) until the others noticed the death by its expired liveness key.
    org_id, dead, _ = await _one_admitted(db, redis, tmp_path, storage_url)
    assert await dead.counters.money(balance_key(org_id)) == (OPENING, RESERVED)
    await dead.die()

    restarted = Process(db, redis, tmp_path / "spool", storage_url)
    assert await restarted.start() == 1
    try:
        await restarted.counters.written()
        assert await restarted.counters.money(balance_key(org_id)) == (OPENING - CRASH_COST, 0)
    finally:
        await restarted.ledger.stop(5.0)


async def test_a_start_cut_short_after_charging_a_crashed_request_does_not_charge_it_again(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> None:
    org_id, dead, row_id = await _one_admitted(db, redis, tmp_path, storage_url)
    await dead.die()
    # A first restart charged the crash cost in Redis and died before writing the row or deleting the file.
    cut_short = Process(db, redis, tmp_path / "other-spool", storage_url)
    await cut_short.settlements.charge(org_id, CRASH_COST, row_id)

    rows, stored, live = await _restarted(db, redis, tmp_path, storage_url, org_id, 1)
    assert rows == [("crashed", CRASH_COST)]
    assert stored == live == OPENING - CRASH_COST


async def test_completed_requests_leave_no_settlement_record_behind(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> None:
    client, prefix = redis
    org_id = await _organization(db)
    process = Process(db, redis, tmp_path / "spool", storage_url)
    await process.start()
    row_ids = [await _admitted(process, org_id) for _ in range(3)]
    for row_id in row_ids:
        await process.accounts.settle_all([(balance_key(org_id), RESERVED)], SETTLED, row_id)
        add_row(
            process.ledger, org_id, f"req_{os.urandom(4).hex()}", SETTLED, row_id=row_id, key_id="key_crash"
        )
    # Beside the counters it settles, in their hash tag (one slot on a Redis Cluster).
    hash_key = prefix + settled_key(writer_of(row_ids[0])) + ":" + org_tag(org_id)
    # Each record is dropped with the next request's batch, never in a call of its own.
    assert await client.hkeys(hash_key) == [row_ids[-1].encode()]
    later = await _admitted(process, org_id)
    await process.accounts.settle_all([(balance_key(org_id), RESERVED)], SETTLED, later)
    assert await client.hkeys(hash_key) == [later.encode()]
    assert 0 < await client.ttl(hash_key) <= 7 * 24 * 3600
    add_row(process.ledger, org_id, f"req_{os.urandom(4).hex()}", SETTLED, row_id=later, key_id="key_crash")
    rows, stored, live = await _books(db, process, org_id)
    assert rows == [("completed", SETTLED)] * 4
    assert stored == live == OPENING - 4 * SETTLED
    await process.ledger.stop(5.0)


async def test_the_records_of_a_dead_writer_are_dropped_once_its_spool_is_replayed(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> None:
    client, prefix = redis
    org_id, dead, row_id = await _one_admitted(db, redis, tmp_path, storage_url)
    await dead.accounts.settle_all([(balance_key(org_id), RESERVED)], SETTLED, row_id)
    await dead.die()

    restarted = Process(db, redis, tmp_path / "spool", storage_url)
    await restarted.start()
    assert not await client.exists(prefix + settled_key(writer_of(row_id)) + ":" + org_tag(org_id))
    await restarted.ledger.stop(5.0)


async def test_a_withdrawn_admission_is_not_charged_as_crashed(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> None:
    org_id, dead, withdrawn = await _one_admitted(db, redis, tmp_path, storage_url)
    await dead.accounts.settle_all([(balance_key(org_id), RESERVED)], 0, withdrawn)
    dead.ledger.withdraw(withdrawn)  # a realtime response.create the provider rejected: no row of its own
    await dead.die()

    rows, stored, live = await _restarted(db, redis, tmp_path, storage_url, org_id, 0)
    assert rows == []
    assert stored == live == OPENING


async def test_a_crashed_requests_cost_reaches_its_budgets_live_counter_too(
    db: Database, redis: tuple[Redis, str], tmp_path: Path, storage_url: str
) -> None:
    # A budget's live counter was built from the stored spend once; the crash cost of a request charged to
    # that budget must reach it as well, or the budget could be spent past its limit until it is rebuilt.
    now = time.time()
    start = period_start("month", now)
    org_id = await _organization(db)
    rule = PolicyRule(
        f"pr_{os.urandom(4).hex()}", org_id, "organization", org_id, "allow", ("*",), 5_000, "month",
        None, None, "", now, now,
    )  # fmt: skip
    dead = Process(db, redis, tmp_path / "spool", storage_url)
    await dead.start()

    async def budget_left() -> MoneyState:
        return MoneyState(5_000, True)

    budget = budget_key(rule, start)
    assert await dead.counters.reserve(budget, RESERVED, False, 0, budget_left) == Reserve.OK
    await _admitted(process=dead, org_id=org_id, budgets=((rule.id, start),))
    await dead.die()

    restarted = Process(db, redis, tmp_path / "spool", storage_url)
    assert await restarted.start() == 1
    try:
        await restarted.counters.written()
        assert await restarted.counters.money(budget) == (5_000 - CRASH_COST, 0)
        assert await restarted.counters.money(balance_key(org_id)) == (OPENING - CRASH_COST, 0)
    finally:
        await restarted.ledger.stop(5.0)
