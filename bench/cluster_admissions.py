"""Admissions per second against a Redis Cluster of 1, 3 and 6 shards (issue #37): the counters' request
script (`RedisCounters.admit_request`: the request id claim, the key's and the organization's RPM windows,
the balance reservation) run by `--clients` processes for `--orgs` organizations, so they spread over the
shards. Each shard is one master without replicas (`redis-server --cluster-enabled yes`, started here).

Two figures per shard count:
- admissions/s reached: what this machine's client processes got through (bounded by their CPU and the
  cores the shards share with them: on 2 cores, more shards cannot add throughput here);
- the Redis CPU an admission costs (INFO commandstats, µs per EVALSHA on the masters) and the ceiling it
  gives: 1e6 / µs per admission per shard core, times the shards, the figure that grows with shards when
  each master has a core of its own.

    PYTHONPATH=. python bench/cluster_admissions.py [--shards 1 3 6] [--seconds 10] [--clients 2]

Writes the table to stdout and, with --out, to a Markdown file (bench/results/cluster-admissions.md).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import secrets
import time
from pathlib import Path

import redis

from modelgate.config.schema import RedisConfig
from modelgate.domain.accounts import balance_key, org_rpm_window, org_tag
from modelgate.domain.counters import MoneyAsk, MoneyState, Refusal
from modelgate.domain.redis_counters import RedisCounters
from modelgate.infra.redis_client import cluster_client
from tests.support.redis_cluster import RedisClusterNodes

BALANCE = 10**15  # never refused for money: every admission reserves
RESERVE = 1_000
_SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter per client (no forked event loop)


async def _admit(nodes: list[str], orgs: list[str], seconds: float, concurrency: int) -> int:
    client = cluster_client(RedisConfig(cluster_nodes=tuple(nodes)))
    counters = RedisCounters(client)

    async def init() -> MoneyState:
        return MoneyState(BALANCE, True)

    done = 0
    deadline = time.monotonic() + seconds

    async def worker(n: int) -> None:
        nonlocal done
        i = n
        while time.monotonic() < deadline:
            org = orgs[i % len(orgs)]
            i += concurrency
            windows = [(f"rpm:k:{org_tag(org)}:key", 1, 10**9), (org_rpm_window(org), 1, 10**9)]
            money = [MoneyAsk(balance_key(org), RESERVE, False, 0, init)]
            claim = f"rid:{org_tag(org)}:{secrets.token_hex(6)}"
            result = await counters.admit_request(claim, windows, money)
            assert result.refusal == Refusal.NONE, result
            done += 1

    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    await counters.close()
    await client.aclose()
    return done


def _client(
    nodes: list[str], orgs: list[str], seconds: float, concurrency: int, out: multiprocessing.Queue
) -> None:
    out.put(asyncio.run(_admit(nodes, orgs, seconds, concurrency)))


def _evalsha(port: int) -> tuple[int, float]:
    with redis.Redis(port=port) as client:
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), float(stats.get("usec", 0))


def run(shards: int, seconds: float, clients: int, orgs: int, concurrency: int) -> dict:
    with RedisClusterNodes(masters=shards, replicas=0) as cluster:
        names = [f"org_bench{n:05d}" for n in range(orgs)]
        # A warm-up builds every counter first (a build is not an admission).
        for warm in (True, False):
            for port in cluster.ports:
                with redis.Redis(port=port) as node:
                    node.config_resetstat()
            queue = _SPAWN.Queue()
            share = [names[i::clients] for i in range(clients)]
            took = 2.0 if warm else seconds
            processes = [
                _SPAWN.Process(target=_client, args=(cluster.nodes, part, took, concurrency, queue))
                for part in share
            ]
            started = time.monotonic()
            for process in processes:
                process.start()
            answers = [queue.get(timeout=took + 30) for _ in processes]
            if failed := [a for a in answers if isinstance(a, BaseException)]:
                raise RuntimeError(f"a client process failed: {failed[0]!r}")
            admitted = sum(answers)
            for process in processes:
                process.join(30)
            elapsed = time.monotonic() - started
        stats = [_evalsha(port) for port in cluster.ports]
    calls = sum(c for c, _ in stats)
    usec = sum(u for _, u in stats)
    per_call = usec / calls if calls else 0.0
    busiest = max(stats, key=lambda s: s[0])
    return {
        "shards": shards,
        "admitted": admitted,
        "per_second": admitted / elapsed,
        "usec_per_admission": per_call,
        "ceiling": shards * 1e6 / per_call if per_call else 0.0,
        "busiest_share": busiest[0] / calls if calls else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 3, 6])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--orgs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [run(n, args.seconds, args.clients, args.orgs, args.concurrency) for n in args.shards]
    lines = [
        f"{args.clients} client processes x {args.concurrency} concurrent admissions,"
        f" {args.orgs} organizations, {args.seconds:g} s per shard count,"
        f" {multiprocessing.cpu_count()} cores shared by clients and shards",
        "",
        "| shards | admissions/s reached | Redis µs per admission | ceiling (a core per shard)"
        " | busiest shard's share |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['shards']} | {row['per_second']:,.0f} | {row['usec_per_admission']:.1f} |"
            f" {row['ceiling']:,.0f}/s | {row['busiest_share']:.0%} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
