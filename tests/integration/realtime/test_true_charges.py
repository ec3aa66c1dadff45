"""A realtime response is charged what the provider reports, like any request (docs/billing.md, the truth
rule): never capped at its reservation. A provider that bills a turn more than the gateway's bound (here 6,000
audio tokens for 3 s appended, which the gateway counts as 30: see test_audio_reservation.py for a turn
bounded up front) is charged past the response's reservation; the row says by how much, the balance falls
below its floor by that excess, and the next response is refused until the tenant pays. Issue #32's row
"realtime turn with 180 s of appended audio". On SQLite with in-process counters and on PostgreSQL with Redis
counters (the `billed` fixture).

`realtime-test` prices input at 5 and output at 20 USD per million tokens, with `default_max_tokens` 1000:
a response.create without a cap reserves under 30,000 µ (1000 output tokens = 20,000 µ, plus the input bound
of the session's text and one turn of speech), while 180 s of audio reported as 6,000 input audio tokens and
200 output tokens bill 34,000 µ.
"""

from __future__ import annotations

import asyncio
import base64
import math

from tests.integration.realtime.conftest import (
    INPUT_PER_MTOK,
    OUTPUT_PER_MTOK,
    connect,
    funded_tenant,
    mint,
    query_rows,
    receive_json,
    receive_until,
    session,
    stored_balance,
)
from tests.integration.realtime.test_billing import _until

AUDIO_TURN = {
    "total_tokens": 6_200,
    "input_tokens": 6_000,
    "output_tokens": 200,
    "input_token_details": {"cached_tokens": 0, "text_tokens": 0, "audio_tokens": 6_000},
    "output_token_details": {"text_tokens": 200, "audio_tokens": 0},
}
BILLED = math.ceil(6_000 * INPUT_PER_MTOK + 200 * OUTPUT_PER_MTOK - 1e-9)  # 34,000 µ
FUNDED = 30_000  # covers one response's reservation, not the bill


async def _rows(storage_url: str, email: str) -> list[dict]:
    return await query_rows(
        storage_url,
        "SELECT l.status, l.outcome, l.input_tokens, l.output_tokens, l.cost_micros,"
        " l.over_reservation_micros, l.usage_implausible, l.usage_detail FROM usage_ledger l JOIN users u"
        " ON u.organization_id = l.organization_id WHERE u.email = $1 AND l.request_id LIKE '%:%'"
        " ORDER BY l.created_at, l.id",
        email,
    )


async def test_a_turn_of_appended_audio_is_charged_the_provider_bill_past_its_reservation(billed) -> None:
    tenant = await funded_tenant(billed, FUNDED)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    billed.alpha.realtime.usage = AUDIO_TURN
    secret = await asyncio.to_thread(mint, base, tenant)
    chunk = base64.b64encode(bytes(48_000)).decode()  # one second of 24 kHz PCM16 silence
    async with session() as client:
        ws = await connect(client, base, tenant, secret)
        for _ in range(3):  # three seconds, which the fake bills as far more
            await ws.send_json({"type": "input_audio_buffer.append", "audio": chunk})
        await ws.send_json({"type": "input_audio_buffer.commit"})
        await ws.send_json({"type": "response.create"})
        events = await receive_until(ws, lambda e: e["type"] == "response.done")
        assert events[-1]["response"]["usage"] == AUDIO_TURN
        [row] = await _until(lambda: _rows(storage, tenant.email), lambda r: len(r) == 1)
        assert (row["status"], row["outcome"], row["input_tokens"], row["output_tokens"]) == (
            200,
            "completed",
            6_000,
            200,
        )
        assert row["cost_micros"] == BILLED
        # Charged past the reservation, and marked: the reservation is the cost less the excess.
        assert 20_000 < BILLED - row["over_reservation_micros"] < FUNDED
        assert not row["usage_implausible"]
        assert '"input_audio_tokens":6000' in row["usage_detail"]
        await _until(lambda: stored_balance(storage, tenant.email), lambda b: b == FUNDED - BILLED)
        # The balance is below its floor now: the next response is refused before it reaches the provider.
        await ws.send_json({"type": "response.create", "event_id": "evt_next"})
        error = await receive_json(ws)
        assert error["type"] == "error", error
        assert (error["error"]["code"], error["error"]["event_id"]) == ("insufficient_balance", "evt_next")
        await ws.close()
    (upstream,) = billed.alpha.realtime.sessions
    assert upstream.received("response.create") == 1
    rows = await _until(lambda: _rows(storage, tenant.email), lambda r: len(r) == 2)
    assert [(r["status"], r["outcome"], r["cost_micros"]) for r in rows] == [
        (200, "completed", BILLED),
        (402, "refused", 0),
    ]
    assert await stored_balance(storage, tenant.email) == FUNDED - BILLED
