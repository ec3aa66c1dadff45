"""Realtime through the real gateway: client secrets minted over HTTP, WebSocket sessions relayed to a fake
provider's realtime endpoint, with in-process or Redis state."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from modelgate.storage import open_database
from tests.fakes import FakeUpstream
from tests.fakes.realtime_routes import PARTIAL_USAGE, USAGE
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

UPSTREAM_KEY = "upstream-realtime-key"
INPUT_PER_MTOK = 5.0
OUTPUT_PER_MTOK = 20.0
# realtime-tight: input is free, so one response's worst case is exactly its output allowance.
TIGHT_MAX_TOKENS = 100
# realtime-tight: the model name, one response reserved (its worst case), one charged, one cancelled.
TIGHT = "realtime-tight"
WORST = math.ceil(TIGHT_MAX_TOKENS * OUTPUT_PER_MTOK)  # one realtime-tight response, reserved
ANSWER = math.ceil(USAGE["output_tokens"] * OUTPUT_PER_MTOK)  # one realtime-tight response, charged
CANCELLED = math.ceil(PARTIAL_USAGE["output_tokens"] * OUTPUT_PER_MTOK)


def realtime_toml(
    storage_url: str, alpha: FakeUpstream, beta: FakeUpstream, *, redis_url: str | None = None, cap: int = 2
) -> str:
    redis = f'[redis]\nurl = "{redis_url}"\n' if redis_url else ""
    return f"""
[storage]
url = "{storage_url}"

{redis}
[billing]
ledger_flush_interval_seconds = 0.1

[routing]
failure_threshold = 100

[[providers]]
name = "alpha"
kind = "openai"
base_url = "{alpha.base_url}/v1"
api_key = "{UPSTREAM_KEY}"
first_byte_timeout = 10.0

[[providers]]
name = "beta"
kind = "openai"
base_url = "{beta.base_url.replace("127.0.0.1", "localhost")}/v1"
api_key = "{UPSTREAM_KEY}"

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "realtime-test"
kinds = ["realtime"]
default_max_tokens = 1000
[[models.rows]]
provider = "alpha"
upstream_model = "gpt-realtime-upstream"
[models.prices]
input_per_mtok = {INPUT_PER_MTOK}
output_per_mtok = {OUTPUT_PER_MTOK}

[[models]]
name = "realtime-tight"
kinds = ["realtime"]
default_max_tokens = {TIGHT_MAX_TOKENS}
[[models.rows]]
provider = "alpha"
upstream_model = "gpt-realtime-tight"
[models.prices]
input_per_mtok = 0.0
output_per_mtok = {OUTPUT_PER_MTOK}

[[models]]
name = "realtime-failover"
kinds = ["realtime"]
[[models.rows]]
provider = "beta"
upstream_model = "rt-beta"
priority = 0
[[models.rows]]
provider = "alpha"
upstream_model = "rt-alpha"
priority = 1

[[models]]
name = "realtime-mock"
kinds = ["realtime"]
[[models.rows]]
provider = "mock"

[[models]]
name = "chat-only"
kinds = ["chat"]
[[models.rows]]
provider = "alpha"

[[plans]]
code = "free"
rpm = 0
tpm = 0
realtime_concurrency = {cap}

