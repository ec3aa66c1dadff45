"""A gateway that stops closes its realtime sessions while their clients can still answer.

When the stop begins, every open session is told 1001 going away and its closing handshake completes (a frame
the client sent meanwhile is read and dropped, never forwarded); the responses running on it are cancelled
upstream and charged what the provider reports they used, one ledger row each, their reservations released;
a session still being established is refused with 503 rather than upgraded into a gateway that no longer
reads its frames. All of it before the ledger stops.

Run on SQLite with in-process counters, and on PostgreSQL with Redis counters (the `billed` fixture).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from redis.asyncio import Redis

from tests.integration.realtime.conftest import (
    CANCELLED,
    TIGHT,
    WORST,
    RealtimeStack,
    connect,
    funded_tenant,
    mint,
    query_rows,
    receive_until,
    response_rows,
    row_summary,
    session,
    stored_balance,
)
from tests.support.gateway import Tenant
from tests.support.money_books import read_redis_money


def _stop_in_background(stack: RealtimeStack) -> asyncio.Future:
    """The gateway's stop (SIGTERM's path in serve()), running while the test goes on."""
    return asyncio.ensure_future(asyncio.to_thread(stack.gateway.stop))


async def _reserved_in_redis(stack: RealtimeStack, tenant: Tenant) -> int | None:
    """What Redis still holds reserved for the tenant's organization (None: no Redis, or nothing recorded)."""
    redis_url = stack.gateway.config.redis.url
    if not redis_url:
        return None
    (row,) = await query_rows(
        stack.gateway.storage_url, "SELECT organization_id FROM users WHERE email = $1", tenant.email
    )
    redis = Redis.from_url(redis_url)
    try:
        return (await read_redis_money(redis, row["organization_id"])).reserved
    finally:
        await redis.aclose()


async def test_a_response_running_as_the_gateway_stops_is_cancelled_and_charged_what_it_used(billed) -> None:
    tenant = await funded_tenant(billed, WORST + CANCELLED)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    realtime = billed.alpha.realtime
    realtime.announce_responses = realtime.hold_responses = True
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json({"type": "fake.hold_cancels", "gate": "cancel"})
        await ws.send_json({"type": "response.create"})
        await receive_until(ws, lambda e: e["type"] == "response.output_audio.delta")
        stopping = _stop_in_background(billed)
        # The gateway cancels the running response upstream once it has told the client to go away.
        assert await asyncio.to_thread(billed.alpha.wait_held, "cancel", 10)
        # A frame that crosses the gateway's close is read and dropped, and the client's close is answered.
        await ws.send_json({"type": "response.create"})
        await ws.close()
        assert ws.close_code == 1001
        billed.alpha.release("cancel")  # the provider reports what the cancelled response used
        await stopping
    (upstream,) = realtime.sessions
    assert upstream.received("response.create") == 1
    assert upstream.closed_by == "client"  # the gateway closed the provider's side too
    rows = await response_rows(storage, tenant.email)
    assert [row_summary(row) for row in rows] == [(200, "shutdown", 5, CANCELLED)]
    assert await stored_balance(storage, tenant.email) == WORST
    assert await _reserved_in_redis(billed, tenant) in (None, 0)


async def test_an_idle_session_is_closed_with_going_away_when_the_gateway_stops(billed) -> None:
    tenant = await funded_tenant(billed, WORST)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        stopping = _stop_in_background(billed)
        message = await ws.receive(timeout=10)  # replies to the close, as a client that reads does
        assert (message.type, message.data) == (aiohttp.WSMsgType.CLOSE, 1001)
        await stopping
    assert await asyncio.to_thread(billed.alpha.realtime.wait_closed, 1)
    assert await response_rows(storage, tenant.email) == []
    assert await stored_balance(storage, tenant.email) == WORST


async def test_a_session_connecting_as_the_gateway_stops_is_refused_not_upgraded(billed) -> None:
    tenant = await funded_tenant(billed, 2 * WORST)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    realtime = billed.alpha.realtime
    open_secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    late_secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        witness = await connect(client, base, tenant, open_secret, TIGHT)
        realtime.hold_gate = "handshake"  # the provider's handshake of the next session waits for the test
        late = asyncio.ensure_future(connect(client, base, tenant, late_secret, TIGHT))
        assert await asyncio.to_thread(billed.alpha.wait_held, "handshake", 10)
        stopping = _stop_in_background(billed)
        # The open session hears of the stop: from here on the gateway is shutting its sessions down.
        message = await witness.receive(timeout=10)
        assert (message.type, message.data) == (aiohttp.WSMsgType.CLOSE, 1001)
        billed.alpha.release("handshake")
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await late
        assert refused.value.status == 503
        await stopping
    assert await asyncio.to_thread(realtime.wait_closed, 2)  # both provider sides were closed
    assert await response_rows(storage, tenant.email) == []
    assert await stored_balance(storage, tenant.email) == 2 * WORST
