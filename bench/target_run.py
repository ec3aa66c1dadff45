"""Measuring one target: latency and streaming TTFB at one connection, then rps, CPU, core use and RSS."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from load_generators import LoadGenerator, LoadResult
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


@dataclass(frozen=True, slots=True)
class LoadedRun:
    """One measured load run on a target: what the load achieved and what the proxy spent on it."""

    load: LoadResult
    cpu_s_per_1k: float | None  # the proxy's CPU seconds per 1000 requests (None: no proxy process)
    rss_mb: float | None  # the largest proxy process after the run
    proxy_core_busy: float | None
    load_core_busy: float
    other_cores: float  # cores' worth of CPU used by processes not started by the benchmark


def settle(name: str, phase: str) -> None:
    """Wait (bounded) for other processes on the machine to calm down; say so if they do not."""
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
    settle(name, "latency")
    latency = sequential(port, plain, plan.samples)
    streaming = sequential(port, stream, plan.stream_samples)
    settle(name, "rps")

    run = loaded_run(pids_of() if pids_of else [], port, plan, load, plan.connections)
    return TargetResult(
        name=name,
        rps=run.load.rps,
        p50_ms=latency.p(50),
        p99_ms=latency.p(99),
        ttfb_p50_ms=streaming.ttfb(50),
        cpu_s_per_1k=run.cpu_s_per_1k,
        rss_mb=run.rss_mb,
        errors=run.load.errors + latency.errors + streaming.errors,
        proxy_core_busy=run.proxy_core_busy,
        load_core_busy=run.load_core_busy,
        other_cores=run.other_cores,
    )


def loaded_run(
    pids: list[int],
    port: int,
    plan: Plan,
    load: LoadGenerator,
    connections: int,
    body_file: Path | None = None,
) -> LoadedRun:
    """One measured load run on `port` with the proxy processes `pids` (empty: the upstream directly)."""
    cpu_before = cpu_seconds(pids)
    proxy_before, load_before = core_times(plan.proxy_cpus), core_times(plan.load_cpus)
    everyone_before = cpu_by_process()
    result = load.run(port, connections, plan.duration, body_file)
    everyone_after = cpu_by_process()
    proxy_after, load_after = core_times(plan.proxy_cpus), core_times(plan.load_cpus)
    cpu_used = cpu_seconds(pids) - cpu_before
    others = foreign_cpu(everyone_before, everyone_after, set(process_tree(os.getpid())))
    return LoadedRun(
        load=result,
        cpu_s_per_1k=cpu_used / result.requests * 1000 if pids and result.requests else None,
        rss_mb=max(rss_mb(pid) for pid in pids) if pids else None,
        proxy_core_busy=_busy(proxy_before, proxy_after) if pids else None,
        load_core_busy=_busy(load_before, load_after),
        other_cores=others / result.seconds if result.seconds else 0.0,
    )
