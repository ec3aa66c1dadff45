"""Socket writes gathered per pass of the event loop: the first goes out at once, the rest together.

A write to a peer that sleeps wakes it, and waking a process on another CPU is an inter-processor interrupt
(a VM exit on a virtual machine) paid inside the writer's `send`. Under load the gateway's writes of one
pass (answers to clients, requests to providers) come one per request, each after the Python that serves
its request, so the peer has gone back to sleep between them: on the benchmark that was 1.8 wake-ups per
request, 15 % of the gateway's CPU, against 0.9 for the bare aiohttp floor, whose per-request steps run in
separate passes and so write back to back.

So the first write of a pass goes out at once (a lone request waits for nothing) and the later ones are
queued: at the start of the next pass, before any request is served, they go out one after the other, while
the peers are still awake (0.14 wake-ups per request). A writer queues itself once per pass with what it
has to send, and keeps the order of its own bytes: whatever it does to its transport later (another write, a
close, a hand-over) first sends what it queued (`flush_out`).

A pass can be long: with thousands of streams open, one pass relays hundreds of pieces, and a write queued
early in it waited for all of them (5.8 ms at p99 of a stream's first byte at 1,000 open streams). So a
queue held for `HOLD_AT_MOST` seconds goes out at once, mid-pass; the clock is read once every
`_CHECK_EVERY` queued writes (and when a queue begins), so a short pass reads it once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Protocol

log = logging.getLogger("modelgate.http")

HOLD_AT_MOST = 0.001  # seconds a queued write waits for the rest of its pass, give or take 16 writes
_CHECK_EVERY = 16  # queued writes between two reads of the clock (a power of two)


class Writer(Protocol):
    def flush_out(self) -> None:
        """Send what this writer queued (nothing when it has nothing queued or its transport is gone)."""


class Outbox:
    """The writes of one event loop (see the module docstring)."""

    __slots__ = ("__weakref__", "_loop", "_queued", "_since", "armed")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queued: list[Writer] = []
        self.armed = False  # a write of this pass went out: the next ones `queue` (read, never set, outside)
        self._since = 0.0  # when the oldest write waiting was queued

    def first(self) -> bool:
        """True when nothing was written in this pass yet: the caller writes now. Otherwise it `queue`s."""
        if self.armed:
            return False
        self.arm()
        return True

    def arm(self) -> None:
        """The pass's first write goes now (its writer read `armed` False): the later ones are queued."""
        self.armed = True
        self._loop.call_soon(self._end_of_pass)

    def queue(self, writer: Writer) -> None:
        """`writer.flush_out()` runs at the start of the next pass, or now once the queue was held too long
        (a writer queues itself once until it is flushed)."""
        queued = self._queued
        queued.append(writer)
        waiting = len(queued)
        if waiting == 1:
            self._since = time.perf_counter()
        elif not waiting & (_CHECK_EVERY - 1) and time.perf_counter() - self._since > HOLD_AT_MOST:
            self._flush()

    def _end_of_pass(self) -> None:
        self.armed = False
        self._flush()

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        for writer in queued:
            try:
                writer.flush_out()
            except Exception:  # one broken connection must not keep the others' bytes back
                log.exception("a queued socket write failed")


_OUTBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Outbox] = weakref.WeakKeyDictionary()


def outbox_for(loop: asyncio.AbstractEventLoop) -> Outbox:
    """The loop's outbox (made on first use); a connection looks it up once, when it opens."""
    outbox = _OUTBOXES.get(loop)
    if outbox is None:
        outbox = _OUTBOXES[loop] = Outbox(loop)
    return outbox
