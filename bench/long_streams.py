"""The long-stream case: streams like an LLM's (a first byte after --ttfb-ms, then --chunks events
--chunk-delay-ms apart) held at 1,000-10,000 concurrent, against the provider directly, the floor (the bare
aiohttp passthrough, its connection cap lifted) and the gateway with its default configuration.

    python bench/overhead.py --long-streams 1000,3000 --duration 20 --rounds 2
    python bench/overhead.py --long-streams 10000 --chunk-delay-ms 1000 --chunks 10 --targets direct,gateway
    python bench/overhead.py --long-streams 1000,3000 --production   # the gateway on PostgreSQL and Redis

Per target and concurrency: streams/s (and its ratio to direct), time to first byte p50/p99 and what the
proxy added to it (against direct in the same round), the gap between pieces p99 and what was added, errors,
the proxy's CPU per 1,000 chunks (SSE events) relayed and its memory per open stream ((RSS with every
stream open - RSS idle) / streams), and for the gateway the worst event-loop lag its metric showed in the
window (read every second). Every round starts its own processes, on the short cases' core layout.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proc_stats import cpu_seconds, process_tree, rss_mb
from production import production_database
from run_control import core_layout, log_problems, started_services
from services import Services
from stream_clients import StreamStats, percentile, run_streams
from workload import chat_body, raw_request

TARGETS = ("direct", "floor", "gateway")


@dataclass(frozen=True, slots=True)
class StreamRun:
    """One target at one concurrency in one round."""

    target: str
    streams: int
    round: int
    stats: StreamStats
    cpu_seconds: float  # the proxy's, over the measured window (0 for direct)
    rss_idle_mb: float
    rss_open_mb: float
    loop_lag_ms: float = -1.0  # the gateway's worst event-loop lag in the window (its metric); -1: none


def raise_open_files_limit(needed: int) -> int:
    """This process's open-files limit raised to `needed` (the hard limit too, where allowed: as root) or at
    least to the hard limit; the children (upstream, floor, gateway) inherit it. Returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        with contextlib.suppress(ValueError, OSError):  # not privileged: the hard limit stays
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _pids(services: Services, target: str) -> Callable[[], list[int]]:
    if target == "gateway":
        gateway = services.gateway
        return lambda: process_tree(gateway.pid)
    if target == "floor":
        return lambda: [child.pid for child in services.passthroughs]
    return list


def _measure(
    services: Services, target: str, port: int, streams: int, args: argparse.Namespace, load_cpus: set[int]
) -> tuple[StreamStats, float, float, float, float]:
    pids_of = _pids(services, target)
    idle = sum(rss_mb(pid) for pid in pids_of())
    sampled: dict[str, float] = {}

    def window(start: float, end: float) -> None:
        time.sleep(max(0.0, start - time.monotonic()))  # the benchmark's own clock: sample at the window
        sampled["cpu0"] = cpu_seconds(pids_of())
        if target == "gateway":  # its lag metric is the worst of the last 2 s: read it every second
            while time.monotonic() < end - 1.5:
                time.sleep(1.0)
                sampled["lag"] = max(sampled.get("lag", 0.0), _loop_lag(port))
        time.sleep(max(0.0, end - 0.5 - time.monotonic()))
        sampled["rss"] = sum(rss_mb(pid) for pid in pids_of())  # every stream open
        time.sleep(max(0.0, end - time.monotonic()))
        sampled["cpu1"] = cpu_seconds(pids_of())

    request = raw_request("127.0.0.1", port, chat_body(stream=True), services.api_key)
    stream_seconds = args.ttfb_ms / 1000 + args.chunks * args.chunk_delay_ms / 1000
    stats = run_streams(
        port,
        streams=streams,
        request=request,
        ramp=max(2.0, streams / 2000),
        warmup=stream_seconds + 2.0,
        seconds=args.duration,
        cpus=load_cpus,
        on_window=window,
    )
    return stats, sampled["cpu1"] - sampled["cpu0"], idle, sampled["rss"], sampled.get("lag", -0.001) * 1000


