"""The conservation mix on a Redis Cluster of the run's own (issue #37): 3 masters with a replica each, the
gateways configured with `[redis] cluster_nodes`, and at the mix's outage point either the master serving
the busiest organization's slot SIGKILLed ("cluster-failover": the cluster promotes its replica, the
gateways follow it, and every invariant holds as through a Sentinel failover), or the whole cluster
stopped for the outage's seconds and started again with what it held ("cluster-outage", the gateways in
`[redis] outage = "degraded"`: every invariant as through a single Redis's outage)."""

from __future__ import annotations

import asyncio
import time

from modelgate.domain.accounts import balance_key
from modelgate.storage import open_database
from tests.support.conservation_traffic import OutageRecord
from tests.support.gateway_fleet import GatewayFleet
from tests.support.money_books import REDIS_PREFIX
from tests.support.redis_cluster import RedisClusterNodes

FAILOVER, OUTAGE = "cluster-failover", "cluster-outage"


def cluster_redis_toml(cluster: RedisClusterNodes, chaos: str) -> str:
    """The `[redis]` lines of gateways on `cluster` (two nodes named: the others are learnt from them)."""
    nodes = "cluster_nodes = [" + ", ".join(f'"{node}"' for node in cluster.nodes[:2]) + "]\n"
    return nodes + ('outage = "degraded"\n' if chaos == OUTAGE else "")


class WholeCluster:
    """A Redis Cluster as the mix's degraded-mode outage stops and starts it: every node at once."""

    def __init__(self, cluster: RedisClusterNodes) -> None:
        self.cluster = cluster

    def stop(self) -> None:
        self.cluster.stop()

    def start(self) -> None:
        self.cluster.start_again()


def cluster_of_the_run(chaos: str) -> RedisClusterNodes | None:
    """The cluster a setup with `chaos` starts (durable when it is stopped whole), None for other setups."""
    return RedisClusterNodes(durable=chaos == OUTAGE) if chaos in (FAILOVER, OUTAGE) else None


def cluster_chaos(cluster: RedisClusterNodes, chaos: str) -> RedisClusterNodes | WholeCluster:
    """What the mix's outage acts on: the cluster (a master killed) or the whole cluster (stopped)."""
    return WholeCluster(cluster) if chaos == OUTAGE else cluster


async def busiest(storage_url: str, organizations: list[str]) -> str:
    """The organization with the most ledger rows so far (the first of those tied)."""
    db = await open_database(storage_url, pool_size=1)
    try:
        counts = [
            int(await db.fetchval("SELECT COUNT(*) FROM usage_ledger WHERE organization_id = $1", org))
            for org in organizations
        ]
    finally:
        await db.close()
    return organizations[counts.index(max(counts))]


async def cluster_failover(
    fleet: GatewayFleet,
    cluster: RedisClusterNodes,
    record: OutageRecord,
    storage_url: str,
    organizations: list[str],
    within: float,
) -> None:
    """SIGKILL the master of the busiest organization's slot mid-mix; the cluster promotes its replica,
    which the gateways follow. Like a Sentinel failover, nothing of that slot is admitted until then (503);
    the outage ends once every gateway finds Redis ready again."""
    record.served_from_shares = False
    organization = await busiest(storage_url, organizations)
    key = REDIS_PREFIX + balance_key(organization)
    master = await asyncio.to_thread(cluster.master_of, key)
    await asyncio.to_thread(cluster.kill, master)
    record.stopped_at = time.monotonic()
    record.begun.set()
    record.note = f"org{organizations.index(organization)}'s master :{master} killed"
    try:
        promoted = await asyncio.to_thread(cluster.wait_for_failover, key, master, within)
    except RuntimeError as exc:
        record.problems.append(f"the cluster promoted no replica of :{master} within {within} s: {exc}")
        return
    record.started_at = time.monotonic()
    record.note += f", replica :{promoted} promoted"
    if await fleet.redis_ready(within):
        record.reconciled_at = time.monotonic()
    else:
        record.problems.append(f"a gateway did not find the promoted master within {within} s")
