"""A Redis master that dies and the replica its sentinel promotes (issue #37): the gateway, given the sentinel
instead of a Redis URL (`[redis] sentinels`, `sentinel_master`), follows the failover — redis-py's client
and the counters' own connection alike — and goes on serving; no ledger row is lost or written twice, and
the books balance.

Real servers: a master, its replica and a sentinel started by the test (tests/support/redis_sentinel.py),
PostgreSQL, the gateway as a `modelgate serve` process under load from a client thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from modelgate.infra.redis_wire import RedisWire
from tests.integration.billing.test_ledger_spool import (
    OPENING_MICROS,
    PER_REQUEST_MICROS,
    _config,
    _ledger_now,
    _wait_until,
)
from tests.support.chat_load import ChatLoad
from tests.support.gateway import GatewayProcess, register_tenant
from tests.support.local_servers import own_servers
from tests.support.redis_sentinel import MASTER_NAME, SentinelTrio


@pytest.fixture
def trio() -> Iterator[SentinelTrio]:
    yield from own_servers(SentinelTrio, "a Redis master, replica and sentinel of the test's own")


MASTER_PASSWORD = "master-secret-7f3a"
SENTINEL_PASSWORD = "sentinel-secret-91c2"


@pytest.fixture
def secured_trio() -> Iterator[SentinelTrio]:
    yield from own_servers(
        lambda: SentinelTrio(password=MASTER_PASSWORD, sentinel_password=SENTINEL_PASSWORD),
        "a Redis master, replica and sentinel of the test's own, each asking for a password",
    )


def test_the_gateway_follows_a_sentinel_failover_and_the_books_balance(
    tmp_path: Path, fresh_pg_url: str, trio: SentinelTrio
) -> None:
    redis = f'[redis]\nsentinels = ["{trio.sentinel}"]\nsentinel_master = "{MASTER_NAME}"\n'
    _served_through_a_failover(tmp_path, fresh_pg_url, trio, redis)


def _served_through_a_failover(tmp_path: Path, pg_url: str, trio: SentinelTrio, redis: str) -> str:
    """A gateway under load while the trio's master is killed and its replica promoted: only 503s meanwhile,
    every served request charged once, the stored balance equal to the ledger. Returns its log."""
    config = _config(tmp_path, pg_url, flush_interval=0.2, billing=redis)
    with GatewayProcess(config, cwd=tmp_path) as gateway:
        tenant = register_tenant(gateway.base_url)
        with ChatLoad(gateway.base_url, tenant.api_key) as load:
            assert _wait_until(lambda: len(load.served) >= 20), "no load before the failover"
            trio.kill_master()
            trio.wait_for_failover()
            at_failover = len(load.served)
            assert _wait_until(lambda: len(load.served) >= at_failover + 50), "nothing served after it"
        log = gateway.output()
    # While no master was elected, Redis could not be reached: 503 (fail_open = false), nothing else.
    assert set(load.refused) <= {503}, load.refused
    rows, balance = _ledger_now(pg_url, tenant.email)
    ids = [request_id for request_id, _ in rows]
    assert len(ids) == len(set(ids)), "a request has two ledger rows"
    charged = {request_id for request_id, cost in rows if cost}
    assert charged == set(load.served), "served requests and charged rows differ"
    assert all(cost in (0, PER_REQUEST_MICROS) for _, cost in rows)
    assert balance == OPENING_MICROS - PER_REQUEST_MICROS * len(load.served)
    assert "Traceback" not in log
    return log


async def test_a_demoted_master_is_a_lost_connection_and_the_next_call_asks_the_sentinels_again(
    trio: SentinelTrio,
) -> None:
    """A master demoted by a failover answers writes with READONLY: the counters' connection treats that as
    Redis unreachable (so the request is answered as in an outage, not as an error of the script), drops the
    connection, and connects to the master it is told of next."""
    addresses = [("127.0.0.1", trio.replica_port), ("127.0.0.1", trio.master_port)]
    told: list[tuple[str, int]] = []

    async def master() -> tuple[str, int]:
        told.append(addresses[len(told)])  # first a stale answer: the replica
        return told[-1]

    wire = RedisWire("", 0, master=master)
    try:
        with pytest.raises(RedisConnectionError, match="no longer the master"):
            await wire.call("SET", "modelgate:test:demoted", "1")
        assert await wire.call("SET", "modelgate:test:demoted", "1") == b"OK"
        assert told == addresses
    finally:
        wire.close()


def test_sentinels_that_ask_for_a_password_of_their_own_are_followed_through_a_failover(
    tmp_path: Path, fresh_pg_url: str, secured_trio: SentinelTrio
) -> None:
    """Sentinels with `requirepass` (their own password, not the master's): `[redis] sentinel_password`
    reaches them — for redis-py's client and the counters' connection alike — and the master's comes from the
    URL. Without it the gateway cannot learn the master: requests get 503, and the log says why."""
    trio = secured_trio
    redis = (
        f'[redis]\nsentinels = ["{trio.sentinel}"]\nsentinel_master = "{MASTER_NAME}"\n'
        f'url = "redis://:{MASTER_PASSWORD}@/0"\n'
    )
    config = _config(tmp_path, fresh_pg_url, flush_interval=0.2, billing=redis)
    unauthorised = GatewayProcess(config, cwd=tmp_path)
    try:
        unauthorised.start(ready=503)
        readiness = httpx.get(f"{unauthorised.base_url}/readyz", timeout=5).text
    finally:
        unauthorised.stop()
    log = unauthorised.output()
    assert "redis" in readiness.lower(), readiness
    assert f"127.0.0.1:{trio.sentinel_port} - auth:AuthenticationError" in log, log[-3000:]
    assert SENTINEL_PASSWORD not in log and MASTER_PASSWORD not in log

    redis += f'sentinel_password = "{SENTINEL_PASSWORD}"\n'
    log = _served_through_a_failover(tmp_path, fresh_pg_url, trio, redis)
    assert SENTINEL_PASSWORD not in log and MASTER_PASSWORD not in log
