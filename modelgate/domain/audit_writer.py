"""The model API's audit entries (content rules that blocked, redacted or flagged a request), written in
batches off the request path.

A request only queues its entries; a background task writes what is queued every `interval` seconds in one
transaction. While the database is away the entries wait (up to `max_queue`, the oldest dropped beyond it
with a count in the log) and go in once it is back; a graceful stop writes what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque

from modelgate.domain.audit_log import NewAuditEntry, record_many
from modelgate.storage.database import Database

log = logging.getLogger("modelgate.audit_writer")

_MAX_BACKOFF_SECONDS = 30.0


class AuditWriter:
    """Queues audit entries and writes them in batches (see the module)."""

    def __init__(
        self, db: Database, *, interval: float = 0.2, batch_size: int = 500, max_queue: int = 100_000
    ) -> None:
        self._db = db
        self._interval = interval
        self._batch_size = batch_size
        self._queue: deque[NewAuditEntry] = deque()
        self._max_queue = max_queue
        self._dropped = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, entry: NewAuditEntry) -> None:
        """Queue an entry; never waits."""
        if len(self._queue) >= self._max_queue:
            self._queue.popleft()
            self._dropped += 1
        self._queue.append(entry)
        if len(self._queue) >= self._batch_size:
            self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="audit-writer")

    async def flush(self) -> None:
        """Write everything queued now (raises when the database refuses; the entries stay queued)."""
        if self._dropped:
            log.error("audit queue full: %d entries were dropped while the database was away", self._dropped)
            self._dropped = 0
        while self._queue:
            batch = list(itertools.islice(self._queue, self._batch_size))
            async with self._db.transaction() as tx:
                await record_many(tx, batch)
            for _ in batch:
                self._queue.popleft()

    async def _run(self) -> None:
        backoff = self._interval
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), backoff)
            self._wake.clear()
            try:
                await self.flush()
                backoff = self._interval
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
                log.warning("audit entries not written (%r); %d wait, retrying", exc, len(self._queue))

    async def stop(self, grace: float) -> None:
        """Stop, then write what is left within `grace` seconds (what the database refuses is logged)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await asyncio.wait_for(self.flush(), grace)
        except Exception as exc:
            log.error("%d audit entries were not written at stop: %r", len(self._queue), exc)
