"""Redis stopped under load with `[redis] outage = "degraded"` (issue #37): two gateway processes go on
serving, each against its share of the tenant's last known headroom; a tenant at its share is refused with
402; when Redis is back the settlements made meanwhile reach it once each, and Redis's balance, the stored
balance and the ledger agree.

Real servers: a `redis-server` of the test's own on a free port (stopped with SIGTERM and started again on
that port with its append-only file: tests/support/redis_server.py), PostgreSQL, two `modelgate serve`
processes (tests/support/gateway_fleet.py), load from client threads (tests/support/chat_load.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelgate.domain.accounts import balance_key
from modelgate.storage import open_database
from tests.integration.billing import test_ledger_spool as spool
from tests.support.chat_load import ChatLoad
from tests.support.gateway import add_budget, register_tenant
from tests.support.gateway_fleet import GatewayFleet
from tests.support.redis_server import RedisServer
from tests.support.services import service_unavailable

OUTAGE_SECONDS = 30.0  # the outage: Redis stopped for 30 s under load
OPERATOR_TOKEN = "operator-outage-test"


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        server.start()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        server.close()
        service_unavailable("a redis-server of the test's own", exc)
        raise
    yield server
    server.close()


@contextlib.contextmanager
def _fleet(tmp_path: Path, storage_url: str, redis: RedisServer, more: str = "") -> Iterator[GatewayFleet]:
    section = f'[redis]\nurl = "{redis.url}"\noutage = "degraded"\n{more}'
    server = f'operator_token = "{OPERATOR_TOKEN}"'
    config = spool._config(tmp_path, storage_url, flush_interval=0.2, billing=section, server=server)
    fleet = GatewayFleet(config, tmp_path, 2)
    fleet.start_all()
    try:
        yield fleet
    finally:
        problems = fleet.stop_all()
        assert not problems, problems
        for name, log in fleet.logs().items():
            assert "Traceback" not in log, name


def _metrics(base_url: str) -> dict[str, float]:
    samples = {}
    with contextlib.suppress(httpx.TransportError):
        for line in httpx.get(f"{base_url}/metrics", timeout=5).text.splitlines():
            name, _, value = line.partition(" ")
            if name.startswith("modelgate_redis_outage_"):
                samples[name.removeprefix("modelgate_redis_outage_")] = float(value)
    return samples


def _all(fleet: GatewayFleet, condition) -> bool:
    return all(condition(_metrics(fleet.base_url(index))) for index in range(len(fleet)))


def _ready_for_an_outage(fleet: GatewayFleet, counters: int = 1) -> bool:
    """Every process has read the tenant's headroom (its balance, and budgets) and counted both processes."""
    return _all(fleet, lambda m: m.get("known_counters", 0) >= counters and m.get("processes") == 2)


