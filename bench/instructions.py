"""Instructions per request, counted by valgrind: a benchmark figure that other load on the machine does not
move.

    python bench/instructions.py [--requests 2000] [--connections 32] [--production] [--only floor,embedded]
    python bench/instructions.py --long-streams 40 --requests 200 --connections 16

`--long-streams N` counts the long-stream case instead: the upstream paces every stream like an LLM's (N
content events 50 ms apart, each its own socket read), and the figure that matters is instructions per
relayed event (chunk), beside per stream.

The floor (the bare aiohttp passthrough) and the gateway each run under `valgrind --tool=callgrind`; the
fake upstream and the load client run normally. After a warm-up the counters are zeroed, exactly
`--requests` chat requests (and then as many streams) go through at `--connections`, and the counts are
dumped: instructions per request are the dump's total over the requests, the process's every thread
included (the SQLite writer's too). The same binary and inputs give the same count within a fraction of a
percent whatever else runs, so two commits can be compared while the machine is busy; the wall-clock
benchmark (`overhead.py`) stays the reference for requests per second. Instructions are not time: a
syscall's kernel work, cache misses and waiting are not in them.

Needs `valgrind` (Debian/Ubuntu: `apt-get install -y valgrind`). A run takes a few minutes: under callgrind
Python runs ~50x slower.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from children import Child, free_port, start, wait_for_http, wait_for_port
from gateway_setup import register_tenant, write_config
from load_generators import count_requests
from production import REDIS_URL, production_database
from services import BENCH, REPO
from workload import chat_body, raw_request

WARMUP_REQUESTS = 300
_TOTALS = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.MULTILINE)
_STARTUP_SECONDS = 600.0  # Python imports under callgrind are slow


@dataclass(frozen=True, slots=True)
class Count:
    """Instructions per request of one target and case."""

    target: str
    case: str
    per_request: float
    errors: int
    per_chunk: float = 0.0  # the long-stream case: per SSE event relayed


def _valgrind(out: Path) -> list[str]:
    return [
        "valgrind",
        "--tool=callgrind",
        "--trace-children=no",
        f"--callgrind-out-file={out}",
        "--dump-instr=no",
        "--compress-strings=no",
    ]


def _control(pid: int, option: str) -> None:
    subprocess.run(["callgrind_control", option, str(pid)], check=True, capture_output=True, timeout=120)


def _instructions(out_dir: Path, pid: int, keep: Path | None = None, name: str = "") -> int:
    """Sum of the totals of every dump `pid` wrote since the last zeroing (one file per dump), moved to
    `keep` as `name`.N when given (for callgrind_annotate), else deleted."""
    total = 0
    for path in out_dir.glob(f"callgrind.{pid}*"):
        if path.name == f"callgrind.{pid}":  # the final dump at exit: not written yet, or stale
            continue
        match = _TOTALS.search(path.read_bytes())
        if match:
            total += int(match.group(1))
        if keep is not None and name:
            keep.mkdir(parents=True, exist_ok=True)
            path.rename(keep / f"{name}.{path.name.rpartition('.')[2]}")
        else:
            path.unlink()
    return total


def _measure(
    child: Child, out_dir: Path, port: int, key: str, args: argparse.Namespace, target: str
) -> list[Count]:
    counts = []
    cases = (("chat", chat_body()), ("stream", chat_body(stream=True)))
    if args.long_streams:
        cases = (("long", chat_body(stream=True)),)
    warmup = min(WARMUP_REQUESTS, args.requests)
    for case, body in cases:
        request = raw_request("127.0.0.1", port, body, key)
        asyncio.run(count_requests(port, request, args.connections, warmup))
        _control(child.pid, "--zero")
        _instructions(out_dir, child.pid)
        done, errors = asyncio.run(count_requests(port, request, args.connections, args.requests))
        _control(child.pid, "--dump")
        total = _instructions(out_dir, child.pid, args.keep, f"callgrind.{target}.{case}")
        events = done * (args.long_streams + 4)  # role, content, finish, usage, [DONE]
        counts.append(Count(target, case, total / done, errors, total / events if args.long_streams else 0.0))
    return counts


def run(args: argparse.Namespace) -> list[Count]:
    """Start the upstream, then each target under callgrind in turn; count each case."""
    python = sys.executable
    only = set(args.only.split(","))
    results: list[Count] = []
    with tempfile.TemporaryDirectory(prefix="modelgate-instr-") as temp, contextlib.ExitStack() as stack:
        log_dir = Path(temp)
        storage_url = stack.enter_context(production_database()) if args.production else None
        upstream_port = free_port()
        pacing = ("--ttfb-ms", "0", "--chunk-delay-ms", "50", "--chunks", str(args.long_streams))
        pacing = pacing if args.long_streams else ()
        upstream = start(
            "upstream",
            [python, str(BENCH / "upstream.py"), "--port", str(upstream_port), *pacing],
            cpus={1},
            log_dir=log_dir,
        )
        stack.callback(upstream.stop)
        wait_for_port(upstream, upstream_port)

        port = free_port()
        config = write_config(
            log_dir,
            port=port,
            upstream_port=upstream_port,
            workers=1,
            disabled=tuple(filter(None, args.disable_plugins.split(","))),
            storage_url=storage_url,
            redis_url=REDIS_URL if args.production else None,
        )
        out = log_dir / "callgrind.%p"
        gateway = start(
            "modelgate",
            [*_valgrind(out), python, "-m", "modelgate", "serve", "--config", str(config)],
            cpus={0},
            log_dir=log_dir,
            cwd=REPO,
        )
        stack.callback(gateway.stop, 60.0)
        wait_for_http(gateway, f"http://127.0.0.1:{port}/readyz", timeout=_STARTUP_SECONDS)
        key = register_tenant(f"http://127.0.0.1:{port}")
        mode = "production" if args.production else "embedded"
        if mode in only or "gateway" in only:
            results += _measure(gateway, log_dir, port, key, args, mode)
        gateway.stop(60.0)

        if "floor" in only:
            floor_port = free_port()
            floor = start(
                "passthrough",
                [
                    *_valgrind(out),
                    python,
                    str(BENCH / "passthrough.py"),
                    "--port",
                    str(floor_port),
                    "--upstream",
                    f"http://127.0.0.1:{upstream_port}",
                ],
                cpus={0},
                log_dir=log_dir,
                env={"PASSTHROUGH_KEY": key},
            )
            stack.callback(floor.stop, 60.0)
            wait_for_port(floor, floor_port, timeout=_STARTUP_SECONDS)
            results += _measure(floor, log_dir, floor_port, key, args, "floor")
    return results


def render(results: list[Count], args: argparse.Namespace) -> str:
    floor = {c.case: c.per_request for c in results if c.target == "floor"}
    lines = [
        f"instructions per request (callgrind, {args.requests} requests at {args.connections} connections "
        f"after {min(WARMUP_REQUESTS, args.requests)} warm-up; every thread of the process)",
        f"{'target':<11} {'case':<7} {'instr/req':>12} {'x floor':>8} {'errors':>6} {'instr/chunk':>11}",
    ]
    for count in results:
        ratio = f"{count.per_request / floor[count.case]:.2f}" if count.case in floor else "-"
        lines.append(
            f"{count.target:<11} {count.case:<7} {count.per_request:>12,.0f} {ratio:>8} {count.errors:>6}"
            + (f" {count.per_chunk:>11,.0f}" if count.per_chunk else "")
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="counted requests per case (default 2000)")
    parser.add_argument("--connections", type=int, default=32, help="connections (default 32)")
    parser.add_argument("--production", action="store_true", help="the gateway on PostgreSQL + Redis")
    parser.add_argument("--only", default="floor,gateway", help="floor and/or gateway (default both)")
    parser.add_argument(
        "--disable-plugins",
        default="",
        metavar="A,B",
        help="gateway plugins to switch off (plugins.disabled)",
    )
    parser.add_argument(
        "--long-streams",
        type=int,
        default=0,
        metavar="N",
        help="count long streams instead: N content events 50 ms apart per stream (see above)",
    )
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="keep the counted dumps in DIR, for callgrind_annotate"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found: apt-get install -y valgrind")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    print(render(run(args), args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
