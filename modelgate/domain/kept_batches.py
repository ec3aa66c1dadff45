"""Settlement batches Redis did not take, on local disk (`domain.redis_counters` keeps them in memory and
sends them again until Redis answers): a process that stops, gracefully or killed, while Redis is
unreachable leaves them in the spool directory, and the next gateway to start there sends them once Redis
answers, under the stopped process's id and batch numbers, so each is applied once.

A batch is written when it is first kept, and again (its added part) each time a later batch joins it; the
file is deleted once every kept batch is written. Files are `kept-<process>-<n>.spool` (the process's id
in Redis) beside the ledger's segments, held under `fcntl.flock` like them (`infra.spool`): one that can be
locked is a stopped process's, and while one of a process exists its batch numbers stay in Redis.
A line: [process, batch number, keys, operations] (the operations three values per key, as
`redis_scripts.COMPLETE` takes them; the keys without the applied-batches hash, which the sender adds).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

import orjson

from modelgate.infra.spool import Spool, SpoolError, SpoolFile

log = logging.getLogger("modelgate.counters")


@dataclass(slots=True)
class StoppedBatches:
    """The kept batches a stopped process left, oldest first, as (process, number, keys, operations)."""

    batches: deque[tuple[str, int, list[str], list[int | str]]] = field(default_factory=deque)
    files: list[SpoolFile] = field(default_factory=list)
    processes: set[str] = field(default_factory=set)  # whose batches these are (released once written)
    applied: set[tuple[str, str]] = field(default_factory=set)  # (process, `applied` hash) written in

    def settled(self) -> dict[str, int]:
        """The settled costs these batches record, by ledger row id (the `m` operations)."""
        found: dict[str, int] = {}
        for _, _, keys, operations in self.batches:
            for index in range(len(keys)):
                if operations[3 * index] == "m":
                    found[str(operations[3 * index + 1])] = int(operations[3 * index + 2])
        return found


class KeptJournal:
    """This process's kept batches on disk, and the adoption of those of stopped processes."""

    def __init__(self, spool: Spool) -> None:
        self._spool = spool
        self._file: SpoolFile | None = None
        self._broken = False

    def own(self, process: str) -> None:
        """Name this process's files after its id in Redis (`holds_batches_of`)."""
        self._spool.owner = process

    def start(self) -> None:
        self._spool.start()

    def holds_batches_of(self, process: str) -> bool:
        """Whether kept batches of `process` may still be sent (a file of its is in the spool directory,
        adopted or not): its batch numbers must stay in Redis until they are."""
        return self._spool.has_files_of(process)

    def keep(self, process: str, number: int, keys: list[str], operations: list[int | str]) -> None:
        """Write a kept batch (or the part of one that joins the kept batch `number`) before its rows are
        spooled: after this it survives the death of the process."""
        try:
            if self._file is None:
                self._file = self._spool.new_file()
            self._file.append(
                orjson.dumps((process, number, keys, operations), option=orjson.OPT_APPEND_NEWLINE)
            )
        except (OSError, SpoolError) as exc:
            if not self._broken:
                self._broken = True
                log.error(
                    "redis: cannot write kept settlements to the spool (%s); they are kept in memory only",
                    exc,
                )
            return
        self._broken = False

    async def drained(self) -> None:
        """Every kept batch is written: the file goes (the next one kept starts another)."""
        spool_file, self._file = self._file, None
        if spool_file is not None:
            await self._spool.remove(spool_file)

    def adopt(self) -> StoppedBatches:
        """Lock the files of stopped processes and read their batches, joined parts merged, oldest first."""
        stopped = StoppedBatches(files=self._spool.adopt_orphans())
        batches = stopped.batches
        for spool_file in stopped.files:
            for line in self._spool.rows(spool_file):
                process, number, keys, operations = line
                last = batches[-1] if batches else None
                if last is not None and last[0] == process and last[1] == number:
                    last[2].extend(keys)
                    last[3].extend(operations)
                else:
                    batches.append((process, number, keys, operations))
                    stopped.processes.add(process)
        return stopped

    async def forget(self, stopped: StoppedBatches) -> None:
        """Their batches are all written: delete the stopped processes' files."""
        for spool_file in stopped.files:
            await self._spool.remove(spool_file)
        stopped.files.clear()

    async def close(self) -> None:
        """Release every file: those still holding kept batches stay for the next start."""
        await self._spool.close()
