"""Money counters on both implementations (in-process and the real Redis): balance events are applied
exactly once whatever the counter is doing, reservations are bounded by balance + credit, and settlements
of zero amounts work."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from modelgate.domain.counters import Counters, InProcessCounters, MoneyAsk, MoneyState, Refusal, Reserve
from modelgate.domain.redis_counters import RedisCounters
from tests.fakes.tcp_proxy import TcpProxy


@pytest.fixture(params=["in-process", "redis"])
async def money(request: pytest.FixtureRequest) -> AsyncIterator[Counters]:
    if request.param == "in-process":
        yield InProcessCounters()
        return
    from redis.asyncio import Redis

    url = request.getfixturevalue("redis_url")
    client = Redis.from_url(url)
    counters = RedisCounters(client, prefix=f"mgtest:{secrets.token_hex(4)}:")
    try:
        yield counters
    finally:
        await counters.close()
        await client.aclose()


def _fixed(state: MoneyState):
    async def init() -> MoneyState:
        return state

    return init


async def test_zero_reservations_settle_and_leave_the_balance_alone(money: Counters, caplog) -> None:
    init = _fixed(MoneyState(100, True))
    assert await money.reserve("bal", 0, True, 0, init) == Reserve.OK
    with caplog.at_level(logging.ERROR):
        await money.settle("bal", 0, 0)
    assert await money.money("bal") == (100, 0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("modelgate")]


async def test_a_settlement_of_a_zero_reservation_still_charges_its_cost(money: Counters) -> None:
    init = _fixed(MoneyState(100, True))
    assert await money.reserve("bal", 0, True, 0, init) == Reserve.OK
    await money.settle("bal", 0, 30)
    assert await money.money("bal") == (70, 0)


async def test_the_credit_limit_extends_the_headroom_and_is_read_per_reservation(money: Counters) -> None:
    init = _fixed(MoneyState(0, False))
    assert await money.reserve("bal", 5, False, 10, init) == Reserve.OK
    assert await money.reserve("bal", 6, False, 10, init) == Reserve.INSUFFICIENT
    assert await money.reserve("bal", 6, False, 11, init) == Reserve.OK  # a raised limit applies at once


async def test_an_event_is_applied_once_however_often_it_is_announced(money: Counters) -> None:
    init = _fixed(MoneyState(10, True, credit_seq=3))
    assert await money.reserve("bal", 4, True, 0, init) == Reserve.OK  # a reservation in flight
    assert await money.apply_event("bal", 4, 50, True)
    assert not await money.apply_event("bal", 4, 50, True)
    assert not await money.apply_event("bal", 3, 999, True)  # already folded into the stored balance
    assert await money.money("bal") == (60, 4)


async def test_events_may_arrive_out_of_order(money: Counters) -> None:
    init = _fixed(MoneyState(0, True, credit_seq=1))
    await money.reserve("bal", 0, True, 0, init)
    assert await money.apply_event("bal", 3, 7, False)
    assert await money.apply_event("bal", 2, 5, False)
    assert await money.money("bal") == (12, 0)


async def test_an_event_announced_while_the_counter_is_being_built_is_not_lost(money: Counters) -> None:
    # The counter reads the database (credit_seq 1), a top-up (seq 2) commits and is announced before the
    # counter exists, then the counter is created from the stale read: the top-up must still be in it.
    reading = asyncio.Event()
    announced = asyncio.Event()

    async def slow_init() -> MoneyState:
        reading.set()
        await announced.wait()
        return MoneyState(0, False, credit_seq=1)

    reservation = asyncio.create_task(money.reserve("bal", 5, True, 0, slow_init))
    await reading.wait()
    assert not await money.apply_event("bal", 2, 10, True)  # nothing to fold into yet
    announced.set()
    assert await reservation == Reserve.OK
    assert await money.money("bal") == (10, 5)
    assert not await money.apply_event("bal", 2, 10, True)


async def test_a_debit_event_lowers_the_headroom(money: Counters) -> None:
    init = _fixed(MoneyState(10, True))
    await money.reserve("bal", 0, True, 0, init)
    assert await money.apply_event("bal", 1, -8, False)
    assert await money.reserve("bal", 3, True, 0, init) == Reserve.INSUFFICIENT
    assert await money.reserve("bal", 2, True, 0, init) == Reserve.OK


async def test_large_amounts_keep_every_micro(money: Counters) -> None:
    init = _fixed(MoneyState(10**15 + 1, True))
    assert await money.reserve("bal", 10**15, True, 0, init) == Reserve.OK
    await money.settle("bal", 10**15, 10**15 - 7)
    assert await money.money("bal") == (8, 0)


async def test_reservations_of_a_process_that_died_are_released_by_the_others(redis_url: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    prefix = f"mgtest:{secrets.token_hex(4)}:"
    dead, alive = RedisCounters(client, prefix=prefix), RedisCounters(client, prefix=prefix)
    try:
        init = _fixed(MoneyState(10, True))
        await dead.heartbeat(ttl_seconds=0.05)
        await alive.heartbeat(ttl_seconds=30)
        assert await dead.reserve("bal", 7, True, 0, init) == Reserve.OK  # then the process is SIGKILLed
        assert await alive.reserve("bal", 2, True, 0, init) == Reserve.OK
        assert await alive.reserve("bal", 2, True, 0, init) == Reserve.INSUFFICIENT
        deadline = asyncio.get_running_loop().time() + 5
        while await client.exists(f"{prefix}live:{dead.process}"):  # the dead process's key runs out
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        assert await alive.reclaim_dead() == 1
        assert await alive.money("bal") == (10, 2)  # only the living process's reservation is held
        assert await alive.reserve("bal", 8, True, 0, init) == Reserve.OK
        await alive.settle("bal", 8, 8)
        await alive.settle("bal", 2, 1)
        assert await alive.money("bal") == (1, 0)
        assert await alive.reclaim_dead() == 0
    finally:
        await alive.close()
        await client.aclose()


async def _expire(client, prefix: str, counters: RedisCounters) -> None:
    """Wait until `counters` (its heartbeat a short one) is taken for dead."""
    deadline = asyncio.get_running_loop().time() + 5
    while await client.exists(f"{prefix}live:{counters.process}"):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)


async def test_a_settlement_after_its_reservation_was_reclaimed_releases_nothing_twice(
    redis_url: str,
) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    prefix = f"mgtest:{secrets.token_hex(4)}:"
    slow, other = RedisCounters(client, prefix=prefix), RedisCounters(client, prefix=prefix)
    try:
        init = _fixed(MoneyState(10, True))
        await slow.heartbeat(ttl_seconds=0.05)
        await other.heartbeat(ttl_seconds=30)
        assert await slow.reserve("bal", 6, True, 0, init) == Reserve.OK
        assert await other.reserve("bal", 3, True, 0, init) == Reserve.OK
        await _expire(client, prefix, slow)
        await other.reclaim_dead()  # the slow process was taken for dead, but its request still ends
        await slow.settle("bal", 6, 5)
        await slow.flush()  # settlements are written in batches after the request
        assert await other.money("bal") == (5, 3)  # its spend counts; the other's reservation is intact
    finally:
        await other.close()
        await client.aclose()


async def test_admissions_after_a_reclaim_of_a_live_process_are_released_by_the_next_reclaim(
    redis_url: str,
) -> None:
    # The admission script names a counter in held:<process> only when the process's share in it starts:
    # a share begun again after a reclaim (which empties the set) must be named again, or it is held forever.
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    prefix = f"mgtest:{secrets.token_hex(4)}:"
    slow, other = RedisCounters(client, prefix=prefix), RedisCounters(client, prefix=prefix)
    init = _fixed(MoneyState(10, True))

    async def admit(amount: int) -> None:
        admitted = await slow.admit_request(None, [], [MoneyAsk("bal", amount, True, 0, init)])
        assert admitted.refusal == Refusal.NONE

    try:
        await other.heartbeat(ttl_seconds=30)
        assert await other.reserve("bal", 3, True, 0, init) == Reserve.OK
        await slow.heartbeat(ttl_seconds=0.05)
        await admit(4)
        await admit(1)
        await _expire(client, prefix, slow)
        assert await other.reclaim_dead() == 1
        assert await other.money("bal") == (10, 3)
        await admit(2)  # the slow process lives on and admits again, twice
        await admit(1)
        await slow.heartbeat(ttl_seconds=0.05)
        await _expire(client, prefix, slow)
        assert await other.reclaim_dead() == 1
        assert await other.money("bal") == (10, 3)  # only the other's reservation is left
    finally:
        await other.close()
        await client.aclose()


async def test_a_clean_stop_hands_back_what_the_process_held(redis_url: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    prefix = f"mgtest:{secrets.token_hex(4)}:"
    stopping, other = RedisCounters(client, prefix=prefix), RedisCounters(client, prefix=prefix)
    try:
        init = _fixed(MoneyState(10, True))
        assert await stopping.reserve("bal", 4, True, 0, init) == Reserve.OK
        await stopping.close()
        assert await other.money("bal") == (10, 0)
    finally:
        await other.close()
        await client.aclose()


async def test_a_batch_redis_applied_but_never_answered_is_not_applied_again_by_its_retry(
    redis_url: str,
) -> None:
    async with _proxied(redis_url) as (proxy, counters, direct, prefix):
        assert await counters.reserve("bal", 6, True, 0, _fixed(MoneyState(10, True))) == Reserve.OK
        proxy.swallow_replies()  # Redis runs the settlement; its answer never comes back
        await counters.settle("bal", 6, 5)
        await counters.adjust("tpm", 1, 0)  # another operation of the same batch, applied once as well
        await counters.flush()  # times out: the batch is kept for a retry
        assert await direct.hmget(f"{prefix}bal", "b", "r") == [b"5", b"0"]  # and yet it was applied
        proxy.restore()
        await counters.retry_settlements()
        await counters.settle("bal", 0, 1)  # a later batch goes through as usual
        await counters.flush()
        assert await direct.hmget(f"{prefix}bal", "b", "r") == [b"4", b"0"]


@contextlib.asynccontextmanager
async def _proxied(redis_url: str) -> AsyncIterator[tuple[TcpProxy, RedisCounters, Redis, str]]:
    """Counters reaching Redis through a loopback proxy (giving a reply up after half a second), and a
    direct client to look at what Redis holds."""
    prefix = f"mgtest:{secrets.token_hex(4)}:"
    direct = Redis.from_url(redis_url)
    with TcpProxy(6379) as proxy:
        client = Redis(host="127.0.0.1", port=proxy.port, socket_timeout=0.5)
        counters = RedisCounters(client, prefix=prefix)
        try:
            yield proxy, counters, direct, prefix
        finally:
            proxy.restore()
            await counters.close()
            await client.aclose()
            await direct.aclose()


async def test_a_kept_batch_is_applied_once_though_another_process_took_its_writer_for_dead(
    redis_url: str,
) -> None:
    """A Redis outage longer than the liveness keys (or one cut off from Redis): another process releases
    the writer's reservations, but must keep its batch number, or the writer's retry applies twice."""
    async with _proxied(redis_url) as (proxy, counters, direct, prefix):
        other = RedisCounters(direct, prefix=prefix)
        await counters.heartbeat(ttl_seconds=0.05)
        assert await counters.reserve("bal", 6, True, 0, _fixed(MoneyState(10, True))) == Reserve.OK
        proxy.swallow_replies()
        await counters.settle("bal", 6, 5)
        await counters.flush()  # applied, its answer lost: kept
        await _expire(direct, prefix, counters)
        assert await other.reclaim_dead() == 1
        proxy.restore()
        await counters.retry_settlements()
        assert await direct.hmget(f"{prefix}bal", "b", "r") == [b"5", b"0"]
        await other.close()
