"""The side-by-side matrix: the floor, embedded mode and production mode for chat and streaming cases.

Three phases, each with its own processes, all stopped by PID before the next starts:
1. embedded: the fake upstream (the "direct" reference), the bare passthrough (the floor) and the gateway
   on SQLite, one process each, the proxy alone on the first core;
2. production: the gateway on a throwaway PostgreSQL database and the machine's Redis, same layout, with
   the Redis commands it sends counted (INFO commandstats) over its measured runs;
3. production with N >= 2 workers sharing every core: requests/s per core.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from load_generators import LoadGenerator
from matrix_report import render_matrix
from measurements import Sequential, check_answers, sequential
from proc_stats import process_tree, rss_mb
from production import (
    command_delta,
    foreign_redis_clients,
    production_database,
    redis_command_calls,
)
from run_control import core_layout, log_problems, started_services, timeout_alarm
from services import Services
from target_run import QUIET_WAIT_SECONDS, WARMUP_LOAD_SECONDS, LoadedRun, Plan, loaded_run, settle
from workload import chat_body, raw_request

# Our own INFO calls show up in commandstats too; they are not the gateway's.
_OUR_REDIS_COMMANDS = frozenset({"info"})


@dataclass(frozen=True, slots=True)
class Case:
    """One row of the matrix: a request shape at a number of connections."""

    name: str
    connections: int
    stream: bool


@dataclass(frozen=True, slots=True)
class CaseRun:
    """One case on one target: the measured load run, and the latencies a probe client saw at that load."""

    run: LoadedRun
    latency: Sequential


@dataclass(slots=True)
class RedisTally:
    """Redis commands seen during the measured runs of one target, and the requests those runs served."""

    calls: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    foreign_clients: int = 0  # the most other Redis clients seen connected at a snapshot

    def snapshot(self, gateway_pids: list[int]) -> dict[str, int]:
        """Command calls so far, noting any Redis clients that are not the gateway's."""
        self.foreign_clients = max(self.foreign_clients, foreign_redis_clients(gateway_pids))
        return redis_command_calls()

    def add(self, before: dict[str, int], after: dict[str, int], requests: int) -> None:
        for name, calls in command_delta(before, after).items():
            if name not in _OUR_REDIS_COMMANDS:
                self.calls[name] = self.calls.get(name, 0) + calls
        self.requests += requests


@dataclass(slots=True)
class MatrixResult:
    """Every measured run, by target name then case name, and what the report needs besides."""

    cases: list[Case]
    runs: dict[str, dict[str, CaseRun]] = field(default_factory=dict)
    rss_total: dict[str, float] = field(default_factory=dict)  # all processes of a multi-worker gateway
    redis: RedisTally = field(default_factory=RedisTally)
    problems: list[str] = field(default_factory=list)
    workers: int = 2


def matrix_cases(connections: int) -> list[Case]:
    """chat at one connection and at `connections`, streaming at `connections`."""
    return [
        Case("chat @1", 1, stream=False),
        Case(f"chat @{connections}", connections, stream=False),
        Case(f"stream @{connections}", connections, stream=True),
    ]


def _latency_at(
    port: int, case: Case, plan: Plan, load: LoadGenerator, body: Path, request: bytes
) -> Sequential:
    """Sequential requests on one connection for the run's duration while wrk keeps the case's other
    connections busy: the latency one client sees at that load (wrk's own percentiles are corrected for
    coordinated omission, which turns any stall into made-up samples)."""
    if case.connections == 1:
        return sequential(port, request, seconds=plan.duration)
    with ThreadPoolExecutor(1) as pool:
        others = pool.submit(load.run, port, case.connections - 1, plan.duration, body)
        probe = sequential(port, request, seconds=plan.duration)
        others.result()
    return probe


def _measure_target(
    name: str,
    port: int,
    pids_of: Callable[[], list[int]],
    cases: list[Case],
    plan: Plan,
    load: LoadGenerator,
    bodies: dict[bool, Path],
    api_key: str,
    redis: RedisTally | None = None,
) -> dict[str, CaseRun]:
    """Warm up, settle and measure every case on one target (the load run, then the latency probe);
    tally Redis commands over the load runs when asked."""
    requests = {
        stream: raw_request("127.0.0.1", port, chat_body(stream=stream), api_key) for stream in bodies
    }
    check_answers(name, port, requests[False], requests[True])
    runs = {}
    for case in cases:
        print(f"measuring {name}: {case.name} on port {port} ...", file=sys.stderr, flush=True)
        body = bodies[case.stream]
        load.run(port, case.connections, min(WARMUP_LOAD_SECONDS, plan.duration), body)
        settle(name, case.name)
        pids = pids_of()
        before = redis.snapshot(pids) if redis else {}
        run = loaded_run(pids, port, plan, load, case.connections, body)
        if redis:
            redis.add(before, redis.snapshot(pids), run.load.requests)
        latency = _latency_at(port, case, plan, load, body, requests[case.stream])
        runs[case.name] = CaseRun(run, latency)
    return runs