def _chat(base_url: str, api_key: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {api_key}"},
        json={"model": "metered", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )


async def _organization_of(storage_url: str, email: str) -> str:
    db = await open_database(storage_url)
    try:
        return await db.fetchval("SELECT organization_id FROM users WHERE email = $1", email)
    finally:
        await db.close()


def _credit(base_url: str, storage_url: str, email: str, amount_micros: int) -> None:
    """An operator's credit to the tenant (a balance event, committed whatever Redis does)."""
    organization_id = asyncio.run(_organization_of(storage_url, email))
    reply = httpx.post(
        f"{base_url}/api/operator/organizations/{organization_id}/adjust",
        json={"kind": "credit", "amountMicros": amount_micros, "reason": "outage test"},
        headers={"authorization": f"Bearer {OPERATOR_TOKEN}"},
        timeout=30,
    )
    assert reply.status_code == 201, reply.text


async def _redis_balance(redis: RedisServer, storage_url: str, email: str) -> tuple[int, int]:
    org = await _organization_of(storage_url, email)
    with redis.client() as client:
        balance, reserved = client.hmget(f"mg:{balance_key(org)}", "b", "r")
    assert isinstance(balance, bytes), "the tenant has no balance counter in Redis"
    return int(balance), int(reserved if isinstance(reserved, bytes) else 0)


def _assert_books_balance(
    storage_url: str, redis: RedisServer, email: str, served: list[str], opening: int
) -> int:
    """No row lost or doubled; stored balance = opening - ledger; Redis's = stored (nothing settled twice,
    nothing still reserved). Returns the stored balance."""
    rows, balance = spool._ledger_now(storage_url, email)
    ids = [request_id for request_id, _ in rows]
    assert len(ids) == len(set(ids)), "a request has two ledger rows"
    assert {request_id for request_id, cost in rows if cost} == set(served), "served and charged differ"
    assert all(cost in (0, spool.PER_REQUEST_MICROS) for _, cost in rows)
    assert balance == opening - spool.PER_REQUEST_MICROS * len(served)
    assert asyncio.run(_redis_balance(redis, storage_url, email)) == (balance, 0)
    return balance


def test_two_gateways_serve_through_a_redis_outage_within_their_shares_and_reconcile(
    tmp_path: Path, fresh_pg_url: str, redis_server: RedisServer
) -> None:
    with _fleet(tmp_path, fresh_pg_url, redis_server) as fleet:
        tenant = register_tenant(fleet.base_url(0))
        urls = [fleet.base_url(0), fleet.base_url(1)]
        # A load that lasts: a 30 s outage outruns the default 5,000 requests of each.
        first_load, second_load = (ChatLoad(url, tenant.api_key, limit=1_000_000) for url in urls)
        with first_load as first, second_load as second:
            loads = (first, second)
            assert spool._wait_until(lambda: _ready_for_an_outage(fleet)), (
                "no headroom read before the outage"
            )
            redis_server.stop()
            stopped_at, at_stop = time.monotonic(), [len(load.served) for load in loads]
            assert spool._wait_until(lambda: _all(fleet, lambda m: m.get("degraded") == 1)), (
                "no degraded mode"
            )
            # The outage lasts OUTAGE_SECONDS, and until each process served 30 requests in it.
            assert spool._wait_until(
                lambda: (
                    time.monotonic() - stopped_at >= OUTAGE_SECONDS
                    and all(len(load.served) >= at + 30 for load, at in zip(loads, at_stop, strict=True))
                )
            ), "nothing served during the outage"
            during = [_metrics(url) for url in urls]
            ready = httpx.get(f"{urls[0]}/readyz", timeout=10)  # serving: load balancers keep it
            assert ready.status_code == 200 and ready.json()["checks"]["redis"].startswith("degraded: ")
            redis_server.start()
            assert spool._wait_until(lambda: _all(fleet, lambda m: m.get("degraded") == 0)), (
                "never reconciled"
            )
            at_return = [len(load.served) for load in loads]
            assert spool._wait_until(
                lambda: all(len(load.served) >= at + 20 for load, at in zip(loads, at_return, strict=True))
            ), (
                "nothing served after the outage",
                at_return,
                [len(load.served) for load in loads],
                [load.refused[-5:] for load in loads],
                [len(load.refused) for load in loads],
            )
    for sample in during:  # each process spent within its share: half the headroom it read
        assert 0 < sample["used_micros"] <= sample["share_micros"] <= spool.OPENING_MICROS // 2, during
        assert sample["share_used_ratio"] <= 1
    assert first.refused == [] and second.refused == [], (first.refused, second.refused)
    served = first.served + second.served
    _assert_books_balance(fresh_pg_url, redis_server, tenant.email, served, spool.OPENING_MICROS)


# (storage, the limit the tenant reaches): the balance on both backends, an organization budget once.
CASES = [("sqlite", "balance"), ("postgres", "balance"), ("postgres", "budget")]


@pytest.fixture(params=CASES, ids=["-".join(case) for case in CASES])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    storage, limit = request.param
    if storage == "sqlite":  # the embedded database, shared by both processes (and its host channel)
        return f"sqlite:///{tmp_path / 'outage.db'}", limit
    return request.getfixturevalue("fresh_pg_url"), limit


def _redis_budget(redis: RedisServer, rule_id: str) -> tuple[int, int]:
    with redis.client() as client:
        (key,) = list(client.scan_iter(match=f"mg:bud:*:{rule_id}:*"))  # bud:{org}:<rule>:…
        balance, reserved = client.hmget(key, "b", "r")
    assert isinstance(balance, bytes)
    return int(balance), int(reserved if isinstance(reserved, bytes) else 0)


def test_a_tenant_at_its_share_is_refused_with_402_during_the_outage_and_after_reconciling(
    tmp_path: Path, case: tuple[str, str], redis_server: RedisServer
) -> None:
    storage_url, limit = case
    room = 20 * spool.PER_REQUEST_MICROS
    opening = room if limit == "balance" else spool.OPENING_MICROS
    with _fleet(tmp_path, storage_url, redis_server) as fleet:
        tenant = register_tenant(fleet.base_url(0), fund_usd=opening / 1_000_000)
        rule_id = add_budget(fleet.base_url(0), tenant, room) if limit == "budget" else ""
        urls = [fleet.base_url(0), fleet.base_url(1)]
        served = []
        for url in urls * 2:  # 4 requests: 16 left, 8 a process
            reply = _chat(url, tenant.api_key)
            assert reply.status_code == 200, reply.text
            served.append(reply.headers["x-request-id"])
        counters = 2 if rule_id else 1
        assert spool._wait_until(lambda: _ready_for_an_outage(fleet, counters)), (
            "no reading before the outage"
        )
        redis_server.stop()
        for url in urls:
            answers = [_chat(url, tenant.api_key) for _ in range(9)]
            assert [reply.status_code for reply in answers] == [200] * 8 + [402], [a.text for a in answers]
            served += [reply.headers["x-request-id"] for reply in answers[:8]]
            error = answers[-1].json()["error"]
            assert (error["type"], error["code"]) == ("insufficient_quota", "insufficient_balance")
            assert _metrics(url)["share_used_ratio"] == 1.0
        redis_server.start()
        assert spool._wait_until(lambda: _all(fleet, lambda m: m.get("degraded") == 0)), "never reconciled"
        for url in urls:  # Redis holds the outage's spend now: no room is left
            refused = _chat(url, tenant.api_key)
            assert refused.status_code == 402, refused.text
    balance = _assert_books_balance(storage_url, redis_server, tenant.email, served, opening)
    assert balance == opening - room
    if rule_id:  # the budget's counter holds its whole spend, once, and nothing reserved
        assert _redis_budget(redis_server, rule_id) == (0, 0)


def test_a_key_at_its_share_of_the_rate_limit_is_refused_with_429_during_the_outage(
    tmp_path: Path, fresh_pg_url: str, redis_server: RedisServer
) -> None:
    limited = '[[plans]]\ncode = "limited"\nrpm = 12\ntpm = 0\n'  # 6 a minute for each of two processes
    with _fleet(tmp_path, fresh_pg_url, redis_server, limited) as fleet:
        tenant = register_tenant(fleet.base_url(0), plan="limited")
        urls = [fleet.base_url(0), fleet.base_url(1)]
        for url in urls:
            assert _chat(url, tenant.api_key).status_code == 200
        assert spool._wait_until(lambda: _ready_for_an_outage(fleet)), "no headroom read before the outage"
        redis_server.stop()
        for url in urls:
            answers = [_chat(url, tenant.api_key) for _ in range(7)]
            assert [reply.status_code for reply in answers] == [200] * 6 + [429], [a.text for a in answers]
            error = answers[-1].json()["error"]
            assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
            assert int(answers[-1].headers["retry-after"]) >= 1


# (storage, how the gateway stops while Redis is down, when it starts again): graceful (SIGTERM) or killed
# (SIGKILL) on both backends, started again inside the outage (its batches wait for Redis); and once after
# Redis is back (sent at its start).
CREDIT_MICROS = 5_000
STOPS = [
    *((storage, stop, "inside") for storage in ("sqlite", "postgres") for stop in ("graceful", "killed")),
    ("sqlite", "killed", "after"),
    ("postgres", "graceful", "after"),
]


@pytest.mark.parametrize(("storage", "stop", "restart"), STOPS, ids=["-".join(stop) for stop in STOPS])
def test_settlements_of_a_gateway_stopped_during_the_outage_reach_redis_once_after_it(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    storage: str,
    stop: str,
    restart: str,
    redis_server: RedisServer,
) -> None:
    """A process that served from its shares stops while Redis is down, its settlements never sent: they
    wait in its spool, its next start applies them once Redis is back (each batch once, by its number) and
    releases what the stopped process held, so Redis's balance is the stored one to the micro-unit."""
    storage_url = (
        f"sqlite:///{tmp_path / 'outage.db'}"
        if storage == "sqlite"
        else request.getfixturevalue("fresh_pg_url")
    )
    with _fleet(tmp_path, storage_url, redis_server) as fleet:
        tenant = register_tenant(fleet.base_url(0))
        urls = [fleet.base_url(0), fleet.base_url(1)]
        served = []
        for url in urls:
            reply = _chat(url, tenant.api_key)
            assert reply.status_code == 200, reply.text
            served.append(reply.headers["x-request-id"])
        assert spool._wait_until(lambda: _ready_for_an_outage(fleet)), "no headroom read before the outage"
        redis_server.stop()
        for _ in range(10):  # served from the first process's share: settlements Redis cannot take
            reply = _chat(urls[0], tenant.api_key)
            assert reply.status_code == 200, reply.text
            served.append(reply.headers["x-request-id"])
        # A credit meanwhile: stored at once, in Redis once it answers (one line in the log, no traceback).
        _credit(urls[1], storage_url, tenant.email, CREDIT_MICROS)
        assert any("not applied to the live counters now" in log for log in fleet.logs().values())
        # Every row is stored (a row follows its settlement's batch, kept while Redis is down): the stop
        # below loses nothing of the ledger, only what Redis has not heard yet.
        assert spool._wait_until(lambda: len(spool._ledger_now(storage_url, tenant.email)[0]) == len(served))
        between = redis_server.start if restart == "after" else None
        ended = asyncio.run(fleet.restart(0, hard=stop == "killed", between=between))
        assert not ended.stop_problem, ended.stop_problem
        if restart == "inside":
            redis_server.start()
        opening = spool.OPENING_MICROS + CREDIT_MICROS
        stored = opening - spool.PER_REQUEST_MICROS * len(served)
        assert spool._wait_until(
            lambda: asyncio.run(_redis_balance(redis_server, storage_url, tenant.email)) == (stored, 0)
        ), asyncio.run(_redis_balance(redis_server, storage_url, tenant.email))
        for url in urls:  # both serve from Redis again, and charge there
            reply = _chat(url, tenant.api_key)
            assert reply.status_code == 200, reply.text
            served.append(reply.headers["x-request-id"])
    _assert_books_balance(storage_url, redis_server, tenant.email, served, opening)
    with redis_server.client() as client:  # the stopped process's batch number went with its batches
        applied = client.hgetall("mg:applied")
    assert len(applied) <= 2, applied