def _loop_lag(port: int) -> float:
    """The gateway's `modelgate_event_loop_lag_seconds` (0 when it cannot be read)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("modelgate_event_loop_lag_seconds "):
            return float(line.split()[1])
    return 0.0


def _one_round(
    services: Services,
    targets: list[str],
    round_: int,
    streams: int,
    args: argparse.Namespace,
    load_cpus: set[int],
) -> list[StreamRun]:
    ports = {"direct": services.upstream_port, "floor": services.passthrough_port}
    ports["gateway"] = services.gateway_port
    runs = []
    for target in targets:
        print(f"round {round_}: {target} @ {streams} streams ...", file=sys.stderr, flush=True)
        stats, cpu, idle, rss, lag = _measure(services, target, ports[target], streams, args, load_cpus)
        runs.append(StreamRun(target, streams, round_, stats, cpu, idle, rss, lag))
    return runs


def run_long_streams(args: argparse.Namespace) -> int:
    """Measure every concurrency on every target, --rounds times, and print the table."""
    counts = [int(n) for n in args.long_streams.split(",") if n]
    targets = [t for t in args.targets.split(",") if t]
    if any(t not in TARGETS for t in targets) or not counts:
        raise SystemExit(f"--targets takes {','.join(TARGETS)}; --long-streams a list of counts")
    limit = raise_open_files_limit(2 * max(counts) + 2000)  # each stream: client and upstream connection
    if 2 * max(counts) + 100 > limit:
        raise SystemExit(f"the open-files hard limit {limit} is too low for {max(counts)} streams")
    proxy_cpus, load_cpus = core_layout(args.workers)
    pacing = ("--ttfb-ms", str(args.ttfb_ms), "--chunk-delay-ms", str(args.chunk_delay_ms))
    pacing += ("--chunks", str(args.chunks))
    runs: list[StreamRun] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="modelgate-streams-") as temp:
        for round_ in range(1, args.rounds + 1):
            for streams in counts:
                log_dir = Path(temp) / f"r{round_}-{streams}"
                log_dir.mkdir()
                with contextlib.ExitStack() as stack:
                    storage_url = stack.enter_context(production_database()) if args.production else None
                    services = started_services(
                        stack,
                        args,
                        log_dir=log_dir,
                        storage_url=storage_url,
                        lifetime=3600,
                        workers=args.workers,
                        proxy_cpus=proxy_cpus,
                        load_cpus=load_cpus,
                        with_passthrough="floor" in targets,
                        upstream_args=pacing,
                        passthrough_args=("--upstream-connections", "0"),
                    )
                    runs += _one_round(services, targets, round_, streams, args, load_cpus)
                    gateway_log = log_problems(services.gateway.log_path)
                    problems += [f"[r{round_} @{streams}] {line}" for line in gateway_log]
    print(render_long_streams(runs, args, proxy_cpus, load_cpus))
    if problems:
        print("\ngateway log warnings/errors:\n" + "\n".join(problems))
    return 0


def _errors(stats: StreamStats) -> str:
    """The error count, with its kinds when there are any: `57 (lost 50, 503 7)`."""
    if not stats.errors:
        return "0"
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(stats.kinds.items()))
    return f"{stats.errors} ({kinds})"


def render_long_streams(
    runs: list[StreamRun], args: argparse.Namespace, proxy_cpus: set[int], load_cpus: set[int]
) -> str:
    """One row per run; added latency against direct in the same round and concurrency."""
    direct = {(r.round, r.streams): r for r in runs if r.target == "direct"}
    lines = [
        f"\nlong streams: first byte after {args.ttfb_ms:g} ms, {args.chunks} chunks "
        f"{args.chunk_delay_ms:g} ms apart; {args.duration:g} s measured per run after a warm-up; "
        f"workers: {args.workers}; {'production (PostgreSQL + Redis)' if args.production else 'embedded'}; "
        f"proxy cores {sorted(proxy_cpus)}, upstream + clients {sorted(load_cpus)}",
        "",
        "| round | target | streams | streams/s | x direct | TTFB p50 / p99 ms | added p50 / p99 ms "
        "| gap p99 ms | added gap p99 ms | errors | CPU ms / 1,000 chunks | KB / open stream "
        "| loop lag max ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        stats, ref = run.stats, direct.get((run.round, run.streams))
        ttfb = percentile(stats.ttfb, 0.5) * 1000, percentile(stats.ttfb, 0.99) * 1000
        gap = percentile(stats.gaps, 0.99) * 1000
        if ref is not None and run is not ref:
            ref_ttfb = percentile(ref.stats.ttfb, 0.5) * 1000, percentile(ref.stats.ttfb, 0.99) * 1000
            added = f"{ttfb[0] - ref_ttfb[0]:+.1f} / {ttfb[1] - ref_ttfb[1]:+.1f}"
            added_gap = f"{gap - percentile(ref.stats.gaps, 0.99) * 1000:+.1f}"
            ratio = f"{stats.per_second / ref.stats.per_second:.2f}" if ref.stats.per_second else "—"
        else:
            added = added_gap = ratio = "—"
        proxied = run.target != "direct"
        cpu = f"{run.cpu_seconds * 1e6 / stats.events:.1f}" if proxied and stats.events else "—"
        per_stream = f"{(run.rss_open_mb - run.rss_idle_mb) * 1024 / run.streams:.1f}" if proxied else "—"
        lines.append(
            f"| {run.round} | {run.target} | {run.streams} | {stats.per_second:.0f} | {ratio} "
            f"| {ttfb[0]:.1f} / {ttfb[1]:.1f} | {added} | {gap:.1f} | {added_gap} | {_errors(stats)} | {cpu} "
            f"| {per_stream} | {f'{run.loop_lag_ms:.0f}' if run.loop_lag_ms >= 0 else '—'} |"
        )
    return "\n".join(lines)
