"""Degraded mode's arithmetic (modelgate/domain/local_shares.py): each process's share of a counter's last
known headroom and of each limit, what it admits against them, and which settlements are its own."""

from __future__ import annotations

from modelgate.domain.counters import MoneyAsk, MoneyState, Refusal, Reserve
from modelgate.domain.local_shares import LocalShares, money_share, window_share


async def _never() -> MoneyState:
    raise AssertionError("a share is never built from the database")


def _ask(amount: int, key: str = "bal:o1", credit: int = 0, activation: bool = False) -> MoneyAsk:
    return MoneyAsk(key, amount, activation, credit, _never)


def _outage(readings: dict, processes: int, credit: int = 0) -> LocalShares:
    shares = LocalShares()
    shares.note([_ask(0, key, credit) for key in readings])
    shares.remember(readings, processes)
    assert shares.begin()
    return shares


def test_a_share_is_an_equal_part_of_the_headroom_rounded_down_and_nothing_of_a_debt() -> None:
    assert money_share(1000, 3) == 333
    assert money_share(1000, 1) == 1000
    assert money_share(-50, 2) == 0  # a counter in debt: nothing to spend
    assert money_share(1000, 0) == 1000  # never a division by zero: this process is live
    assert (window_share(10, 3), window_share(2, 3), window_share(60, 1)) == (3, 0, 60)


async def test_a_counter_never_read_has_no_share_so_its_requests_are_refused() -> None:
    shares = _outage({"bal:o1": (1000, 0, True)}, processes=2)
    assert await shares.admit([], [_ask(10, key="bal:other")]) is None


async def test_the_share_is_cut_from_balance_plus_credit_less_reservations_and_refuses_past_it() -> None:
    # balance 1000, 200 reserved by requests in flight, credit limit 400: headroom 1200, two processes: 600.
    shares = _outage({"bal:o1": (1000, 200, True)}, processes=2, credit=400)
    assert shares.totals() == (600, 0)
    admitted = await shares.admit([], [_ask(500, credit=400)])
    assert admitted is not None and admitted.refusal == Refusal.NONE
    refused = await shares.admit([], [_ask(101, credit=400)])
    assert refused is not None
    assert (refused.refusal, refused.money_index, refused.money_outcome) == (
        Refusal.MONEY,
        0,
        Reserve.INSUFFICIENT,
    )
    assert shares.used_ratio() == 500 / 600
    # The request settles below its worst case: the share is charged its cost and frees the rest.
    assert shares.settle("bal:o1", 500, 120)
    assert shares.totals() == (600, 120)
    fits = await shares.admit([], [_ask(480, credit=400)])
    assert fits is not None and fits.refusal == Refusal.NONE
    assert shares.used_ratio() == 1.0


async def test_settlements_of_reservations_not_taken_here_are_left_to_redis() -> None:
    shares = _outage({"bal:o1": (1000, 0, True)}, processes=1)
    assert not shares.settle("bal:o1", 50, 50)  # admitted by Redis before the outage
    await shares.admit([], [_ask(50)])
    assert shares.held == 1
    shares.end()  # Redis is back before the request ends: still settled here (Redis never held it)
    assert shares.settle("bal:o1", 50, 40)
    assert not shares.settle("bal:o1", 50, 40)
    assert shares.held == 0


async def test_an_organization_not_activated_is_refused_and_a_budget_refusal_names_its_counter() -> None:
    shares = _outage({"bal:o1": (1000, 0, False), "bud:r1": (30, 0, True)}, processes=1)
    refused = await shares.admit([], [_ask(10, activation=True)])
    assert refused is not None and refused.money_outcome == Reserve.NOT_ACTIVATED
    over_budget = await shares.admit([], [_ask(40), _ask(40, key="bud:r1")])
    assert over_budget is not None
    assert (over_budget.refusal, over_budget.money_index) == (Refusal.MONEY, 1)
    assert shares.totals() == (1030, 0)  # all or nothing: the balance kept nothing of the refused request


async def test_rate_limits_are_split_and_a_money_refusal_gives_the_windows_back() -> None:
    shares = _outage({"bal:o1": (100, 0, True)}, processes=3)  # a share of 33
    rpm = [("rpm:k1", 1, 10)]  # 10 a minute, 3 of them in this process
    for _ in range(3):
        admitted = await shares.admit(rpm, [_ask(1)])
        assert admitted is not None and admitted.refusal == Refusal.NONE
        assert admitted.windows[0].second < 0  # its own window's bucket: corrections stay here
    full = await shares.admit(rpm, [_ask(1)])
    assert full is not None and full.refusal == Refusal.WINDOW
    assert (full.windows[-1].allowed, full.windows[-1].used) == (False, 3)
    # A request the money refuses takes no place in the window.
    other = [("rpm:k2", 1, 10)]
    refused = await shares.admit(other, [_ask(31)])
    assert refused is not None and refused.refusal == Refusal.MONEY
    for _ in range(3):
        admitted = await shares.admit(other, [_ask(0)])
        assert admitted is not None and admitted.refusal == Refusal.NONE


async def test_a_reading_keeps_only_the_counters_still_watched_and_counts_this_process() -> None:
    shares = LocalShares()
    shares.note([_ask(0, "bal:o1")])
    shares.remember({"bal:o1": (500, 0, True), "bal:gone": (900, 0, True)}, processes=0)
    assert shares.processes == 1
    shares.begin()
    assert not shares.begin()  # one outage at a time
    assert shares.totals() == (500, 0)
