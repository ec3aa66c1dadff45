"""Event-loop lag: how late a timer runs. A process whose loop is late is CPU-bound (or blocked): every
open stream's next chunk waits that long, so /readyz reports it and a load balancer can send new work
elsewhere before the process falls behind.

One timer every `INTERVAL` seconds; the lag reported is the largest of the last `WINDOW` samples, so a
stall shows for a couple of seconds after it, whichever moment a probe or a scrape arrives.
"""

from __future__ import annotations

import asyncio
from collections import deque

INTERVAL = 0.2
WINDOW = 10  # samples: 2 s


class LoopLag:
    """Samples the running loop's lag until stopped."""

    __slots__ = ("_due", "_loop", "_samples", "_timer")

    def __init__(self) -> None:
        self._samples: deque[float] = deque([0.0], maxlen=WINDOW)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._due = loop.time() + INTERVAL
        self._timer = loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        loop = self._loop
        if loop is None:  # never: start() set it before the first tick
            return
        now = loop.time()
        self._samples.append(max(0.0, now - self._due))
        self._due = now + INTERVAL
        self._timer = loop.call_at(self._due, self._tick)

    @property
    def seconds(self) -> float:
        """The worst lag of the last WINDOW samples (about 2 s); a stall still running counts as it grows."""
        worst = max(self._samples)
        if self._loop is not None and self._timer is not None:
            worst = max(worst, self._loop.time() - self._due)  # the tick due now has not run yet
        return worst

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
