"""The HTTP edge: slow, idle and hostile clients, the connection cap, malformed HTTP, the Server header."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from modelgate.storage import open_database
from tests.integration.ops.conftest import ops_toml, wait_until
from tests.support.gateway import Tenant, ThreadedGateway, write_config
from tests.support.money_books import Books, read_books

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


PRICE_MICROS = 10_000  # edge_toml's per_request_usd


async def books_of(storage_url: str, tenant: Tenant) -> Books:
    """The tenant's organization's money as the database holds it."""
    db = await open_database(storage_url)
    try:
        organization_id = await db.fetchval(
            "SELECT organization_id FROM users WHERE email = $1", tenant.email
        )
        return await read_books(db, organization_id)
    finally:
        await db.close()


def assert_one_request_billed(gateway: ThreadedGateway, tenant: Tenant) -> None:
    """Once the ledger has it: the tenant was charged for one served request (status 200) and nothing else."""
    assert wait_until(lambda: asyncio.run(books_of(gateway.storage_url, tenant)).spent_micros > 0)
    books = asyncio.run(books_of(gateway.storage_url, tenant))
    assert books.spent_micros == PRICE_MICROS
    assert [row.status for row in books.rows if row.cost_micros] == [200]
