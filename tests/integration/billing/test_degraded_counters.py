"""The Redis counters in degraded mode against a Redis of the test's own that it stops and starts again: the
shares come from the last reading, settlements of what they admitted reach Redis as charges only, each once,
and a request id admitted on the shares leaves Redis's claim of that id alone."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from modelgate.domain.counters import MoneyAsk, MoneyState, Refusal
from modelgate.domain.errors import ServiceUnavailable
from modelgate.domain.redis_counters import RedisCounters
from tests.integration.billing.test_redis_outage import redis_server as redis_server  # the fixture
from tests.support.redis_server import RedisServer

PREFIX = "mgtest:"


async def _funded() -> MoneyState:
    return MoneyState(1000, True)


def _ask(amount: int, key: str = "bal:o1") -> MoneyAsk:
    return MoneyAsk(key, amount, True, 0, _funded)


@pytest.fixture
async def counters(redis_server: RedisServer) -> AsyncIterator[RedisCounters]:
    client = Redis.from_url(redis_server.url, socket_connect_timeout=1, socket_timeout=2)
    counters = RedisCounters(client, PREFIX, outage="degraded")
    try:
        yield counters
    finally:
        await counters.close()
        await client.aclose()


async def test_what_the_shares_admitted_reaches_redis_as_charges_once_and_claims_stay_alone(
    redis_server: RedisServer, counters: RedisCounters
) -> None:
    server = redis_server
    other_client = Redis.from_url(server.url)
    other = RedisCounters(other_client, PREFIX)  # a second live process: the shares are halves
    await other.heartbeat(ttl_seconds=60)
    await counters.heartbeat(ttl_seconds=60)
    before = await counters.admit_request("req_pre", [], [_ask(100)])  # reserved in Redis: 100 of 1000
    assert before.refusal == Refusal.NONE
    await counters.read_shares()  # headroom 900, 2 processes: a share of 450
    with server.client() as direct:
        direct.set(f"{PREFIX}req_same", 1)  # another process's request of this id holds its claim
    server.stop()

    admitted = await counters.admit_request("req_same", [], [_ask(400)])
    assert admitted.refusal == Refusal.NONE
    refused = await counters.admit_request("req_more", [], [_ask(51)])
    assert (refused.refusal, refused.money_index) == (Refusal.MONEY, 0)  # 400 + 51 > 450
    with pytest.raises(ServiceUnavailable):  # a counter never read has no share
        await counters.admit_request(None, [], [_ask(1, key="bal:unknown")])
    await counters.settle("bal:o1", 400, 300)  # the share's: no reservation to release in Redis
    await counters.settle("bal:o1", 100, 80)  # Redis's own, admitted before the outage
    counters.release_claim("req_same")
    counters.release_claim("req_pre")
    await counters.flush()  # kept: Redis is down

    server.start()
    await _keeper_finds_redis_back(counters)
    after = await counters.admit_request(None, [], [_ask(10)])
    assert after.refusal == Refusal.NONE
    await counters.settle("bal:o1", 10, 10)
    await counters.flush()
    with server.client() as direct:
        assert direct.hmget(f"{PREFIX}bal:o1", "b", "r") == [str(1000 - 300 - 80 - 10).encode(), b"0"]
        assert direct.exists(f"{PREFIX}req_same") == 1  # not released: this process never claimed it
        assert direct.exists(f"{PREFIX}req_pre") == 0
    await other.close()
    await other_client.aclose()


async def test_after_an_outage_no_process_is_taken_for_dead_before_it_could_renew_its_key(
    redis_server: RedisServer, counters: RedisCounters
) -> None:
    """Every liveness key ran out during the outage: the first process back must not release the others'
    reservations (their requests would run with no worst case held in Redis)."""
    other_client = Redis.from_url(redis_server.url)
    other = RedisCounters(other_client, PREFIX)
    await other.heartbeat(ttl_seconds=0.05)  # gone by the time Redis is back
    assert (await other.admit_request(None, [], [_ask(100)])).refusal == Refusal.NONE
    await counters.heartbeat(ttl_seconds=60)
    assert (await counters.admit_request(None, [], [_ask(10)])).refusal == Refusal.NONE
    await counters.settle("bal:o1", 10, 10)
    await counters.flush()
    await counters.read_shares()
    redis_server.stop()
    assert (await counters.admit_request(None, [], [_ask(10)])).refusal == Refusal.NONE  # on its share
    redis_server.start()
    with redis_server.client() as direct:
        assert direct.exists(f"{PREFIX}live:{other.process}") == 0
        await _keeper_finds_redis_back(counters)
        assert direct.hget(f"{PREFIX}bal:o1", "r") == b"100"  # the other's reservation is still held
    await other.close()
    await other_client.aclose()


async def _keeper_finds_redis_back(counters: RedisCounters) -> None:
    """The keeper's rounds (every second during an outage), until one gets through: the first may meet a
    pooled connection Redis closed when it stopped."""
    for _ in range(3):
        try:
            await counters.keep_once(ttl_seconds=60)
            return
        except RedisError:
            continue
    raise AssertionError("the keeper never reached Redis again")


async def test_window_takes_of_an_outage_reach_redis_when_it_returns(
    redis_server: RedisServer, counters: RedisCounters
) -> None:
    """Requests admitted on this process's window shares during an outage count in Redis's windows once it is
    back: the fleet's minute cannot start over at the full limit. A token correction made after the outage,
    of a take admitted during it, corrects the bucket the take was added to."""
    limit = 10
    window = "rpm:o1"
    tokens = "tpm:o1"
    await counters.heartbeat(ttl_seconds=60)
    assert (await counters.admit_request(None, [(window, 1, limit)], [])).refusal == Refusal.NONE
    await counters.read_shares()  # one live process: the share is the whole limit
    redis_server.stop()
    asks = [(window, 1, limit), (tokens, 50, 1000)]
    during = [await counters.admit_request(None, asks, []) for _ in range(6)]
    assert [admitted.refusal for admitted in during] == [Refusal.NONE] * 6
    redis_server.start()
    await _keeper_finds_redis_back(counters)
    await counters.flush()
    with redis_server.client() as direct:
        assert int(direct.hget(f"{PREFIX}w:{window}", "t") or 0) == 7  # one before, six during
        assert int(direct.hget(f"{PREFIX}w:{tokens}", "t") or 0) == 300
    taken = await counters.admit_request(None, [(window, 3, limit)], [])
    assert taken.refusal == Refusal.NONE  # 7 + 3 = 10
    refused = await counters.admit_request(None, [(window, 1, limit)], [])
    assert refused.refusal == Refusal.WINDOW
    # The usage of a request admitted during the outage is known after it: its take is corrected in Redis.
    second = during[0].windows[1].second
    await counters.adjust(tokens, second, -30)
    await counters.flush()
    with redis_server.client() as direct:
        assert int(direct.hget(f"{PREFIX}w:{tokens}", "t") or 0) == 270
