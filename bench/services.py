"""The three services under test, started on loopback: fake upstream, bare passthrough, real gateway."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from children import Child, free_port, start, wait_for_http, wait_for_port
from gateway_setup import register_tenant, write_config

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent


@dataclass(slots=True)
class Services:
    """Ports and processes of one run; `children` is every process started, in start order."""

    upstream_port: int = 0
    passthrough_port: int = 0
    gateway_port: int = 0
    api_key: str = ""
    gateway: Child | None = None
    passthroughs: list[Child] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)

    def stop(self) -> None:
        """Stop every process by PID, the last started first."""
        for child in reversed(self.children):
            child.stop()


def start_services(
    services: Services,
    *,
    workers: int,
    proxy_cpus: set[int],
    load_cpus: set[int],
    log_dir: Path,
    lifetime: float,
    disabled_plugins: tuple[str, ...] = (),
    storage_url: str | None = None,
    redis_url: str | None = None,
    with_passthrough: bool = True,
    upstream_args: tuple[str, ...] = (),
    passthrough_args: tuple[str, ...] = (),
) -> None:
    """Start the upstream on the load cores, then the gateway and (unless told not to) the passthrough on
    the proxy cores; `upstream_args` and `passthrough_args` are more options of those two (the long-stream
    case paces the upstream's streams and lifts the passthrough's connection cap)."""
    python = sys.executable
    limit = ["--max-seconds", str(lifetime)]  # our children also exit by themselves

    services.upstream_port = free_port()
    upstream = start(
        "upstream",
        [python, str(BENCH / "upstream.py"), "--port", str(services.upstream_port), *limit, *upstream_args],
        cpus=load_cpus,
        log_dir=log_dir,
    )
    services.children.append(upstream)
    wait_for_port(upstream, services.upstream_port)

    services.gateway_port = free_port()
    config = write_config(
        log_dir,
        port=services.gateway_port,
        upstream_port=services.upstream_port,
        workers=workers,
        disabled=disabled_plugins,
        storage_url=storage_url,
        redis_url=redis_url,
    )
    serve = ["serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(services.gateway_port)]
    services.gateway = start(
        "modelgate",
        [python, "-m", "modelgate", *serve, "--workers", str(workers)],
        cpus=proxy_cpus,
        log_dir=log_dir,
        cwd=REPO,
    )
    services.children.append(services.gateway)
    gateway_url = f"http://127.0.0.1:{services.gateway_port}"
    wait_for_http(services.gateway, f"{gateway_url}/readyz")
    services.api_key = register_tenant(gateway_url)
    if not with_passthrough:
        return

    services.passthrough_port = free_port()
    upstream_origin = f"http://127.0.0.1:{services.upstream_port}"
    shared_port = ["--reuse-port"] if workers > 1 else []
    relay = ["--port", str(services.passthrough_port), "--upstream", upstream_origin, *limit, *shared_port]
    relay += passthrough_args
    for index in range(workers):
        passthrough = start(
            f"passthrough-{index}",
            [python, str(BENCH / "passthrough.py"), *relay],
            cpus=proxy_cpus,
            log_dir=log_dir,
            env={"PASSTHROUGH_KEY": services.api_key},
        )
        services.children.append(passthrough)
        services.passthroughs.append(passthrough)
        wait_for_port(passthrough, services.passthrough_port)
