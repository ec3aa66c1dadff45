"""Gateway overhead benchmark: the upstream called directly vs a bare aiohttp passthrough vs modelgate.

    python bench/overhead.py [--duration 10] [--connections 32] [--workers 1]

Starts a fast fake upstream, the bare passthrough and the real gateway on 127.0.0.1, measures all three
with the same ~1 KB chat request, prints one table, and stops every process it started by PID. With two
or more cores the proxy under test gets core 0 to itself; the upstream, the load generator (wrk) and the
latency client share core 1. With `--workers N > 1` the proxies run N processes on every core.
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
from children import Child, free_port, start, wait_for_http, wait_for_port
from gateway_setup import register_tenant, write_config
from load_generators import WRK_INSTALL_HINT, LoadResult, run_python, run_wrk, wrk_available
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
from profiling import start_profiler
from report import TargetResult, render_diagnostics, render_table, render_targets
from workload import chat_body, raw_request

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
WARMUP_REQUESTS = 200
WARMUP_LOAD_SECONDS = 2.0
QUIET_WAIT_SECONDS = 30.0  # how long to wait for other processes (e.g. a test run) to calm down


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=10.0, help="seconds of load per target (default 10)"
    )
    parser.add_argument(
        "--connections", type=int, default=32, help="connections for the rps run (default 32)"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="gateway and passthrough processes; >1 disables pinning"
    )
    parser.add_argument(
        "--samples", type=int, default=2000, help="sequential requests for p50/p99 (default 2000)"
    )
    parser.add_argument(
        "--stream-samples", type=int, default=500, help="sequential streaming requests for TTFB (default 500)"
    )
    parser.add_argument(
        "--load-generator",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="wrk when installed (auto), or the Python fallback",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="after the measurements, record modelgate under load with py-spy (if installed) into FILE: "
        ".svg flamegraph, .json speedscope, anything else raw collapsed stacks (summarised here)",
    )
    args = parser.parse_args(argv)
    if args.workers < 1 or args.connections < 1 or args.duration <= 0:
        parser.error("--workers and --connections must be at least 1, --duration above 0")
    return args


def core_layout(workers: int) -> tuple[set[int], set[int]]:
    """(proxy cores, load cores): the proxy alone on the first core, everything else on the second."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        print("note: only one core available, nothing is pinned; numbers are indicative", file=sys.stderr)
        return set(available), set(available)
    load = {available[1]}
    return ({available[0]} if workers == 1 else set(available)), load


class Load:
    """The closed-loop load generator chosen for this run."""

    def __init__(self, choice: str, cpus: set[int], body_file: Path, api_key: str) -> None:
        self.use_wrk = choice == "wrk" or (choice == "auto" and wrk_available())
        if choice == "wrk" and not wrk_available():
            raise SystemExit(WRK_INSTALL_HINT.split(";")[0])
        if not self.use_wrk and choice == "auto":
            print(f"note: {WRK_INSTALL_HINT}", file=sys.stderr)
        self.cpus, self.body_file, self.api_key = cpus, body_file, api_key
        self.name = "wrk -t1" if self.use_wrk else "python (asyncio) fallback"

    def run(self, port: int, connections: int, seconds: float) -> LoadResult:
        if self.use_wrk:
            return run_wrk(
                port,
                connections=connections,
                seconds=seconds,
                body_file=self.body_file,
                api_key=self.api_key,
                cpus=self.cpus,
            )
        request = raw_request("127.0.0.1", port, self.body_file.read_bytes(), self.api_key)
        return run_python(
            port,
            connections=connections,
            seconds=seconds,
            request=request,
            cpus=self.cpus,
            processes=len(self.cpus),
        )


