"""Measuring one target: latency and streaming TTFB at one connection, then rps, CPU, core use and RSS."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from load_generators import LoadGenerator
from measurements import check_answers, sequential
from proc_stats import (
    core_times,
    cpu_by_process,
    cpu_seconds,
    foreign_cpu,
    process_tree,
    rss_mb,
    wait_for_quiet,
)
from report import TargetResult
from workload import chat_body, raw_request

WARMUP_REQUESTS = 200
WARMUP_LOAD_SECONDS = 2.0
QUIET_WAIT_SECONDS = 30.0  # how long to wait for other processes (e.g. a test run) to calm down


@dataclass(frozen=True, slots=True)
class Plan:
    """How to measure: load size and length, sample counts, and the core sets."""

    connections: int
    duration: float
    samples: int
    stream_samples: int
    proxy_cpus: set[int]
    load_cpus: set[int]


def _settle(name: str, phase: str) -> None:
    if not wait_for_quiet(set(process_tree(os.getpid())), timeout=QUIET_WAIT_SECONDS):
        print(
            f"note: other processes kept the machine busy before the {phase} run of {name}", file=sys.stderr
        )


def _busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    return (after[0] - before[0]) / max(1, after[1] - before[1])


def measure(
    name: str,
    port: int,
    pids_of: Callable[[], list[int]] | None,
    plan: Plan,
    load: LoadGenerator,
    api_key: str,
) -> TargetResult:
    """All the numbers of one row of the table; `pids_of` gives the proxy's processes (None: direct)."""
    print(f"measuring {name} on port {port} ...", file=sys.stderr, flush=True)
    plain = raw_request("127.0.0.1", port, chat_body(), api_key)
    stream = raw_request("127.0.0.1", port, chat_body(stream=True), api_key)
    check_answers(name, port, plain, stream)
    sequential(port, plain, WARMUP_REQUESTS)
    load.run(port, plan.connections, min(WARMUP_LOAD_SECONDS, plan.duration))  # fills connection pools
    _settle(name, "latency")
    latency = sequential(port, plain, plan.samples)
    streaming = sequential(port, stream, plan.stream_samples)
    _settle(name, "rps")

    pids = pids_of() if pids_of else []
    cpu_before = cpu_seconds(pids)
    proxy_before, load_before = core_times(plan.proxy_cpus), core_times(plan.load_cpus)
    everyone_before = cpu_by_process()
    result = load.run(port, plan.connections, plan.duration)
    everyone_after = cpu_by_process()
    proxy_after, load_after = core_times(plan.proxy_cpus), core_times(plan.load_cpus)
    cpu_used = cpu_seconds(pids) - cpu_before
    others = foreign_cpu(everyone_before, everyone_after, set(process_tree(os.getpid())))

    return TargetResult(
        name=name,
        rps=result.rps,
        p50_ms=latency.p(50),
        p99_ms=latency.p(99),
        ttfb_p50_ms=streaming.ttfb(50),
        cpu_s_per_1k=cpu_used / result.requests * 1000 if pids and result.requests else None,
        rss_mb=max(rss_mb(pid) for pid in pids) if pids else None,
        errors=result.errors + latency.errors + streaming.errors,
        proxy_core_busy=_busy(proxy_before, proxy_after) if pids else None,
        load_core_busy=_busy(load_before, load_after),
        other_cores=others / result.seconds if result.seconds else 0.0,
    )
