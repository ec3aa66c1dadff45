"""Event-loop lag: a loop blocked by CPU-bound work shows as lag for a couple of seconds after, and an idle
loop as none."""

from __future__ import annotations

import asyncio
import time

from modelgate.proxy.observability.loop_lag import INTERVAL, LoopLag

STALL = 0.3


def _cpu_bound(seconds: float) -> None:
    """Work that never yields to the loop, as a CPU-bound process's does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def _ticks(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(INTERVAL)


async def test_an_idle_loop_shows_hardly_any_lag() -> None:
    lag = LoopLag()
    lag.start()
    try:
        await _ticks(3)
        assert lag.seconds < STALL
    finally:
        lag.stop()


async def test_a_loop_blocked_by_cpu_bound_work_shows_the_stall_after_it() -> None:
    lag = LoopLag()
    lag.start()
    try:
        await _ticks(1)
        _cpu_bound(STALL)
        await _ticks(2)
        assert lag.seconds >= STALL - INTERVAL
    finally:
        lag.stop()
