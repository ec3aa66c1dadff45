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
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Protocol

log = logging.getLogger("modelgate.http")


class Writer(Protocol):
    def flush_out(self) -> None:
        """Send what this writer queued (nothing when it has nothing queued or its transport is gone)."""


class Outbox:
    """The writes of one event loop (see the module docstring)."""

    __slots__ = ("__weakref__", "_armed", "_loop", "_queued")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queued: list[Writer] = []
        self._armed = False

    def first(self) -> bool:
        """True when nothing was written in this pass yet: the caller writes now. Otherwise it `queue`s."""
        if self._armed:
            return False
        self._armed = True
        self._loop.call_soon(self._end_of_pass)
        return True

    def queue(self, writer: Writer) -> None:
        """`writer.flush_out()` runs at the start of the next pass (a writer queues itself once a pass)."""
        self._queued.append(writer)

    def _end_of_pass(self) -> None:
        queued, self._queued = self._queued, []
        self._armed = False
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
