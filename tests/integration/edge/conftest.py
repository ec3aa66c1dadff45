"""The HTTP edge: slow, idle and hostile clients, the connection cap, malformed HTTP, the Server header."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.ops.conftest import ops_toml
from tests.support.gateway import ThreadedGateway, write_config

# Small deadlines keep the tests fast; the keep-alive one differs from the others so a test can tell which
# closed a connection.
HEADER_TIMEOUT = 0.5
BODY_IDLE_TIMEOUT = 0.5
KEEPALIVE_TIMEOUT = 1.5
# How much later than its deadline a close may come on a busy machine.
SLACK = 3.0


def edge_server(
    *,
    header: float = HEADER_TIMEOUT,
    body: float = BODY_IDLE_TIMEOUT,
    keepalive: float = KEEPALIVE_TIMEOUT,
    max_connections: int = 4096,
) -> str:
    """The [server] keys of the connection guard."""
    return f"""
header_timeout_seconds = {header}
body_idle_timeout_seconds = {body}
keepalive_timeout_seconds = {keepalive}
max_connections = {max_connections}
"""


def edge_toml(storage_url: str, *, per_request_usd: float = 0.01, **server: float) -> str:
    """A gateway with the mock model `echo` at `per_request_usd` a request, and these edge settings."""
    return ops_toml(storage_url, server=edge_server(**server), per_request_usd=per_request_usd)


GatewayStarter = Callable[..., ThreadedGateway]


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[GatewayStarter]:
    """Start in-process gateways with edge settings (keyword arguments of `edge_server`); all stop after."""
    running: list[ThreadedGateway] = []

    def start(**server: float) -> ThreadedGateway:
        index = len(running)
        url = f"sqlite:///{tmp_path / f'edge-{index}.db'}"
        config = write_config(tmp_path / f"edge-{index}.toml", edge_toml(url, **server))
        running.append(ThreadedGateway(config).start())
        return running[-1]

    yield start
    for gateway in running:
        gateway.stop()
