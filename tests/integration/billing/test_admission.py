"""Rate-limit admission takes from all of a request's windows or from none, in-process and in Redis."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from billing.counters import Counters, InProcessCounters, RedisCounters


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
