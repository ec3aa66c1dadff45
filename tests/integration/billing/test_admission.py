"""Rate-limit admission takes from all of a request's windows or from none, in-process and in Redis; a
request's whole admission (its id claim, windows and money reservations) likewise."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from modelgate.domain.counters import (
    Counters,
    InProcessCounters,
    MoneyAsk,
    MoneyState,
    Refusal,
    Reserve,
)
from modelgate.domain.redis_counters import RedisCounters


@pytest.fixture(params=["in-process", "redis"])
async def counters(request: pytest.FixtureRequest) -> AsyncIterator[Counters]:
    if request.param == "in-process":
        yield InProcessCounters()
        return
    url = request.getfixturevalue("redis_url")
    prefix = f"mgtest:{os.urandom(6).hex()}:"  # this test's own keys
    client = aioredis.Redis.from_url(url)
    shared = RedisCounters(client, prefix)
    try:
        yield shared
    finally:
        async for name in client.scan_iter(match=prefix + "*"):
            await client.delete(name)
        await shared.close()


async def test_admission_takes_from_every_window_when_all_have_room(counters: Counters) -> None:
    results = await counters.admit([("key", 1, 5), ("org", 1, 3), ("tokens", 40, 100)])
    assert [r.allowed for r in results] == [True, True, True]
    assert [r.used for r in results] == [1, 1, 40]
    again = await counters.admit([("key", 1, 5), ("org", 1, 3), ("tokens", 40, 100)])
    assert [r.used for r in again] == [2, 2, 80]


async def test_a_refused_admission_takes_from_no_window(counters: Counters) -> None:
    for _ in range(2):
        assert (await counters.admit([("key", 1, 10), ("org", 1, 2)]))[-1].allowed
    refused = await counters.admit([("key", 1, 10), ("org", 1, 2)])
    # The list ends at the window that refused, with its usage; the key's window before it took nothing.
    assert len(refused) == 2
    assert refused[0].allowed and not refused[1].allowed
    assert refused[1].used == 2 and refused[1].reset_seconds > 0
    for _ in range(5):
        assert not (await counters.admit([("key", 1, 10), ("org", 1, 2)]))[-1].allowed
    # Seven refusals later the key's own window still holds only the two admitted requests.
    key_alone = await counters.admit([("key", 0, 10)])
    assert key_alone[0].allowed and key_alone[0].used == 2


async def test_a_token_window_refusal_leaves_the_request_windows_untouched(counters: Counters) -> None:
    refused = await counters.admit([("rpm", 1, 100), ("tpm", 500, 100)])
    assert [r.allowed for r in refused] == [True, False]
    assert (await counters.admit([("rpm", 0, 100)]))[0].used == 0
    admitted = await counters.admit([("rpm", 1, 100), ("tpm", 60, 100)])
    assert [r.used for r in admitted] == [1, 60]


def _money(key: str, amount: int, balance: int, activated: bool = True) -> MoneyAsk:
    async def init() -> MoneyState:
        return MoneyState(balance, activated)

    return MoneyAsk(key, amount, True, 0, init)


async def test_a_request_takes_its_windows_and_reservations_in_one_admission(counters: Counters) -> None:
    admitted = await counters.admit_request(
        None, [("key", 1, 5), ("tokens", 40, 100)], [_money("bal", 3, 10), _money("bud", 3, 4)]
    )
    assert admitted.refusal == Refusal.NONE
    assert [(w.allowed, w.used) for w in admitted.windows] == [(True, 1), (True, 40)]
    assert await counters.money("bal") == (10, 3)
    assert await counters.money("bud") == (4, 3)


async def test_a_refused_reservation_takes_no_window_place_and_no_other_reservation(
    counters: Counters,
) -> None:
    windows = [("key", 1, 5), ("tokens", 40, 100)]
    refused = await counters.admit_request(None, windows, [_money("bal", 3, 10), _money("bud", 5, 4)])
    assert (refused.refusal, refused.money_index, refused.money_outcome) == (
        Refusal.MONEY,
        1,
        Reserve.INSUFFICIENT,
    )
    assert await counters.money("bal") == (10, 0)
    assert [w.used for w in await counters.admit(windows)] == [1, 40]  # the refused request took nothing


async def test_an_unpaid_organization_is_refused_before_anything_is_taken(counters: Counters) -> None:
    refused = await counters.admit_request(None, [("key", 1, 5)], [_money("bal", 0, 10, activated=False)])
    assert (refused.refusal, refused.money_index, refused.money_outcome) == (
        Refusal.MONEY,
        0,
        Reserve.NOT_ACTIVATED,
    )
    assert [w.used for w in await counters.admit([("key", 1, 5)])] == [1]


async def test_a_full_window_refuses_before_any_reservation(counters: Counters) -> None:
    assert (await counters.admit_request(None, [("org", 1, 1)], [])).refusal == Refusal.NONE
    refused = await counters.admit_request(None, [("key", 1, 5), ("org", 1, 1)], [_money("bal", 3, 10)])
    assert refused.refusal == Refusal.WINDOW
    assert len(refused.windows) == 2 and not refused.windows[-1].allowed
    assert refused.windows[-1].used == 1
    assert await counters.money("bal") in (None, (10, 0))  # Redis may not have built it: a 429 comes first


async def test_a_request_id_claimed_in_redis_refuses_the_second_claim_until_released(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    prefix = f"mgtest:{os.urandom(6).hex()}:"
    first, second = RedisCounters(client, prefix), RedisCounters(client, prefix)
    try:
        assert (await first.admit_request("rid:o:1", [("key", 1, 5)], [])).refusal == Refusal.NONE
        refused = await second.admit_request("rid:o:1", [("key", 1, 5)], [])
        assert refused.refusal == Refusal.CLAIM
        assert [w.used for w in await second.admit([("key", 1, 5)])] == [2]  # the refused one took nothing
        first.release_claim("rid:o:1")
        await first.flush()
        assert (await second.admit_request("rid:o:1", [], [])).refusal == Refusal.NONE
    finally:
        async for name in client.scan_iter(match=prefix + "*"):
            await client.delete(name)
        await first.close()
        await second.close()
        await client.aclose()