def measure(
    name: str,
    port: int,
    pids_of: Callable[[], list[int]] | None,
    args: argparse.Namespace,
    load: Load,
    api_key: str,
    proxy_cpus: set[int],
    load_cpus: set[int],
) -> TargetResult:
    """Latency, streaming TTFB, then rps with CPU and core use, then RSS, for one target."""
    print(f"measuring {name} on port {port} ...", file=sys.stderr, flush=True)
    plain = raw_request("127.0.0.1", port, chat_body(), api_key)
    stream = raw_request("127.0.0.1", port, chat_body(stream=True), api_key)
    check_answers(name, port, plain, stream)
    sequential(port, plain, WARMUP_REQUESTS)
    load.run(port, args.connections, min(WARMUP_LOAD_SECONDS, args.duration))  # opens the upstream pools
    _settle(name, "latency")
    latency = sequential(port, plain, args.samples)
    streaming = sequential(port, stream, args.stream_samples)
    _settle(name, "rps")

    pids = pids_of() if pids_of else []
    cpu_before = cpu_seconds(pids) if pids else 0.0
    proxy_before, load_before = core_times(proxy_cpus), core_times(load_cpus)
    everyone_before = cpu_by_process()
    result = load.run(port, args.connections, args.duration)
    everyone_after = cpu_by_process()
    proxy_after, load_after = core_times(proxy_cpus), core_times(load_cpus)
    others = foreign_cpu(everyone_before, everyone_after, set(process_tree(os.getpid())))
    cpu_used = cpu_seconds(pids) - cpu_before if pids else 0.0

    def busy(before: tuple[int, int], after: tuple[int, int]) -> float:
        return (after[0] - before[0]) / max(1, after[1] - before[1])

    return TargetResult(
        name=name,
        rps=result.rps,
        p50_ms=latency.p(50),
        p99_ms=latency.p(99),
        ttfb_p50_ms=streaming.ttfb(50),
        cpu_s_per_1k=cpu_used / result.requests * 1000 if pids and result.requests else None,
        rss_mb=max(rss_mb(pid) for pid in pids) if pids else None,
        errors=result.errors + latency.errors + streaming.errors,
        proxy_core_busy=busy(proxy_before, proxy_after) if pids else None,
        load_core_busy=busy(load_before, load_after),
        other_cores=others / result.seconds if result.seconds else 0.0,
    )


def profile_gateway(pid: int, port: int, args: argparse.Namespace, load: Load) -> None:
    """One extra, unmeasured load run on the gateway while py-spy samples it from the load core."""
    path = Path(args.profile).resolve()
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        spy = stack.enter_context(start_profiler(pid, path, args.duration, load.cpus))
        print(f"profiling modelgate with py-spy into {path} ...", file=sys.stderr, flush=True)
        load.run(port, args.connections, args.duration)
        spy.wait(timeout=args.duration + 30)
    if spy.returncode != 0:
        took = time.monotonic() - started
        print(f"note: py-spy exited with {spy.returncode} after {took:.0f}s", file=sys.stderr)


def _settle(name: str, phase: str) -> None:
    if not wait_for_quiet(set(process_tree(os.getpid())), timeout=QUIET_WAIT_SECONDS):
        print(
            f"note: other processes kept the machine busy before the {phase} run of {name}", file=sys.stderr
        )


def _timeout(signum: int, frame: object) -> None:
    raise TimeoutError("the benchmark ran past its time budget")


def _stop_all(children: list[Child]) -> None:
    for child in reversed(children):
        child.stop()


def _log_problems(child: Child, limit: int = 5) -> list[str]:
    lines = child.log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if '"level":"error"' in line or '"level":"warning"' in line][:limit]


