"""What every benchmark run needs: the core layout, the services, the time budget's alarm, the gateway
log's problems."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from production import REDIS_URL
from services import Services, start_services


def core_layout(workers: int) -> tuple[set[int], set[int]]:
    """(proxy cores, load cores): the proxy alone on the first core, everything else on the second."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        print("note: only one core available, nothing is pinned; numbers are indicative", file=sys.stderr)
        return set(available), set(available)
    return ({available[0]} if workers == 1 else set(available)), {available[1]}


def timeout_alarm(signum: int, frame: object) -> None:
    """SIGALRM handler: the run went past its time budget."""
    raise TimeoutError("the benchmark ran past its time budget")


def log_problems(log_path: Path, limit: int = 5) -> list[str]:
    """The first few warning/error lines of a gateway JSON log."""
    lines = log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if '"level":"error"' in line or '"level":"warning"' in line][:limit]


def started_services(
    stack: contextlib.ExitStack,
    args: argparse.Namespace,
    *,
    log_dir: Path,
    lifetime: float,
    workers: int,
    proxy_cpus: set[int],
    load_cpus: set[int],
    storage_url: str | None = None,
    with_passthrough: bool = True,
    upstream_args: tuple[str, ...] = (),
    passthrough_args: tuple[str, ...] = (),
) -> Services:
    """Start one run's services, stopped by PID when `stack` closes. A `storage_url` (the throwaway
    PostgreSQL database) means production mode: the gateway then uses Redis too."""
    services = Services()
    stack.callback(services.stop)
    start_services(
        services,
        workers=workers,
        proxy_cpus=proxy_cpus,
        load_cpus=load_cpus,
        log_dir=log_dir,
        lifetime=lifetime,
        disabled_plugins=tuple(name for name in args.disable_plugins.split(",") if name),
        storage_url=storage_url,
        redis_url=REDIS_URL if storage_url else None,
        with_passthrough=with_passthrough,
        upstream_args=upstream_args,
        passthrough_args=passthrough_args,
    )
    return services
