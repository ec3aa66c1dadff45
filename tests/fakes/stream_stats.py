"""Counters the test thread can watch: in-flight streams and handlers cut short by the client."""

from __future__ import annotations

import threading


class StreamStats:
    """Updated by the server loop; a Condition lets the test thread block until a count is reached."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._cancelled = 0

    @property
    def active(self) -> int:
        with self._cond:
            return self._active

    @property
    def cancelled(self) -> int:
        with self._cond:
            return self._cancelled

    def stream_started(self) -> None:
        with self._cond:
            self._active += 1
            self._cond.notify_all()

    def stream_ended(self) -> None:
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def note_cancelled(self) -> None:
        with self._cond:
            self._cancelled += 1
            self._cond.notify_all()

    def wait_cancelled(self, n: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._cancelled >= n, timeout)

    def wait_active(self, n: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._active == n, timeout)

    def reset_cancelled(self) -> None:
        with self._cond:
            self._cancelled = 0
