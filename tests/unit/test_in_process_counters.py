"""The in-process sliding window and money counters."""

from __future__ import annotations

import pytest

from modelgate.domain import counters
from modelgate.domain.counters import InProcessCounters, MoneyState, Reserve, WindowResult


async def _take(counters: InProcessCounters, key: str, amount: int, limit: int) -> WindowResult:
    """One window's admission."""
    [result] = await counters.admit([(key, amount, limit)])
    return result


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1_000_000.0]
    monkeypatch.setattr(counters.time, "time", lambda: now[0])
    return now


async def test_a_window_admits_up_to_its_limit_then_refuses(clock) -> None:
    window = InProcessCounters()
    results = [await _take(window, "k", 1, 3) for _ in range(4)]
    assert [r.allowed for r in results] == [True, True, True, False]
    assert results[-1].used == 3


async def test_the_window_slides_second_by_second(clock) -> None:
    window = InProcessCounters()
    await _take(window, "k", 2, 3)
    clock[0] += 30
    await _take(window, "k", 1, 3)
    assert not (await _take(window, "k", 1, 3)).allowed
    refused = await _take(window, "k", 1, 3)
    assert refused.reset_seconds == 30  # the first bucket leaves the window in 30 s
    clock[0] += 30  # the first two units are now 60 s old: gone
    admitted = await _take(window, "k", 1, 3)
    assert admitted.allowed and admitted.used == 2


async def test_adjust_corrects_the_bucket_of_the_reservation(clock) -> None:
    window = InProcessCounters()
    first = await _take(window, "k", 50, 100)
    clock[0] += 5
    await window.adjust("k", first.second, -40)  # used 10, not 50
    assert (await _take(window, "k", 90, 100)).allowed
    assert not (await _take(window, "k", 1, 100)).allowed


async def test_money_reservations_never_exceed_the_headroom() -> None:
    money = InProcessCounters()

    async def init() -> MoneyState:
        return MoneyState(10, True)

    outcomes = [await money.reserve("bal", 3, True, 0, init) for _ in range(4)]
    assert outcomes == [Reserve.OK, Reserve.OK, Reserve.OK, Reserve.INSUFFICIENT]
    await money.settle("bal", 3, 1)  # a request reserved 3 and cost 1
    assert await money.reserve("bal", 3, True, 0, init) == Reserve.OK


async def test_an_unactivated_account_is_refused_when_activation_is_required() -> None:
    money = InProcessCounters()

    async def init() -> MoneyState:
        return MoneyState(100, False)

    assert await money.reserve("bal", 1, True, 0, init) == Reserve.NOT_ACTIVATED
    assert await money.reserve("bal", 1, False, 0, init) == Reserve.OK
