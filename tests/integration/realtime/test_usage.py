"""A realtime session is metered from the usage its `response.done` events report: one ledger row per
response (none for the session as a whole), priced by the model's token prices — and flushed when the gateway
stops. Reservations and refusals per response: test_billing.py."""

from __future__ import annotations

import asyncio
import math

from modelgate.storage import open_database
from tests.fakes.realtime_routes import USAGE
from tests.integration.realtime.conftest import (
    INPUT_PER_MTOK,
    OUTPUT_PER_MTOK,
    connect,
    mint,
    receive_json,
    session,
)


async def _ledger(storage_url: str, organization_email: str) -> list[dict]:
    db = await open_database(storage_url)
    try:
        rows = await db.fetch(
            "SELECT l.model, l.status, l.outcome, l.request_id, l.row_key, l.input_tokens,"
            " l.cached_input_tokens, l.output_tokens, l.cost_micros"
            " FROM usage_ledger l JOIN users u ON u.organization_id = l.organization_id"
            " WHERE u.email = $1 ORDER BY l.created_at, l.id",
            organization_email,
        )
        return [dict(row) for row in rows]
    finally:
        await db.close()


async def test_each_responses_usage_is_a_ledger_row_flushed_when_the_gateway_stops(start_gateway) -> None:
    own = start_gateway()
    tenant = await asyncio.to_thread(own.tenant)
    base = own.gateway.base_url
    secret = await asyncio.to_thread(mint, base, tenant)
    async with session() as client:
        ws = await connect(client, base, tenant, secret)
        ids = []
        for _ in range(2):  # two model responses in one session
            await ws.send_json({"type": "response.create"})
            done = await receive_json(ws)
            assert done["type"] == "response.done"
            ids.append(done["response"]["id"])
        await ws.send_bytes(b"\x00" * 4096)  # audio frames carry no usage of their own
        await ws.receive(timeout=10)
        await ws.close()
    assert await asyncio.to_thread(own.alpha.realtime.wait_closed, 1)
    await asyncio.to_thread(own.gateway.stop)  # a graceful stop flushes the ledger

    rows = await _ledger(own.gateway.storage_url, tenant.email)
    minted, *metered = rows  # minting the secret is a free request of its own
    assert (minted["status"], minted["cost_micros"]) == (200, 0)
    assert len(metered) == 2  # one per response, no row for the session as a whole
    # Cached input has no price of its own in this config: it costs the input price (a provider that gives no
    # discount bills it whole; docs/prices.md), so every input token is at the input price.
    expected = math.ceil(
        USAGE["input_tokens"] * INPUT_PER_MTOK + USAGE["output_tokens"] * OUTPUT_PER_MTOK - 1e-9
    )
    for row, response_id in zip(metered, ids, strict=True):
        assert (row["status"], row["outcome"], row["model"]) == (200, "completed", "realtime-test")
        assert row["request_id"].endswith(":" + response_id)
        assert row["row_key"].startswith("alpha/gpt-realtime-upstream@")
        assert (row["input_tokens"], row["output_tokens"], row["cached_input_tokens"]) == (
            USAGE["input_tokens"],
            USAGE["output_tokens"],
            USAGE["input_token_details"]["cached_tokens"],
        )
        assert row["cost_micros"] == expected > 0
