"""The soak: mixed chat / streaming / embeddings traffic on the gateway for minutes, RSS sampled throughout.

One wrk thread cycles through the three requests (post.lua's BENCH_MIX) at `--connections` for the whole
soak, while the gateway's processes' RSS is read every ~10 s. The report is the curve, the least-squares
slope after the first fifth of the run (allocators and caches warm up there) and the growth over that
steady part.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from keepalive_client import KeepAliveClient
from load_generators import parse_wrk, wrk_available, wrk_command
from measurements import check_answers
from proc_stats import process_tree, rss_mb
from production import (
    command_delta,
    foreign_redis_clients,
    production_database,
    redis_command_calls,
)
from run_control import core_layout, log_problems, started_services, timeout_alarm
from workload import CHAT_PATH, EMBEDDINGS_PATH, chat_body, embeddings_body, raw_request

SAMPLE_SECONDS = 10.0
FLAT_GROWTH_MB = 2.0  # the fitted growth over the steady part under which the curve counts as flat


@dataclass(frozen=True, slots=True)
class Sample:
    """RSS of the gateway's processes at one moment of the soak."""

    seconds: float
    largest_mb: float
    total_mb: float


def slope_mb_per_minute(samples: list[Sample]) -> float:
    """Least-squares slope of the largest process's RSS over time, in MB per minute."""
    if len(samples) < 2:
        return 0.0
    xs = [s.seconds / 60 for s in samples]
    ys = [s.largest_mb for s in samples]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0


def _sample(gateway_pid: int, started: float) -> Sample:
    sizes = [rss_mb(pid) for pid in process_tree(gateway_pid)]
    return Sample(time.monotonic() - started, max(sizes), sum(sizes))


def _check_embeddings(port: int, body: bytes, api_key: str) -> None:
    head = raw_request("127.0.0.1", port, body, api_key).replace(
        CHAT_PATH.encode(), EMBEDDINGS_PATH.encode(), 1
    )
    with KeepAliveClient(port) as client:
        answer = client.exchange(head)
    if answer.status != 200 or b'"embedding"' not in answer.body:
        raise RuntimeError(f"embeddings: unexpected answer {answer.status}: {answer.body[:300]!r}")


def render_soak(samples: list[Sample], minutes: float, workers: int, summary: list[str]) -> str:
    """The curve, the slope and the verdict."""
    steady = [s for s in samples if s.seconds >= samples[-1].seconds / 5] if samples else []
    slope = slope_mb_per_minute(steady)
    growth = steady[-1].largest_mb - steady[0].largest_mb if steady else 0.0
    lines = [
        f"\nmodelgate soak: {minutes:g} min of mixed chat / stream / embeddings, workers: {workers}",
        *summary,
        "",
        "   t s | largest process MB | all processes MB",
    ]
    lines += [f"{s.seconds:6.0f} | {s.largest_mb:18.1f} | {s.total_mb:16.1f}" for s in samples]
    steady_minutes = (steady[-1].seconds - steady[0].seconds) / 60 if steady else 0.0
    verdict = "flat" if slope * steady_minutes < FLAT_GROWTH_MB else "GROWING"
    lines += [
        "",
        f"after the first fifth: slope {slope:+.3f} MB/min, fitted growth {slope * steady_minutes:+.1f} MB "
        f"over {steady_minutes:.1f} min (measured {growth:+.1f} MB)  [{verdict}: flat means a fitted "
        f"growth under {FLAT_GROWTH_MB:g} MB]",
        f"largest process at the end: {samples[-1].largest_mb:.1f} MB" if samples else "no samples",
    ]
    return "\n".join(lines)


def run_soak(args: argparse.Namespace) -> int:
    """Start the gateway (production mode with --production), soak it, print the curve."""
    if not wrk_available():
        raise SystemExit("the soak needs wrk (Debian/Ubuntu: `apt-get install -y wrk`)")
    seconds = args.soak * 60
    interval = min(SAMPLE_SECONDS, seconds / 6)
    signal.signal(signal.SIGALRM, timeout_alarm)
    signal.alarm(int(seconds + 300))
    proxy_cpus, load_cpus = core_layout(args.workers)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="modelgate-soak-") as temp, contextlib.ExitStack() as stack:
        root = Path(temp)
        storage_url = stack.enter_context(production_database()) if args.production else None
        services = started_services(
            stack,
            args,
            log_dir=root,
            lifetime=seconds + 330,
            workers=args.workers,
            proxy_cpus=proxy_cpus,
            load_cpus=load_cpus,
            storage_url=storage_url,
            with_passthrough=False,
        )
        gateway, port, key = services.gateway, services.gateway_port, services.api_key
        assert gateway is not None
        files = {name: root / f"{name}.json" for name in ("chat", "stream", "embeddings")}
        files["chat"].write_bytes(chat_body())
        files["stream"].write_bytes(chat_body(stream=True))
        files["embeddings"].write_bytes(embeddings_body())
        check_answers(
            "soak", port, *(raw_request("127.0.0.1", port, chat_body(stream=s), key) for s in (False, True))
        )
        _check_embeddings(port, embeddings_body(), key)
        mix = ",".join(
            f"{path}={files[name]}"
            for path, name in ((CHAT_PATH, "chat"), (CHAT_PATH, "stream"), (EMBEDDINGS_PATH, "embeddings"))
        )
        argv, env = wrk_command(
            port, connections=args.connections, seconds=seconds, body_file=files["chat"], api_key=key, mix=mix
        )
        print(f"soaking modelgate for {args.soak:g} min ...", file=sys.stderr, flush=True)
        redis_before = redis_command_calls() if args.production else {}
        started = time.monotonic()
        with subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: os.sched_setaffinity(0, load_cpus),
        ) as wrk:
            samples.append(_sample(gateway.pid, started))
            while True:
                try:
                    stdout, stderr = wrk.communicate(timeout=interval)  # the sampling clock
                    break
                except subprocess.TimeoutExpired:
                    samples.append(_sample(gateway.pid, started))
        samples.append(_sample(gateway.pid, started))
        load = parse_wrk(wrk.returncode, stdout, stderr)
        summary = [
            f"{load.requests:,} requests, {load.rps:,.0f} rps at {args.connections} connections, "
            f"{load.errors} errors; {'production (PostgreSQL + Redis)' if args.production else 'embedded'}"
        ]
        if args.production and load.requests:
            calls = command_delta(redis_before, redis_command_calls())
            calls.pop("info", None)
            others = foreign_redis_clients(process_tree(gateway.pid))
            summary.append(
                f"Redis commands per request: {sum(calls.values()) / load.requests:.2f}"
                + (f" (disturbed: {others} other Redis clients connected at the end)" if others else "")
            )
        summary += [f"gateway log: {line}" for line in log_problems(gateway.log_path)]
    signal.alarm(0)
    print(render_soak(samples, args.soak, args.workers, summary))
    return 0
