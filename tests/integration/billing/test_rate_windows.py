"""Rate windows in Redis keep a running total and their oldest second, so a request reads two fields instead
of scanning every bucket; the buckets are scanned, and the expired ones dropped, only when the oldest has left
the window. These tests set a window's buckets directly (seconds in the past, as a long-running window would
have them) and check that the totals stay exact through expiry, corrections and a hash without totals."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from modelgate.domain.counters import WINDOW_SECONDS
from modelgate.domain.redis_counters import RedisCounters


@pytest.fixture
async def windows(redis_url: str) -> AsyncIterator[tuple[RedisCounters, Redis, str]]:
    client = Redis.from_url(redis_url)
    prefix = f"mgtest:{secrets.token_hex(4)}:"
    counters = RedisCounters(client, prefix=prefix)
    try:
        yield counters, client, prefix + "w:"
    finally:
        await counters.close()
        keys = [key async for key in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def _now(client: Redis) -> int:
    seconds, _ = await client.time()
    return int(seconds)


async def _fields(client: Redis, key: str) -> dict[str, int]:
    return {name.decode(): int(value) for name, value in (await client.hgetall(key)).items()}


async def test_buckets_that_left_the_window_stop_counting_and_are_dropped(windows) -> None:
    counters, client, names = windows
    now = await _now(client)
    old, recent = now - WINDOW_SECONDS - 40, now - 10
    await client.hset(names + "rpm", mapping={old: 5, recent: 3, "t": 8, "o": old})

    (result,) = await counters.admit([("rpm", 1, 4)])  # 8 would refuse it; only 3 are still in the window
    assert (result.allowed, result.used) == (True, 4)
    fields = await _fields(client, names + "rpm")
    assert str(old) not in fields
    assert (fields["t"], fields["o"], fields[str(recent)]) == (4, recent, 3)


async def test_a_window_hash_without_totals_is_counted_from_its_buckets(windows) -> None:
    counters, client, names = windows
    now = await _now(client)
    await client.hset(names + "tpm", mapping={now - WINDOW_SECONDS - 1: 50, now - 5: 30})

    (refused,) = await counters.admit([("tpm", 71, 100)])
    assert (refused.allowed, refused.used) == (False, 30)
    (admitted,) = await counters.admit([("tpm", 70, 100)])
    assert (admitted.allowed, admitted.used) == (True, 100)
    assert (await _fields(client, names + "tpm"))["t"] == 100


async def test_a_correction_moves_the_total_with_its_bucket(windows) -> None:
    counters, client, names = windows
    (taken,) = await counters.admit([("tpm", 500, 1000)])
    await counters.adjust("tpm", taken.second, -380)  # the request used 120 of the 500 it reserved
    await counters.flush()
    (after,) = await counters.admit([("tpm", 0, 1000)])
    assert after.used == 120
    assert (await _fields(client, names + "tpm"))["t"] == 120


async def test_a_correction_of_a_bucket_already_dropped_changes_nothing(windows) -> None:
    counters, client, names = windows
    now = await _now(client)
    await client.hset(names + "tpm", mapping={now - 3: 40, "t": 40, "o": now - 3})
    await counters.adjust("tpm", now - WINDOW_SECONDS - 5, -30)  # its bucket has expired meanwhile
    await counters.flush()
    (after,) = await counters.admit([("tpm", 0, 1000)])
    assert after.used == 40


async def test_an_idle_window_expires_with_its_last_bucket(windows) -> None:
    counters, client, names = windows
    await counters.admit([("rpm", 1, 10)])
    assert 0 < await client.ttl(names + "rpm") <= WINDOW_SECONDS + 1
