"""Counters on a Redis Cluster (issue #37): sharded by organization (each script touches one slot), routed
by the counters' own connection (MOVED, NOSCRIPT, a lost master), and a master killed under load by two
gateway processes: its replica is promoted, requests go on, the books balance, and an organization on
another master never notices; a release kept through a failover, and a whole cluster stopped and started
again (unreachable as a single Redis that is down: the keeper and the bus outlive it).

Real servers: 3 masters and 3 replicas started by the test (tests/support/redis_cluster.py), PostgreSQL,
two `modelgate serve` processes under load from client threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio.cluster import ClusterPubSub, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from modelgate.config.schema import RedisConfig
from modelgate.domain.accounts import balance_key
from modelgate.domain.counters import MoneyAsk, MoneyState, Refusal
from modelgate.domain.errors import ServiceUnavailable
from modelgate.domain.redis_counters import RedisCounters
from modelgate.infra.redis_client import cluster_client
from modelgate.infra.redis_cluster import ClusterWire
from modelgate.infra.redis_wire import Script
from modelgate.proxy.state.shared_state import RedisBus
from tests.integration.billing.test_ledger_spool import (
    OPENING_MICROS,
    PER_REQUEST_MICROS,
    _config,
    _ledger_now,
    _wait_until,
)
from tests.support.chat_load import ChatLoad
from tests.support.gateway import register_tenant
from tests.support.gateway_fleet import GatewayFleet
from tests.support.local_servers import own_servers
from tests.support.redis_cluster import RedisClusterNodes


@pytest.fixture
def cluster() -> Iterator[RedisClusterNodes]:
    yield from own_servers(RedisClusterNodes, "a Redis Cluster of the test's own (redis-server, redis-cli)")


@pytest.fixture
def durable_cluster() -> Iterator[RedisClusterNodes]:
    """A cluster that keeps what it holds when it is stopped whole and started again."""
    yield from own_servers(
        lambda: RedisClusterNodes(durable=True), "a Redis Cluster of the test's own (redis-server, redis-cli)"
    )


_INCR = Script("return redis.call('INCR', KEYS[1])")


async def test_the_counters_connection_follows_moved_answers_and_loads_scripts_a_node_lost(
    cluster: RedisClusterNodes,
) -> None:
    wire = ClusterWire([("127.0.0.1", cluster.ports[0])])
    try:
        keys = [f"mg:test:{{org{n}}}" for n in range(12)]
        for key in keys:
            assert await wire.script(_INCR, [key], []) == 1
        assert {wire.node_of(key) for key in keys} == {("127.0.0.1", cluster.master_of(k)) for k in keys}
        assert len({wire.node_of(key) for key in keys}) == 3  # twelve organizations spread on 3 masters
        # A stale map (every slot on one master): MOVED answers send each call where its slot lives.
        wrong = ("127.0.0.1", cluster.master_of(keys[0]))
        wire._slots = [wrong] * len(wire._slots)  # a map older than a failover
        for key in keys:
            assert await wire.script(_INCR, [key], []) == 2
            assert wire.node_of(key) == ("127.0.0.1", cluster.master_of(key))
        # A node that forgot its scripts (a restart, SCRIPT FLUSH) is sent the source once.
        with redis.Redis(port=cluster.master_of(keys[1])) as node:
            node.script_flush()
        assert await wire.script(_INCR, [keys[1]], []) == 3
    finally:
        wire.close()


def test_a_master_killed_under_two_gateways_fails_over_and_the_books_balance(
    tmp_path: Path, fresh_pg_url: str, cluster: RedisClusterNodes
) -> None:
    nodes = ", ".join(f'"{node}"' for node in cluster.nodes[:2])  # the others are learnt from these
    config = _config(
        tmp_path, fresh_pg_url, flush_interval=0.2, billing=f"[redis]\ncluster_nodes = [{nodes}]\n"
    )
    fleet = GatewayFleet(config, tmp_path, 2)
    try:
        fleet.start_all()
        hit = register_tenant(fleet.base_url(0))
        hit_master = cluster.master_of("mg:" + balance_key(_organization(fresh_pg_url, hit.email)))
        spared = register_tenant(fleet.base_url(1))
        while cluster.master_of("mg:" + balance_key(_organization(fresh_pg_url, spared.email))) == hit_master:
            spared = register_tenant(fleet.base_url(1))  # bounded in practice: 2 in 3 land elsewhere
        loads = [
            ChatLoad(fleet.base_url(0), hit.api_key),
            ChatLoad(fleet.base_url(1), hit.api_key),
            ChatLoad(fleet.base_url(1), spared.api_key),
        ]
        for load in loads:
            load.__enter__()
        try:
            assert _wait_until(lambda: all(len(load.served) >= 20 for load in loads)), "no load before"
            cluster.kill(hit_master)
            killed_at = time.monotonic()
            cluster.wait_for_failover("mg:" + balance_key(_organization(fresh_pg_url, hit.email)), hit_master)
            print(f"[cluster] replica promoted {time.monotonic() - killed_at:.1f} s after the kill")
            at_failover = [len(load.served) for load in loads]
            assert _wait_until(
                lambda: all(len(load.served) >= n + 50 for load, n in zip(loads, at_failover, strict=True))
            ), "not every gateway served after the failover"
        finally:
            for load in loads:
                load.__exit__()
    finally:
        problems = fleet.stop_all()
    logs = fleet.logs()
    assert problems == [], {name: log[-3000:] for name, log in logs.items()}
    # While the organization's master was being replaced it could not be counted: 503, nothing else. The
    # organization on another master was served throughout.
    assert set(loads[0].refused) | set(loads[1].refused) <= {503}, (loads[0].refused, loads[1].refused)
    assert loads[2].refused == []
    counts = [(len(load.served), len(load.refused)) for load in loads]
    print(f"[cluster] (served, refused) by load: {counts}")
    for tenant, served in ((hit, loads[0].served + loads[1].served), (spared, loads[2].served)):
        rows, balance = _ledger_now(fresh_pg_url, tenant.email)
        ids = [request_id for request_id, _ in rows]
        assert len(ids) == len(set(ids)), "a request has two ledger rows"
        assert {request_id for request_id, cost in rows if cost} == set(served), "served and charged differ"
        assert all(cost in (0, PER_REQUEST_MICROS) for _, cost in rows)
        assert balance == OPENING_MICROS - PER_REQUEST_MICROS * len(served)
    assert not any("Traceback" in log for log in logs.values())


def _organization(storage_url: str, email: str) -> str:
    async def read() -> str:
        from modelgate.storage import open_database

        db = await open_database(storage_url)
        try:
            return await db.fetchval("SELECT organization_id FROM users WHERE email = $1", email)
        finally:
            await db.close()

    return asyncio.run(read())


async def test_the_bus_subscribes_again_on_another_node_when_its_node_dies(
    cluster: RedisClusterNodes,
) -> None:
    """Key revocations, credits and policy changes travel on the bus: a message published on any node reaches
    every node, so once the node it listened on is gone the bus listens on another one."""
    bus = RedisBus(RedisConfig(cluster_nodes=tuple(cluster.nodes[:1])))
    heard: list[str] = []
    bus.on("modelgate_test", heard.append)
    await bus.start()
    try:
        assert await _heard(cluster, heard, "before"), "the bus heard nothing"
        pubsub = bus._pubsub  # the connection it listens on now
        assert isinstance(pubsub, ClusterPubSub) and pubsub.node is not None
        cluster.kill(int(pubsub.node.port))
        assert await _heard(cluster, heard, "after"), "the bus heard nothing once its node died"
    finally:
        await bus.close()


async def _heard(cluster: RedisClusterNodes, heard: list[str], text: str, within: float = 30.0) -> bool:
    """Publish `text` on a live node until the bus hears it (a subscription is not seen from outside)."""
    deadline = asyncio.get_running_loop().time() + within
    while text not in heard:
        if asyncio.get_running_loop().time() > deadline:
            return False
        with contextlib.suppress(redis.RedisError):
            with redis.Redis(port=cluster.live_ports()[0], socket_timeout=1) as client:
                client.publish("modelgate_test", text)
        await asyncio.sleep(0.1)  # the next try, bounded by the deadline
    return True


async def test_a_dead_process_is_reclaimed_on_every_shard_and_a_batch_sent_again_applies_once(
    cluster: RedisClusterNodes,
) -> None:
    config = RedisConfig(cluster_nodes=tuple(cluster.nodes[:1]))
    dead, live = RedisCounters(cluster_client(config)), RedisCounters(cluster_client(config))
    organizations = [f"org_reclaim{n}" for n in range(12)]
    counters = [balance_key(organization) for organization in organizations]
    assert len({cluster.master_of("mg:" + counter) for counter in counters}) == 3  # on every master

    async def opening() -> MoneyState:
        return MoneyState(10_000, True)

    try:
        for counter in counters:
            admitted = await dead.admit_request(None, [], [MoneyAsk(counter, 700, False, 0, opening)])
            assert admitted.refusal == Refusal.NONE
        assert [await live.money(counter) for counter in counters] == [(10_000, 700)] * 12
        await live.reclaim(dead.process)  # it died holding them: released in every organization's slot
        assert [await live.money(counter) for counter in counters] == [(10_000, 0)] * 12
        # A settlement batch whose answer was lost is sent again whole: each slot applies its part once.
        names = ["mg:" + counter for counter in counters]
        batch: list[int | str] = [live.process, 1]
        for _ in names:
            batch += ("s", 0, -100)
        for _ in range(2):
            await live._complete([*names, "mg:applied"], batch)
        assert [await live.money(counter) for counter in counters] == [(9_900, 0)] * 12
    finally:
        await live.close()
        if dead._wire is not None:
            dead._wire.close()


async def test_a_slot_being_moved_is_followed_with_asking_on_the_node_it_moves_to(
    cluster: RedisClusterNodes,
) -> None:
    """While a slot migrates, its old master answers ASK for a key it no longer holds: the call goes once to
    the new master after ASKING (which never ran the script: it is sent the source, after ASKING again)."""
    key = "mg:test:{org_moving}"
    source = cluster.master_of(key)
    target = next(port for port in cluster.master_ports() if port != source)
    wire = ClusterWire([("127.0.0.1", source)])
    with redis.Redis(port=source) as old, redis.Redis(port=target) as new:
        slot = old.cluster("KEYSLOT", key)
        await wire.script(_INCR, ["mg:test:{org_staying}"], [])  # the map is read
        new.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", old.execute_command("CLUSTER", "MYID"))
        old.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", new.execute_command("CLUSTER", "MYID"))
        try:
            assert await wire.script(_INCR, [key], []) == 1
            assert wire.node_of(key) == ("127.0.0.1", source)  # ASK moves one call, not the map
            asking = new.pipeline(transaction=False)  # one connection: ASKING, then the read
            assert asking.execute_command("ASKING").get(key).execute()[1] == b"1"
        finally:
            wire.close()
            for node in (old, new):
                node.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")


async def test_a_slot_released_while_its_master_is_failed_over_is_released_on_the_promoted_replica(
    cluster: RedisClusterNodes,
) -> None:
    """A realtime session that ends while its organization's master is down cannot release its slot then:
    the release is kept and made by the keeper once the replica is promoted (found by the conservation
    audit's cluster failover: the slot stayed held until its 6-hour safety TTL)."""
    counters = RedisCounters(cluster_client(RedisConfig(cluster_nodes=tuple(cluster.nodes[:1]))))
    key = "rt:o:{org_failover}"
    try:
        assert await counters.acquire(key, 1)
        assert not await counters.acquire(key, 1)  # the organization's one slot is held
        master = cluster.master_of("mg:" + key)
        with redis.Redis(port=master) as node:
            assert node.wait(1, 5000) == 1  # its replica holds the count
        cluster.kill(master)
        await counters.release(key)  # the session ended: no master answers for its slot
        promoted = cluster.wait_for_failover("mg:" + key, master)
        with redis.Redis(port=promoted) as node:
            assert node.get("mg:" + key) == b"1"  # the release did not reach Redis
            deadline = time.monotonic() + 30
            while node.get("mg:" + key) != b"0":
                assert time.monotonic() < deadline, "the slot is still held once the replica was promoted"
                with contextlib.suppress(redis.RedisError):
                    await counters.keep_once(ttl_seconds=20)  # the keeper's round
                await asyncio.sleep(0.1)  # the next round, bounded by the deadline
        assert await counters.acquire(key, 1)  # the slot is free for the next session
    finally:
        await counters.close()


async def test_a_whole_cluster_stopped_fails_as_an_unreachable_redis_and_its_kept_work_is_done_after(
    durable_cluster: RedisClusterNodes,
) -> None:
    """Every node down: redis-py's cluster client cannot read the slot map and raised RedisClusterException,
    which is no RedisError — the counters' keeper died of it (kept settlements and releases were never sent
    again: the conservation audit's degraded cluster outage never reconciled) and a realtime secret's mint
    answered 500. It is a ConnectionError: 503 as for a single Redis, the keeper goes on, and once the
    cluster is back the keeper does what it kept and the bus listens again."""
    config = RedisConfig(cluster_nodes=tuple(durable_cluster.nodes[:1]))
    client = cluster_client(config)
    counters = RedisCounters(cluster_client(config))
    bus = RedisBus(config)
    heard: list[str] = []
    bus.on("modelgate_test", heard.append)
    key = "rt:o:{org_whole}"
    try:
        await counters.start(heartbeat_seconds=0.2)
        await bus.start()
        assert await _heard(durable_cluster, heard, "before"), "the bus heard nothing"
        assert await counters.acquire(key, 1)
        assert await client.get("mg:" + key) == b"1"
        durable_cluster.stop()
        with pytest.raises(RedisConnectionError):
            await client.get("mg:" + key)
        with pytest.raises(RedisConnectionError):
            await counters.keep_once(ttl_seconds=1)  # what the keeper meets in every round meanwhile
        with pytest.raises(ServiceUnavailable):
            await counters.acquire("rt:o:{org_other}", 1)  # 503, as with one Redis down
        await counters.release(key)  # a session ends meanwhile: kept
        await asyncio.to_thread(durable_cluster.start_again)
        deadline = time.monotonic() + 30
        while await _count(client, "mg:" + key) != b"0":
            assert time.monotonic() < deadline, "the keeper never released the kept slot"
            await asyncio.sleep(0.1)  # the keeper's next rounds, bounded by the deadline
        assert await _heard(durable_cluster, heard, "after"), "the bus heard nothing once it was back"
    finally:
        await bus.close()
        await counters.close()
        await client.aclose()


async def _count(client: RedisCluster, name: str) -> bytes | None:
    with contextlib.suppress(redis.RedisError):
        return await client.get(name)
    return None
