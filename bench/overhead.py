"""Gateway overhead benchmark: the upstream called directly vs a bare aiohttp passthrough vs modelgate.

    python bench/overhead.py [--duration 10] [--connections 32] [--workers 1]
    python bench/overhead.py --production     # PostgreSQL (a throwaway database) + Redis on 127.0.0.1
    python bench/overhead.py --matrix --duration 5   # floor / embedded / production side by side (matrix.py)
    python bench/overhead.py --soak 10 --production  # 10 minutes of mixed traffic, the RSS curve (soak.py)
    python bench/overhead.py --long-streams 1000,3000 --rounds 2  # LLM-like streams (long_streams.py)

Starts a fast fake upstream, the bare passthrough and the real gateway on 127.0.0.1, measures all three
with the same ~1 KB chat request, prints one table, and stops every process it started by PID. With two
or more cores the proxy under test gets the first core to itself; the upstream, the load generator (wrk)
and the latency client share the second. With `--workers N > 1` the proxies run N processes on every core.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from load_generators import LoadGenerator
from proc_stats import process_tree, rss_mb
from production import production_database
from profile_summary import read_profile, render
from profiling import PY_SPY_HINT, find_py_spy, is_raw, start_profiler
from report import TargetResult, render_diagnostics, render_table, render_targets
from run_control import core_layout, log_problems, started_services, timeout_alarm
from target_run import QUIET_WAIT_SECONDS, WARMUP_LOAD_SECONDS, Plan, measure
from workload import chat_body


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=10.0, help="seconds of load per target (default 10)"
    )
    parser.add_argument("--connections", type=int, default=32, help="connections of the rps run (default 32)")
    parser.add_argument(
        "--workers", type=int, default=1, help="gateway and passthrough processes (default 1); >1: no pinning"
    )
    parser.add_argument(
        "--samples", type=int, default=2000, help="sequential requests for p50/p99 (default 2000)"
    )
    parser.add_argument(
        "--stream-samples", type=int, default=500, help="sequential streams for the TTFB (default 500)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure every target this many times and report each target's quietest round (default 1)",
    )
    parser.add_argument(
        "--load-generator",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="wrk when installed (auto), or the Python fallback",
    )
    parser.add_argument(
        "--disable-plugins",
        metavar="A,B",
        default="",
        help="gateway plugins to switch off (config plugins.disabled), to see what governance costs",
    )
    parser.add_argument(
        "--production",
        action="store_true",
        help="production mode: the gateway on a throwaway PostgreSQL database and Redis "
        "(MODELGATE_BENCH_PG, default postgresql://postgres@127.0.0.1:5432/postgres; MODELGATE_BENCH_REDIS, "
        "default redis://127.0.0.1:6379/0)",
    )
    parser.add_argument(
        "--matrix",
        action="store_true",
        help="one run, one table: the floor, embedded mode and production mode side by side for chat at 1 "
        "and --connections connections and streaming at --connections, then production with --workers "
        "(at least 2) and Redis commands per request",
    )
    parser.add_argument(
        "--soak",
        type=float,
        metavar="MINUTES",
        help="instead of measuring: mixed chat/stream/embeddings traffic on the gateway (production mode "
        "with --production) for MINUTES, its RSS sampled every ~10 s; prints the curve and the slope",
    )
    parser.add_argument(
        "--long-streams",
        metavar="N,N",
        help="instead of the short cases: LLM-like streams held at N concurrent (e.g. 1000,3000,10000) on "
        "the direct provider, the floor and the gateway (default config); see bench/long_streams.py",
    )
    parser.add_argument("--ttfb-ms", type=float, default=200.0, help="long streams: first byte (default 200)")
    parser.add_argument(
        "--chunk-delay-ms", type=float, default=50.0, help="long streams: between chunks (default 50)"
    )
    parser.add_argument("--chunks", type=int, default=40, help="long streams: content chunks (default 40)")
    parser.add_argument(
        "--targets", default="direct,floor,gateway", help="long streams: which targets (default all three)"
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="after measuring, record modelgate under the same load with py-spy into FILE: "
        ".svg flamegraph, .json speedscope, anything else raw collapsed stacks (summarised in the output)",
    )
    args = parser.parse_args(argv)
    if min(args.workers, args.connections, args.rounds) < 1 or args.duration <= 0:
        parser.error("--workers, --connections and --rounds must be at least 1, --duration above 0")
    if args.soak is not None and args.soak <= 0:
        parser.error("--soak takes a number of minutes above 0")
    if args.matrix and (args.soak is not None or args.profile or args.production):
        parser.error(
            "--matrix measures both modes itself; it does not combine with --soak, --profile, --production"
        )
    if args.profile and find_py_spy() is None:
        parser.error(PY_SPY_HINT)
    return args


def profile_gateway(pid: int, port: int, args: argparse.Namespace, load: LoadGenerator) -> None:
    """One extra, unmeasured load run on the gateway while py-spy samples it from the load core."""
    path = Path(args.profile).resolve()
    started = time.monotonic()
    print(f"profiling modelgate with py-spy into {path} ...", file=sys.stderr, flush=True)
    with start_profiler(pid, path, args.duration, load.cpus) as spy:
        load.run(port, args.connections, args.duration)
        spy.wait(timeout=args.duration + 30)
    if spy.returncode != 0:
        took = time.monotonic() - started
        print(f"note: py-spy exited with {spy.returncode} after {took:.0f}s", file=sys.stderr)


def print_report(
    args: argparse.Namespace,
    results: list[TargetResult],
    plan: Plan,
    load_name: str,
    gateway_rss_total: float,
    problems: list[str],
) -> None:
    """The run's conditions, the table, the targets and the diagnostics, on stdout."""
    cores = ",".join(map(str, sorted(plan.proxy_cpus))), ",".join(map(str, sorted(plan.load_cpus)))
    print(
        f"\nmodelgate overhead: {args.duration:g}s per rps run, {args.connections} connections, "
        f"{len(chat_body())} B chat body, load: {load_name}, workers: {args.workers}"
        + (f", plugins disabled: {args.disable_plugins}" if args.disable_plugins else "")
        + "\n"
        f"cores: proxy under test {cores[0]}; upstream + load generator + latency client {cores[1]}; "
        f"python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}\n"
        f"p50/p99@1: {args.samples} sequential requests on one keep-alive connection; "
        f"TTFB: time to the first SSE event, p50 of {args.stream_samples} streams"
        + (f"; quietest of {args.rounds} rounds per target" if args.rounds > 1 else "")
        + "\n"
    )
    print(render_table(results, args.connections))
    print()
    print(render_targets(results, args.connections))
    if args.workers > 1:
        print(
            f"  (RSS: the largest gateway process; all {args.workers} workers + parent: "
            f"{gateway_rss_total:.1f} MB)"
        )
    print()
    print(render_diagnostics(results, *cores, shared_cores=bool(plan.proxy_cpus & plan.load_cpus)))
    if problems:
        print("\ngateway log warnings/errors (first few):")
        print("\n".join(f"  {line}" for line in problems))
    if args.profile:
        print(f"\npy-spy profile of modelgate under the same load (an extra, unmeasured run): {args.profile}")
        if is_raw(Path(args.profile)):
            print(render(read_profile(Path(args.profile)), top=12))


