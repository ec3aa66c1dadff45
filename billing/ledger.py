"""The usage ledger: one row per request, written in batches off the hot path.

Entries queue in memory and are flushed every `ledger_flush_interval_seconds` (or sooner when a batch is
full) in one transaction that also moves the organizations' stored balances and the budgets' stored
spend. A graceful shutdown flushes everything; a crash loses at most one flush interval. A failed flush
keeps the entries and retries.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections import defaultdict
from dataclasses import dataclass

from cabinet.storage.database import Database

log = logging.getLogger("modelgate.ledger")


@dataclass(slots=True)  # not frozen: one per request, and a frozen init costs ~6x more
class LedgerEntry:
    """What one request used and cost."""

    organization_id: str
    key_id: str | None
    system_id: str | None
    model: str
    row_key: str | None
    request_id: str
    status: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    cost_micros: int
    created_at: float
    budgets: tuple[tuple[str, float], ...] = ()  # (rule id, period start) charged with this cost
    units: float = 0.0  # media units of the answer: images, or seconds of audio / video
    # How the request ended: completed, client_closed, upstream_error, shutdown, refused (never forwarded).
    outcome: str = "completed"


_INSERT = (
    "INSERT INTO usage_ledger (id, organization_id, key_id, system_id, model, row_key, request_id, status,"
    " input_tokens, cached_input_tokens, output_tokens, cost_micros, created_at, units, outcome)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
)
_BALANCE = "UPDATE organizations SET balance_micros = balance_micros - $1 WHERE id = $2"
_BUDGET = (
    "INSERT INTO policy_budget_spend (rule_id, period_start, spent_micros) VALUES ($1, $2, $3)"
    " ON CONFLICT (rule_id, period_start) DO UPDATE SET spent_micros = policy_budget_spend.spent_micros + $3"
)


class LedgerWriter:
    """Queues ledger entries and flushes them in batches.

    Row ids are `led_` + the entry's time in milliseconds + this writer's random 64-bit prefix + a counter:
    unique across processes, and in time order, so the primary-key index grows at its end (a random id
    costs SQLite ~60 % more per inserted row).
    """

    def __init__(self, db: Database, *, interval: float, batch_size: int) -> None:
        self._db = db
        self._interval = interval
        self._batch_size = batch_size
        self._queue: list[LedgerEntry] = []
        self._id_prefix = secrets.token_hex(8)
        self._id_counter = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self.lock = asyncio.Lock()  # held by a flush, and by readers that must not see half of one
        self.last_flush_at = time.time()  # of the last flush that succeeded, even an empty one (metrics)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ledger-flush")

    def add(self, entry: LedgerEntry) -> None:
        self._queue.append(entry)
        if len(self._queue) >= self._batch_size:
            self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def pending_cost(self, organization_id: str) -> int:
        """Spend of an organization not yet written to its stored balance."""
        return sum(e.cost_micros for e in self._queue if e.organization_id == organization_id)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.flush()
            except Exception:
                log.exception("ledger flush failed; %d entries kept for the next try", len(self._queue))

    async def flush(self) -> int:
        """Write everything queued now; returns the number of entries written."""
        async with self.lock:
            batch, self._queue = self._queue, []
            if not batch:
                self.last_flush_at = time.time()
                return 0
            try:
                await self._write(batch)
            except Exception:
                # Not written (the transaction rolled back): keep the entries for the next flush. A
                # cancellation is not retried: its commit may have happened, and a retry would charge twice.
                self._queue = batch + self._queue
                raise
            self.last_flush_at = time.time()
            return len(batch)

    async def _write(self, batch: list[LedgerEntry]) -> None:
        spend: dict[str, int] = defaultdict(int)
        budgets: dict[tuple[str, float], int] = defaultdict(int)
        rows = []
        prefix, counter = self._id_prefix, self._id_counter
        for e in batch:
            rows.append(
                (
                    f"led_{int(e.created_at * 1000):011x}{prefix}{next(counter):08x}",
                    e.organization_id,
                    e.key_id,
                    e.system_id,
                    e.model,
                    e.row_key,
                    e.request_id,
                    e.status,
                    e.input_tokens,
                    e.cached_input_tokens,
                    e.output_tokens,
                    e.cost_micros,
                    e.created_at,
                    e.units,
                    e.outcome,
                )
            )
            if e.cost_micros:
                spend[e.organization_id] += e.cost_micros
                for budget in e.budgets:
                    budgets[budget] += e.cost_micros
        async with self._db.transaction() as tx:
            await tx.executemany(_INSERT, rows)
            for organization_id, amount in spend.items():
                await tx.execute(_BALANCE, amount, organization_id)
            for (rule_id, period_start), amount in budgets.items():
                await tx.execute(_BUDGET, rule_id, period_start, amount)

    async def stop(self) -> None:
        """Let the background task finish its current flush and end, then flush what is left.

        The task is never cancelled: a flush cancelled while its commit completes would leave the
        batch both written and queued again.
        """
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        await self.flush()