def _gateway_pids(services: Services) -> Callable[[], list[int]]:
    gateway = services.gateway
    assert gateway is not None
    return lambda: process_tree(gateway.pid)


def _phase_log(result: MatrixResult, services: Services, label: str) -> None:
    assert services.gateway is not None
    result.problems += [f"[{label}] {line}" for line in log_problems(services.gateway.log_path)]


def run_matrix(args: argparse.Namespace) -> int:
    """Measure the three phases and print the matrix."""
    cases = matrix_cases(args.connections)
    workers = max(2, args.workers)
    per_run = 2 * args.duration + WARMUP_LOAD_SECONDS + QUIET_WAIT_SECONDS + 10
    budget = per_run * (4 * len(cases) + 2) + 4 * 90
    signal.signal(signal.SIGALRM, timeout_alarm)
    signal.alarm(int(budget))
    proxy_cpus, load_cpus = core_layout(1)
    all_cpus = proxy_cpus | load_cpus
    os.sched_setaffinity(0, load_cpus)  # the latency probe shares the load core
    result = MatrixResult(cases, workers=workers)
    with tempfile.TemporaryDirectory(prefix="modelgate-bench-") as temp:
        root = Path(temp)
        bodies = {False: root / "chat-body.json", True: root / "stream-body.json"}
        bodies[False].write_bytes(chat_body())
        bodies[True].write_bytes(chat_body(stream=True))

        def phase(stack: contextlib.ExitStack, label: str, n: int, storage_url: str | None) -> Services:
            (log_dir := root / label).mkdir()
            return started_services(
                stack,
                args,
                log_dir=log_dir,
                lifetime=budget + 30,
                workers=n,
                proxy_cpus=proxy_cpus if n == 1 else all_cpus,
                load_cpus=load_cpus,
                storage_url=storage_url,
                with_passthrough=storage_url is None,
            )

        with contextlib.ExitStack() as stack:
            services = phase(stack, "embedded", 1, None)
            load = LoadGenerator(args.load_generator, load_cpus, bodies[False], services.api_key)
            passthrough_pids = [p.pid for p in services.passthroughs]
            targets = [
                ("direct", services.upstream_port, list),
                ("floor", services.passthrough_port, lambda: passthrough_pids),
                ("embedded", services.gateway_port, _gateway_pids(services)),
            ]
            plan = Plan(args.connections, args.duration, 0, 0, proxy_cpus, load_cpus)
            for name, port, pids_of in targets:
                result.runs[name] = _measure_target(
                    name, port, pids_of, cases, plan, load, bodies, services.api_key
                )
            _phase_log(result, services, "embedded")

        with contextlib.ExitStack() as database:
            storage_url = database.enter_context(production_database())  # outlives the gateways using it
            with contextlib.ExitStack() as stack:
                services = phase(stack, "production", 1, storage_url)
                load = LoadGenerator(args.load_generator, load_cpus, bodies[False], services.api_key)
                port, pids_of = services.gateway_port, _gateway_pids(services)
                result.runs["production"] = _measure_target(
                    "production", port, pids_of, cases, plan, load, bodies, services.api_key, result.redis
                )
                _phase_log(result, services, "production")

            with contextlib.ExitStack() as stack:
                name = f"production x{workers}"
                services = phase(stack, "workers", workers, storage_url)
                load = LoadGenerator(args.load_generator, load_cpus, bodies[False], services.api_key)
                port, pids_of = services.gateway_port, _gateway_pids(services)
                shared = Plan(args.connections, args.duration, 0, 0, all_cpus, load_cpus)
                result.runs[name] = _measure_target(
                    name, port, pids_of, cases[1:], shared, load, bodies, services.api_key
                )
                result.rss_total[name] = sum(rss_mb(pid) for pid in pids_of())
                _phase_log(result, services, name)
        signal.alarm(0)
    print(render_matrix(result, args, load.name))
    return 0