def run(args: argparse.Namespace) -> int:
    """Start everything, measure the three targets, print the report, stop everything."""
    budget = 3 * (args.duration + WARMUP_LOAD_SECONDS + 2 * QUIET_WAIT_SECONDS + 30) + 90
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(int(budget))
    proxy_cpus, load_cpus = core_layout(args.workers)
    python = sys.executable
    children: list[Child] = []
    with tempfile.TemporaryDirectory(prefix="modelgate-bench-") as temp, contextlib.ExitStack() as stack:
        stack.callback(_stop_all, children)
        tmp = Path(temp)
        lifetime = ["--max-seconds", str(budget + 30)]

        upstream_port = free_port()
        upstream = start(
            "upstream",
            [python, str(BENCH / "upstream.py"), "--port", str(upstream_port), *lifetime],
            cpus=load_cpus,
            log_dir=tmp,
        )
        children.append(upstream)
        wait_for_port(upstream, upstream_port)

        gateway_port = free_port()
        config = write_config(tmp, port=gateway_port, upstream_port=upstream_port, workers=args.workers)
        gateway = start(
            "modelgate",
            [
                python,
                "-m",
                "proxy.cli",
                "serve",
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(gateway_port),
                "--workers",
                str(args.workers),
            ],
            cpus=proxy_cpus,
            log_dir=tmp,
            cwd=REPO,
        )
        children.append(gateway)
        wait_for_http(gateway, f"http://127.0.0.1:{gateway_port}/readyz")
        api_key = register_tenant(f"http://127.0.0.1:{gateway_port}")

        passthrough_port = free_port()
        passthroughs = []
        for index in range(args.workers):
            passthrough = start(
                f"passthrough-{index}",
                [
                    python,
                    str(BENCH / "passthrough.py"),
                    "--port",
                    str(passthrough_port),
                    "--upstream",
                    f"http://127.0.0.1:{upstream_port}",
                    *lifetime,
                    *(["--reuse-port"] if args.workers > 1 else []),
                ],
                cpus=proxy_cpus,
                log_dir=tmp,
                env={"PASSTHROUGH_KEY": api_key},
            )
            children.append(passthrough)
            passthroughs.append(passthrough)
            wait_for_port(passthrough, passthrough_port)

        os.sched_setaffinity(0, load_cpus)  # our latency client shares the load core
        body_file = tmp / "chat-body.json"
        body_file.write_bytes(chat_body())
        load = Load(args.load_generator, load_cpus, body_file, api_key)
        targets: list[tuple[str, int, Callable[[], list[int]] | None]] = [
            ("direct", upstream_port, None),
            ("passthrough", passthrough_port, lambda: [p.pid for p in passthroughs]),
            ("modelgate", gateway_port, lambda: process_tree(gateway.pid)),
        ]
        results = [
            measure(name, port, pids_of, args, load, api_key, proxy_cpus, load_cpus)
            for name, port, pids_of in targets
        ]
        if args.profile:
            profile_gateway(gateway.pid, gateway_port, args, load)
        total_rss = sum(rss_mb(pid) for pid in process_tree(gateway.pid))
        problems = _log_problems(gateway)
        signal.alarm(0)

    print()
    print(
        f"modelgate overhead — {args.duration:g}s per rps run, {args.connections} connections, "
        f"{len(chat_body())} B chat body, load: {load.name}, workers: {args.workers}"
    )
    print(
        f"cores: proxy under test {sorted(proxy_cpus)}, upstream + load generator + latency client "
        f"{sorted(load_cpus)}; python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}"
    )
    print(
        f"p50/p99@1: {args.samples} sequential requests on one keep-alive connection; "
        f"TTFB: first SSE event, {args.stream_samples} streams"
    )
    print()
    print(render_table(results, args.connections))
    print()
    print(render_targets(results, args.connections))
    if args.workers > 1:
        print(
            f"  (RSS is the largest gateway process; all {args.workers} workers + parent: {total_rss:.1f} MB)"
        )
    print()
    print(
        render_diagnostics(
            results, ",".join(map(str, sorted(proxy_cpus))), ",".join(map(str, sorted(load_cpus)))
        )
    )
    if problems:
        print("\ngateway log warnings/errors (first few):")
        print("\n".join(f"  {line}" for line in problems))
    return 0


def main() -> int:
    return run(parse_args())


if __name__ == "__main__":
    sys.exit(main())
