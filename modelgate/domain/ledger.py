"""The usage ledger: one row per request, on local disk at once and in the database in batches.

`add_row` appends a row (the one row type, `LedgerRow`, built by modelgate/domain/charges.py `charge_row`)
to the write-ahead spool (modelgate/infra/spool.py) before it returns, so the row survives the death of the
process; rows also queue in memory, up to `ledger_max_queue` (past it they are read back from the spool).
`admit_row` journals a request when it is admitted, with the row it leaves should the process die before it
completes (outcome "crashed"); the completed row, of the same id, supersedes it, and a replay charges only
the admissions that never completed. Every `ledger_flush_interval_seconds`, or sooner when a batch is full,
a flush writes them, at most `ledger_batch_size` rows per transaction, each transaction also moving the
organizations' stored balances and the budgets' stored spend. A write whose outcome is unknown (it failed
or was cancelled, or the spool is a dead process's) is repeated carefully: rows the database already holds
are skipped, so no row is ever charged twice. While the database is unreachable, flushes back off and
the outage is logged once when it starts and once when it ends.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from modelgate.domain.usage_days import UsageDays
from modelgate.infra.spool import Spool, SpoolError, SpoolFile
from modelgate.storage.database import Database, Executor

log = logging.getLogger("modelgate.ledger")


CRASHED = "crashed"


def writer_of(row_id: str) -> str:
    """The random prefix of the writer that gave this row id (see `LedgerWriter`)."""
    return row_id[15:31]


class SettledCharges(Protocol):
    """A live money counter shared beyond this process (Redis), seen from the ledger's replay.

    A request's settlement reaches the counter before its completed row reaches the spool, and records its
    cost under the row id there, atomically: so a replay knows what a request that died in between was
    charged, and charges the counter only for the admissions it never settled.
    """

    async def settled(self, row_ids: list[str]) -> dict[str, int]: ...
    async def charge(
        self, organization_id: str, cost: int, row_id: str, budgets: Sequence[Sequence] = ()
    ) -> None: ...
    async def forget(self, writers: set[str]) -> None: ...
    async def release(self, writers: set[str]) -> None: ...


# A ledger row in memory and in the spool (built only by modelgate.domain.charges.charge_row): the 15 columns
# of _INSERT in order, then the budgets charged with its cost as ((rule id, period start), ...).
LedgerRow = tuple
_COLUMNS = 15
_ORGANIZATION, _COST, _BUDGETS = 1, 11, 15
# What the daily sums group and count a row by (`UsageDays.add`); _TOKENS: input, cached input, output.
_KEY, _SYSTEM, _MODEL, _STATUS, _TOKENS, _CREATED_AT = 2, 3, 4, 7, slice(8, 11), 12
# Optional, after the budgets (spool lines written before they existed end earlier): the content action, then
# whether the usage was estimated (written only when true, the content action then written even if empty),
# then the micro-units charged over the reservation and whether the usage was implausible (written only when
# either is set, or a usage detail follows, every column before them then written too).
_CONTENT = 16
_ESTIMATED = 17
_OVER = 18
_IMPLAUSIBLE = 19
# Then the usage detail (JSON text; written only when the usage had a kind beyond input, cached and output
# tokens: cache writes, audio, image, reasoning, tool calls, media units, a service tier).
_DETAIL = 20
_NO_CONTENT_ACTION = ("", False, 0, False, None)  # the last columns of a row that ends at its budgets
# An admission in the spool: this marker, then the row to charge should the request never complete.
_ADMITTED = "admitted"
# An admission that ended without a row (nothing to charge): this marker, then its row id.
_WITHDRAWN = "withdrawn"

_INSERT = (
    "INSERT INTO usage_ledger (id, organization_id, key_id, system_id, model, row_key, request_id, status,"
    " input_tokens, cached_input_tokens, output_tokens, cost_micros, created_at, units, outcome,"
    " content_action, usage_estimated, over_reservation_micros, usage_implausible, usage_detail)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
)
_BALANCE = "UPDATE organizations SET balance_micros = balance_micros - $1 WHERE id = $2"
_BUDGET = (
    "INSERT INTO policy_budget_spend (rule_id, period_start, spent_micros) VALUES ($1, $2, $3)"
    " ON CONFLICT (rule_id, period_start) DO UPDATE SET spent_micros = policy_budget_spend.spent_micros + $3"
)
_HELD_CHUNK = 500  # ids per "which of these are written" query (SQLite allows 32766 parameters)
_MAX_BACKOFF_SECONDS = 30.0


@dataclass(slots=True, eq=False)
class _Segment:
    """The rows of one spool segment (or of memory only, when the spool cannot be written)."""

    file: SpoolFile | None
    rows: list[LedgerRow] | None = field(default_factory=list)  # None once spilled: read back from the file
    count: int = 0  # rows added
    written: int = 0  # leading rows the database holds
    careful: bool = False  # a write's outcome is unknown: skip the rows the database already holds


class LedgerWriter:
    """Spools ledger rows as they are added and writes them to the database in batches.

    Row ids are `led_` + the entry's time in milliseconds + this writer's random 64-bit prefix + a counter:
    unique across processes, and in time order, so the primary-key index grows at its end (a random id
    costs SQLite markedly more per inserted row). An id is given when the request is admitted (or, without an
    admission, when its row is added) and travels with it through the spool, which is what makes a
    repeated write, and a completed admission, recognisable.
    """

    def __init__(
        self,
        db: Database,
        *,
        interval: float,
        batch_size: int,
        max_queue: int = 100_000,
        spool: Spool | None = None,
        writer_id: str | None = None,
    ) -> None:
        self._db = db
        self._interval = interval
        self._batch_size = batch_size
        self._max_queue = max_queue
        self._spool = spool  # None: memory only (tests of the database side)
        # The writer's part of every row id (16 hex digits): with Redis, the id under which this process holds
        # its share of reservations, so a replay knows whose reservations a crashed admission held.
        self._id_prefix = writer_id or secrets.token_hex(8)
        self._id_counter = itertools.count(1)
        self._current = _Segment(None)
        self._sealed: list[_Segment] = []  # waiting for the database, oldest first
        # Admissions whose request has not completed: row id -> its spool line, copied into every new
        # segment so a sealed one can be deleted (bounded by the requests in flight).
        self._open: dict[str, bytes] = {}
        self._pending: dict[str, int] = defaultdict(int)  # organization -> cost of rows not written
        self._backlog = 0  # rows not written
        self._in_memory = 0
        self._spool_broken = False
        self._outage_since: float | None = None
        self._wake = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._flushing = asyncio.Lock()  # one flush at a time
        # Held by a flush's transaction, and by readers that must not see half of one.
        self.lock = asyncio.Lock()
        self.last_flush_at = time.time()  # of the last flush that succeeded, even an empty one (metrics)
        # Told each admitted request's row id once its completed row is in the spool: the shared counter's
        # record of its settlement is needed no more (`SettledCharges`).
        self.on_row_spooled: Callable[[str], None] | None = None

    async def open(self, shared: SettledCharges | None = None) -> int:
        """Start the spool and adopt the segments of dead processes: their rows are written like any other,
        and each admission without its completed row becomes a "crashed" row; returns the rows adopted.

        With a `shared` live counter (Redis), which outlived the dead process: a crashed admission it
        settled is charged what it settled, and one it never saw is charged there too, before its row is
        written, so the counter and the stored balance agree whenever this start is cut short.
        """
        if self._spool is None:
            return 0
        self._spool.start()
        self._current = self._new_segment()
        adopted = files = 0
        # Read oldest first: an admission (and each copy of it) always precedes its completed row.
        crashed: dict[str, list] = {}
        spent: list[SpoolFile] = []  # files with no completed row: deleted once their admissions are replayed
        writers: set[str] = set()
        for spool_file in self._spool.adopt_orphans():
            segment = _Segment(spool_file, rows=None, careful=True)
            for record in self._spool.rows(spool_file):
                if record[0] == _ADMITTED:
                    crashed[record[1]] = record
                    writers.add(writer_of(record[1]))
                    continue
                if record[0] == _WITHDRAWN:
                    crashed.pop(record[1], None)
                    continue
                crashed.pop(record[0], None)
                writers.add(writer_of(record[0]))
                segment.count += 1
                if record[_COST]:
                    self._pending[record[_ORGANIZATION]] += record[_COST]
            files += 1
            if not segment.count:
                spent.append(spool_file)
                continue
            self._sealed.append(segment)
            self._backlog += segment.count
            adopted += segment.count
        if shared is not None and writers:
            # The dead processes' reservations go first: charged while still held, a crashed admission would
            # count twice against the balance until the others noticed the death. Their batch numbers go
            # too (nothing of theirs is sent again but their kept batches, which keep theirs until written).
            try:
                await shared.release(writers)
            except Exception as exc:  # the others release them once the dead processes' liveness expires
                log.warning("ledger: the reservations of stopped processes stay until they expire: %r", exc)
        if shared is not None and crashed:
            await self._settle_crashed(shared, crashed)
        # Into this process's own segment, written after the adopted ones. Careful: should this process die
        # before the adopted files are deleted, the next start replays these ids twice (from both files).
        for record in crashed.values():
            # Its trailing columns too (the content action, the estimate mark): a crash row is an estimate.
            budgets = tuple(tuple(budget) for budget in record[_BUDGETS + 1])
            self._append((*record[1 : _COLUMNS + 1], budgets, *record[_CONTENT + 1 :]))
        if crashed:
            self._current.careful = True
        if self._current.file is not None:  # else the crashed rows are in memory only: keep their source
            for spool_file in spent:
                await self._spool.remove(spool_file)
            if shared is not None and writers:
                try:
                    await shared.forget(writers)
                except Exception as exc:  # they expire by themselves
                    log.warning("ledger: the settlement records of stopped processes stay: %r", exc)
        if adopted or crashed:
            log.warning(
                "ledger: %d usage rows, and %d requests in flight when their process died (charged as"
                " crashed), from %d spool files of stopped processes are replayed (%s)",
                adopted,
                len(crashed),
                files,
                self._spool.directory,
            )
            self._wake.set()
        return adopted + len(crashed)

    async def _settle_crashed(self, shared: SettledCharges, crashed: dict[str, list]) -> None:
        """Give each crashed admission the cost the shared counter settled for it, and settle the others'
        crash cost there (each recorded under its row id, so a replay cut short repeats none)."""
        try:
            settled = await shared.settled(list(crashed))
        except Exception as exc:
            log.error(
                "ledger: the live counter cannot say which of %d crashed requests it settled (%r); each is"
                " charged its crash cost there, which counts twice any it had settled",
                len(crashed),
                exc,
            )
            settled = {}
        for row_id, record in crashed.items():
            cost = settled.get(row_id)
            if cost is None:
                await shared.charge(
                    record[_ORGANIZATION + 1], record[_COST + 1], row_id, record[_BUDGETS + 1]
                )
            else:
                record[_COST + 1] = cost

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ledger-flush")

    def admit_row(self, crash: LedgerRow) -> None:
        """Journal an admitted request before it is forwarded: `crash` (built by domain.charges.charge_row,
        its id from `new_row_id`) is the row charged if the process dies before the request's own row of
        that id is added."""
        # A copy: orjson's result keeps its 4 KiB output buffer, and the line is kept as long as the request
        # runs (a long stream: minutes).
        line = bytes(memoryview(orjson.dumps((_ADMITTED, *crash), option=orjson.OPT_APPEND_NEWLINE)))
        self._open[crash[0]] = line
        self._journal(line)

    def add_row(self, row: LedgerRow, admitted: bool) -> None:
        """Record a request's row (built by domain.charges.charge_row): in the spool (in the kernel, past the
        death of the process) on return. `admitted`: its id is an admission's, which it supersedes."""
        self._append(row)
        if admitted:
            row_id = row[0]
            self._open.pop(row_id, None)  # after the append: the admission is superseded only once durable
            if self.on_row_spooled is not None:
                self.on_row_spooled(row_id)

    def withdraw(self, row_id: str) -> None:
        """An admitted request ended with nothing to charge and no row of its own (its reservation given
        back whole): a replay does not charge it as crashed."""
        if self._open.pop(row_id, None) is not None:
            self._journal(orjson.dumps((_WITHDRAWN, row_id), option=orjson.OPT_APPEND_NEWLINE))

    def _journal(self, line: bytes) -> None:
        """Append an admission or a withdrawal to the current spool segment (not a row: nothing counts it)."""
        spool_file = self._current.file
        if spool_file is not None:
            try:
                spool_file.append(line)
            except OSError as exc:
                self._spool_write_failed(exc)

    def new_row_id(self, created_at: float) -> str:
        """A fresh row id for a row created at `created_at` (see the class)."""
        return f"led_{int(created_at * 1000):011x}{self._id_prefix}{next(self._id_counter):08x}"

    def _append(self, row: LedgerRow) -> None:
        segment = self._current
        if segment.file is not None:
            try:
                segment.file.append(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
            except OSError as exc:
                segment = self._spool_write_failed(exc)
        segment.count += 1
        self._backlog += 1
        if cost := row[_COST]:
            self._pending[row[_ORGANIZATION]] += cost
        rows = segment.rows
        if rows is not None:
            if self._in_memory < self._max_queue or segment.file is None:
                rows.append(row)
                self._in_memory += 1
            else:  # the queue is full: this segment is read back from its file
                self._in_memory -= len(rows)
                segment.rows = None
        if segment.count >= self._batch_size:
            self._wake.set()

    @property
    def admitted(self) -> int:
        """Requests admitted and not yet completed."""
        return len(self._open)

    @property
    def queued(self) -> int:
        """Rows waiting in memory."""
        return self._in_memory

    @property
    def backlog(self) -> int:
        """Rows not yet in the database (in memory, in the spool, or both)."""
        return self._backlog

    def pending_cost(self, organization_id: str) -> int:
        """Spend of an organization not yet written to its stored balance (rows only in the spool too)."""
        return self._pending.get(organization_id, 0)

    async def flush(self, *, seal: bool = True) -> int:
        """Write every row added so far (only the sealed backlog when `seal` is false); returns the rows
        written. Raises when the database fails: the rows stay, for the next flush."""
        async with self._flushing:
            if seal and self._current.count:
                self._sealed.append(self._current)
                self._current = self._new_segment()
            written = 0
            while self._sealed:
                segment = self._sealed[0]
                for chunk in self._unwritten(segment):
                    written += await self._write_chunk(segment, chunk)
                self._sealed.pop(0)
                if segment.rows is not None:
                    self._in_memory -= len(segment.rows)
                self._backlog -= segment.count - segment.written  # rows a torn spool line lost, if any
                if segment.file is not None and self._spool is not None:
                    await self._spool.remove(segment.file)
            self.last_flush_at = time.time()
            return written

    def _unwritten(self, segment: _Segment) -> Iterator[list[LedgerRow]]:
        size = self._batch_size
        if segment.rows is not None:
            rows = segment.rows
            while segment.written < len(rows):
                yield rows[segment.written : segment.written + size]
            return
        assert segment.file is not None and self._spool is not None
        chunk: list[LedgerRow] = []
        index = 0
        for row in self._spool.rows(segment.file):
            if row[0] in (_ADMITTED, _WITHDRAWN):
                continue
            index += 1
            if index <= segment.written:
                continue
            chunk.append(
                (
                    *row[:_COLUMNS],
                    tuple(tuple(budget) for budget in row[_BUDGETS]),
                    *row[_CONTENT : _DETAIL + 1],
                )
            )
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    async def _write_chunk(self, segment: _Segment, chunk: list[LedgerRow]) -> int:
        async with self.lock:
            try:
                inserted = await self._write(chunk, careful=segment.careful)
            except BaseException:
                segment.careful = True  # failed or cancelled while committing: it may have been written
                raise
            segment.written += len(chunk)
            self._backlog -= len(chunk)
            pending = self._pending
            for row in chunk:
                if cost := row[_COST]:
                    organization_id = row[_ORGANIZATION]
                    left = pending[organization_id] - cost
                    if left:
                        pending[organization_id] = left
                    else:
                        del pending[organization_id]
            return inserted

    async def _write(self, chunk: list[LedgerRow], *, careful: bool) -> int:
        async with self._db.transaction() as tx:
            if careful:
                held = await _ids_written(tx, [row[0] for row in chunk])
                chunk = [row for row in chunk if row[0] not in held]
                if not chunk:
                    return 0
            spend: dict[str, int] = defaultdict(int)
            budgets: dict[tuple[str, float], int] = defaultdict(int)
            for row in chunk:
                if cost := row[_COST]:
                    spend[row[_ORGANIZATION]] += cost
                    for budget in row[_BUDGETS]:
                        budgets[budget] += cost
            # Most rows end at their budgets (no content action, usage reported): parameters without a call.
            parameters = [
                row[:_COLUMNS] + _NO_CONTENT_ACTION if len(row) == _CONTENT else _parameters(row)
                for row in chunk
            ]
            await tx.executemany(_INSERT, parameters)
            for organization_id, amount in spend.items():
                await tx.execute(_BALANCE, amount, organization_id)
            for (rule_id, period_start), amount in budgets.items():
                await tx.execute(_BUDGET, rule_id, period_start, amount)
            await _day_sums(chunk).write(tx)  # the cabinet's daily sums, in the rows' own transaction
        return len(chunk)

    def _new_segment(self) -> _Segment:
        if self._spool is None:
            return _Segment(None)
        try:
            spool_file = self._spool.new_file()
        except SpoolError as exc:
            if not self._spool_broken:
                self._spool_broken = True
                log.error("LEDGER SPOOL UNWRITABLE (%s): usage rows are kept in memory only until it is", exc)
            return _Segment(None)
        if self._open:  # the segments before this one may now be deleted without losing an admission
            try:
                spool_file.append(b"".join(self._open.values()))
            except OSError as exc:
                log.error("LEDGER SPOOL UNWRITABLE (%s): open admissions not carried over", exc)
        if self._spool_broken:
            self._spool_broken = False
            log.warning("ledger spool writable again (%s)", self._spool.directory)
        return _Segment(spool_file)

    def _spool_write_failed(self, exc: OSError) -> _Segment:
        """The current segment's file refused a row: seal it, and keep rows in memory until the next flush."""
        if not self._spool_broken:
            self._spool_broken = True
            log.error("LEDGER SPOOL UNWRITABLE (%s): usage rows are kept in memory only until it is", exc)
        self._sealed.append(self._current)
        self._current = _Segment(None)
        return self._current

    async def _run(self) -> None:
        delay = self._interval
        while not self._stopping:
            await self._pause(delay)
            if self._stopping:
                return
            backlog = self._backlog
            try:
                # During an outage only the backlog is retried, so one segment (not one per try) grows.
                await self.flush(seal=self._outage_since is None)
            except Exception as exc:
                delay = self._outage_continues(exc, delay)
                continue
            if self._outage_since is not None:
                log.warning(
                    "LEDGER STORAGE BACK after %.1f s: writing the backlog of %d usage rows",
                    time.monotonic() - self._outage_since,
                    backlog,
                )
                self._outage_since = None
                self._wake.set()  # the rows added during the outage, at once
            delay = self._interval

    async def _pause(self, delay: float) -> None:
        # During an outage a full batch does not wake the flush: only the backoff (or a stop) does.
        event = self._wake if self._outage_since is None else self._stop_requested
        try:
            await asyncio.wait_for(event.wait(), timeout=delay)
        except TimeoutError:
            pass
        self._wake.clear()

    def _outage_continues(self, exc: Exception, delay: float) -> float:
        """Log the start of an outage once (never a traceback per try); returns the next retry's delay."""
        if self._outage_since is not None:
            return min(delay * 2, _MAX_BACKOFF_SECONDS)
        self._outage_since = time.monotonic()
        where = f"the spool {self._spool.directory}" if self._spool is not None else "memory"
        log.warning(
            "LEDGER STORAGE UNAVAILABLE (%s: %s): %d usage rows wait in %s; retrying with backoff",
            type(exc).__name__,
            exc,
            self._backlog,
            where,
        )
        return min(self._interval, _MAX_BACKOFF_SECONDS)

    async def stop(self, grace_seconds: float = 30.0) -> None:
        """End the flush task and write what is left, within `grace_seconds`; rows the database does not
        take in time stay in the spool, for the next start.

        The task is cancelled only past the grace: a write cancelled while it commits is repeated
        carefully (rows the database holds are skipped), so nothing is charged twice.
        """
        self._stopping = True
        self._stop_requested.set()
        self._wake.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_seconds
        if self._task is not None:
            _, running = await asyncio.wait({self._task}, timeout=grace_seconds)
            for task in running:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            self._task = None
        try:
            await asyncio.wait_for(self.flush(), timeout=max(deadline - loop.time(), 0.001))
        except Exception as exc:
            where = f"the spool {self._spool.directory}" if self._spool is not None else "memory (no spool)"
            log.warning(
                "ledger: %d usage rows not written at shutdown (%s: %s); they stay in %s for the next start",
                self._backlog,
                type(exc).__name__,
                exc,
                where,
            )
        if self._spool is not None:
            if self._open:  # every request completes before the ledger stops; these did not
                log.warning(
                    "ledger: %d admitted requests had not completed at shutdown; they stay in the spool and"
                    " are charged as crashed at the next start",
                    len(self._open),
                )
            elif not self._current.count and self._current.file is not None:
                await self._spool.remove(self._current.file)
            await self._spool.close()
            # Its descriptors are closed (and their numbers free for reuse): a late row stays in memory.
            self._current = _Segment(None)


def _day_sums(chunk: list[LedgerRow]) -> UsageDays:
    """The sums of a chunk's rows per organization, UTC day, model, key and system."""
    days = UsageDays()
    for row in chunk:
        group = (row[_ORGANIZATION], row[_CREATED_AT], row[_MODEL], row[_KEY], row[_SYSTEM])
        days.add(*group, row[_STATUS], row[_TOKENS], row[_COST])
    return days


def _parameters(row: LedgerRow) -> tuple:
    """The parameters of `_INSERT` for a row."""
    if len(row) > _OVER:
        return (*row[:_COLUMNS], *row[_CONTENT : _IMPLAUSIBLE + 1], _usage_detail(row))
    return (*row[:_COLUMNS], _content_action(row), _usage_estimated(row), 0, False, None)


def _content_action(row: LedgerRow) -> str:
    return row[_CONTENT] if len(row) > _CONTENT else ""


def _usage_detail(row: LedgerRow) -> str | None:
    return row[_DETAIL] or None if len(row) > _DETAIL else None


def _usage_estimated(row: LedgerRow) -> bool:
    return len(row) > _ESTIMATED and row[_ESTIMATED] is True


async def _ids_written(tx: Executor, ids: list[str]) -> set[str]:
    """Which of these row ids the ledger table holds."""
    held: set[str] = set()
    for start in range(0, len(ids), _HELD_CHUNK):
        part = ids[start : start + _HELD_CHUNK]
        marks = ", ".join(f"${n}" for n in range(1, len(part) + 1))
        rows = await tx.fetch(f"SELECT id FROM usage_ledger WHERE id IN ({marks})", *part)
        held.update(row["id"] for row in rows)
    return held