def run(args: argparse.Namespace) -> int:
    """Start everything, measure the three targets, stop everything, print the report."""
    per_target = args.duration + WARMUP_LOAD_SECONDS + 2 * QUIET_WAIT_SECONDS + 30
    budget = 3 * args.rounds * per_target + (args.duration + 30 if args.profile else 0) + 90
    signal.signal(signal.SIGALRM, timeout_alarm)
    signal.alarm(int(budget))
    proxy_cpus, load_cpus = core_layout(args.workers)
    plan = Plan(args.connections, args.duration, args.samples, args.stream_samples, proxy_cpus, load_cpus)
    with tempfile.TemporaryDirectory(prefix="modelgate-bench-") as temp, contextlib.ExitStack() as stack:
        # Entered first, left last: the database outlives the processes using it.
        storage_url = stack.enter_context(production_database()) if args.production else None
        log_dir = Path(temp)
        services = started_services(
            stack,
            args,
            log_dir=log_dir,
            lifetime=budget + 30,
            workers=args.workers,
            proxy_cpus=proxy_cpus,
            load_cpus=load_cpus,
            storage_url=storage_url,
        )
        gateway = services.gateway
        assert gateway is not None
        os.sched_setaffinity(0, load_cpus)  # our latency client shares the load core
        body_file = log_dir / "chat-body.json"
        body_file.write_bytes(chat_body())
        load = LoadGenerator(args.load_generator, load_cpus, body_file, services.api_key)
        passthrough_pids = [p.pid for p in services.passthroughs]
        targets: list[tuple[str, int, Callable[[], list[int]] | None]] = [
            ("direct", services.upstream_port, None),
            ("passthrough", services.passthrough_port, lambda: passthrough_pids),
            ("modelgate", services.gateway_port, lambda: process_tree(gateway.pid)),
        ]
        rounds = [
            [measure(name, port, pids_of, plan, load, services.api_key) for name, port, pids_of in targets]
            for _ in range(args.rounds)
        ]
        # Each target's round with the least CPU used by other processes: the least disturbed numbers.
        results = [min(column, key=lambda r: r.other_cores) for column in zip(*rounds, strict=True)]
        if args.profile:
            profile_gateway(gateway.pid, services.gateway_port, args, load)
        gateway_rss_total = sum(rss_mb(pid) for pid in process_tree(gateway.pid))
        problems = log_problems(gateway.log_path)
    signal.alarm(0)
    print_report(args, results, plan, load.name, gateway_rss_total, problems)
    return 0


def main() -> int:
    args = parse_args()
    if args.long_streams:
        from long_streams import run_long_streams

        return run_long_streams(args)
    if args.matrix:
        from matrix import run_matrix

        return run_matrix(args)
    if args.soak is not None:
        from soak import run_soak

        return run_soak(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