[[plans]]
code = "pro"  # a fee: unpaid until the operator marks its invoice paid
monthly_fee = 49.0
"""


@dataclass(frozen=True, slots=True)
class RealtimeStack:
    alpha: FakeUpstream
    beta: FakeUpstream
    gateway: ThreadedGateway

    def tenant(self, **options) -> Tenant:
        return register_tenant(self.gateway.base_url, **options)


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with ExitStack() as stack:
        yield tuple(
            stack.enter_context(FakeUpstream(name, api_key=UPSTREAM_KEY)) for name in ("alpha", "beta")
        )


@pytest.fixture(scope="module")
def module_gateway(fakes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedGateway]:
    directory = tmp_path_factory.mktemp("realtime")
    toml = realtime_toml(f"sqlite:///{directory / 'rt.db'}", *fakes)
    with ThreadedGateway(write_config(directory / "rt.toml", toml)) as running:
        yield running


@pytest.fixture
def stack(fakes, module_gateway) -> RealtimeStack:
    for fake in fakes:
        fake.clear_faults()
        fake.clear()
    return RealtimeStack(*fakes, module_gateway)


@pytest.fixture
def tenant(stack: RealtimeStack) -> Tenant:
    """A funded organization with one key (registered outside the test's event loop)."""
    return stack.tenant()


@pytest.fixture
def other_tenant(stack: RealtimeStack) -> Tenant:
    return stack.tenant()


@pytest.fixture
def start_gateway(fakes, tmp_path: Path) -> Iterator[Callable[..., RealtimeStack]]:
    """A gateway of its own (cap, Redis, storage); stopped at the end of the test unless stopped before."""
    running: list[ThreadedGateway] = []

    def start(**options) -> RealtimeStack:
        for fake in fakes:
            fake.clear_faults()
            fake.clear()
        index = len(running)
        storage_url = options.pop("storage_url", None) or f"sqlite:///{tmp_path / f'rt-{index}.db'}"
        toml = realtime_toml(storage_url, *fakes, **options)
        running.append(ThreadedGateway(write_config(tmp_path / f"rt-{index}.toml", toml)).start())
        return RealtimeStack(*fakes, running[-1])

    yield start
    for gateway in running:
        with contextlib.suppress(RuntimeError):
            gateway.stop()


# -- clients -------------------------------------------------------------------------------------------


def mint(base_url: str, tenant: Tenant, model: str = "realtime-test", **body) -> str:
    """A fresh client secret for `model`."""
    reply = httpx.post(
        f"{base_url}/v1/realtime/client_secrets",
        json={"model": model, **body},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["value"]


def plain_get(
    base_url: str, tenant: Tenant, secret: str | None, model: str = "realtime-test"
) -> httpx.Response:
    """GET /v1/realtime without an upgrade: what a refused connect answers, as plain HTTP."""
    params = {"model": model} | ({"client_secret": secret} if secret is not None else {})
    return httpx.get(
        f"{base_url}/v1/realtime",
        params=params,
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    )


@contextlib.asynccontextmanager
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
        yield client


async def connect(
    client: aiohttp.ClientSession,
    base_url: str,
    tenant: Tenant,
    secret: str,
    model: str | None = "realtime-test",
    *,
    header: str = "authorization",
) -> aiohttp.ClientWebSocketResponse:
    params = {"client_secret": secret} | ({"model": model} if model else {})
    key = f"Bearer {tenant.api_key}" if header == "authorization" else tenant.api_key
    return await client.ws_connect(f"{base_url}/v1/realtime", params=params, headers={header: key})


async def refused(client: aiohttp.ClientSession, base_url: str, tenant: Tenant, secret: str, **kw) -> int:
    """The HTTP status of a connect the gateway refuses before the upgrade."""
    with pytest.raises(aiohttp.WSServerHandshakeError) as raised:
        await connect(client, base_url, tenant, secret, **kw)
    return raised.value.status


async def receive_json(ws: aiohttp.ClientWebSocketResponse) -> dict:
    message = await asyncio.wait_for(ws.receive(), timeout=10)
    assert message.type is aiohttp.WSMsgType.TEXT, message
    return message.json()


# -- billing ---------------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite-in-process", "postgres-redis"])
def billed(request: pytest.FixtureRequest, start_gateway) -> RealtimeStack:
    """A gateway of this test's own, on one of the two storage and counter backends."""
    if request.param == "sqlite-in-process":
        return start_gateway()
    return start_gateway(
        storage_url=request.getfixturevalue("pg_server_url"), redis_url=request.getfixturevalue("redis_url")
    )


async def funded_tenant(stack: RealtimeStack, micros: int) -> Tenant:
    return await asyncio.to_thread(stack.tenant, fund_usd=micros / 1_000_000)


async def query_rows(storage_url: str, sql: str, email: str) -> list[dict[str, Any]]:
    db = await open_database(storage_url)
    try:
        return [dict(row) for row in await db.fetch(sql, email)]
    finally:
        await db.close()


async def response_rows(storage_url: str, email: str) -> list[dict[str, Any]]:
    """The organization's ledger rows of realtime responses (`<session request id>:<response>`), in order."""
    return await query_rows(
        storage_url,
        "SELECT l.request_id, l.status, l.outcome, l.input_tokens, l.cached_input_tokens, l.output_tokens,"
        " l.cost_micros FROM usage_ledger l JOIN users u ON u.organization_id = l.organization_id"
        " WHERE u.email = $1 AND l.request_id LIKE '%:%' ORDER BY l.created_at, l.id",
        email,
    )


async def stored_balance(storage_url: str, email: str) -> int:
    rows = await query_rows(
        storage_url,
        "SELECT o.balance_micros FROM organizations o JOIN users u ON u.organization_id = o.id"
        " WHERE u.email = $1",
        email,
    )
    return rows[0]["balance_micros"]


async def receive_until(ws: aiohttp.ClientWebSocketResponse, last: Callable[[dict], bool]) -> list[dict]:
    """Events from the gateway up to and including the first one `last` accepts."""
    events = []
    while not events or not last(events[-1]):
        events.append(await receive_json(ws))
    return events


def row_summary(row: dict[str, Any]) -> tuple:
    return row["status"], row["outcome"], row["output_tokens"], row["cost_micros"]
