"""Named gates: a stream handler waits at one until the test thread releases it."""

from __future__ import annotations

import asyncio
import threading


class Gates:
    """Release is sticky, so it works whether the test calls it before or after a handler waits."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._released: set[str] = set()
        # Waiting handlers, per gate: their loop and the event to set from the test thread.
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def release(self, name: str) -> None:
        with self._cond:
            self._released.add(name)
            waiters = self._waiters.pop(name, [])
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def wait_held(self, name: str, timeout: float) -> bool:
        """Block the calling thread until a handler is waiting at `name` (or it was released)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: bool(self._waiters.get(name)) or name in self._released, timeout
            )

    async def wait(self, name: str) -> None:
        """Wait in the server loop until `name` is released."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._cond:
            if name in self._released:
                return
            self._waiters.setdefault(name, []).append(entry)
            self._cond.notify_all()
        try:
            await entry[1].wait()
        finally:
            with self._cond:
                waiting = self._waiters.get(name, [])
                if entry in waiting:
                    waiting.remove(entry)

    def reset(self) -> None:
        """Forget releases; handlers already waiting keep waiting."""
        with self._cond:
            self._released.clear()
