"""A realtime response's reservation counts the audio the client appended to the input buffer (issue #32): at
the model's audio input rate, 1 token per 100 ms (modelgate/domain/charges.py), from the decoded size and
the session's input format (PCM16 24 kHz: 48,000 bytes a second; G.711 8 kHz: 8,000). A clear empties the
count; a response consumes what was committed before it. Issue #32's row "realtime turn with 180 s of appended
audio". On SQLite with in-process counters and on PostgreSQL with Redis counters (the `billed` fixture).

`realtime-test` prices input at 5 and output at 20 USD per million tokens, with `default_max_tokens` 1000: a
response.create without a cap reserves its 1000 output tokens (20,000 µ) and an input bound of the session's
text and one turn of speech (about 5,300 µ); 180 s of appended audio add 1,800 tokens, 9,000 µ.
"""

from __future__ import annotations

import asyncio
import base64
import math

import aiohttp
import pytest

from tests.integration.realtime.conftest import (
    INPUT_PER_MTOK,
    OUTPUT_PER_MTOK,
    connect,
    funded_tenant,
    mint,
    receive_until,
    session,
    stored_balance,
)
from tests.integration.realtime.test_billing import _until
from tests.integration.realtime.test_true_charges import _rows

TURN_SECONDS = 180
AUDIO_TOKENS = TURN_SECONDS * 10  # what the provider bills for them: 1 token per 100 ms
# The provider's bill of the turn: its audio, and the whole output allowance of the response.
AUDIO_TURN = {
    "total_tokens": AUDIO_TOKENS + 1_000,
    "input_tokens": AUDIO_TOKENS,
    "output_tokens": 1_000,
    "input_token_details": {"cached_tokens": 0, "text_tokens": 0, "audio_tokens": AUDIO_TOKENS},
    "output_token_details": {"text_tokens": 1_000, "audio_tokens": 0},
}
BILLED = math.ceil(AUDIO_TOKENS * INPUT_PER_MTOK + 1_000 * OUTPUT_PER_MTOK - 1e-9)  # 29,000 µ
# Covers a response's reservation without audio (and the connect's check), not with 180 s of it.
FUNDED = 30_000


async def _append(
    ws: aiohttp.ClientWebSocketResponse, bytes_per_second: int, seconds: int = TURN_SECONDS
) -> None:
    """`seconds` of silence in the buffer, ten seconds a frame."""
    chunk = base64.b64encode(bytes(bytes_per_second * 10)).decode()
    for _ in range(seconds // 10):
        await ws.send_json({"type": "input_audio_buffer.append", "audio": chunk})


async def test_a_long_audio_turn_is_reserved_its_bill_and_charged_exactly_that(billed) -> None:
    tenant = await funded_tenant(billed, 100_000)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    billed.alpha.realtime.usage = AUDIO_TURN
    secret = await asyncio.to_thread(mint, base, tenant)
    async with session() as client:
        ws = await connect(client, base, tenant, secret)
        await _append(ws, 48_000)  # PCM16, the default input format
        await ws.send_json({"type": "input_audio_buffer.commit"})
        await ws.send_json({"type": "response.create"})
        events = await receive_until(ws, lambda e: e["type"] in ("response.done", "error"))
        assert events[-1]["type"] == "response.done", events[-1]
        [row] = await _until(lambda: _rows(storage, tenant.email), lambda r: len(r) == 1)
        await ws.close()
    assert (row["status"], row["outcome"], row["input_tokens"], row["output_tokens"]) == (
        200,
        "completed",
        AUDIO_TOKENS,
        1_000,
    )
    assert row["cost_micros"] == BILLED
    assert row["over_reservation_micros"] == 0  # bounded up front: no overrun
    await _until(lambda: stored_balance(storage, tenant.email), lambda b: b == 100_000 - BILLED)


async def test_a_balance_below_the_audio_bound_is_refused_before_the_provider_sees_the_response(
    billed,
) -> None:
    tenant = await funded_tenant(billed, FUNDED)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    secret = await asyncio.to_thread(mint, base, tenant)
    async with session() as client:
        ws = await connect(client, base, tenant, secret)
        # G.711 μ-law (the GA session shape): 8,000 bytes a second, so 180 s are 1.44 MB, not 30 s of PCM16.
        update = {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}
        await ws.send_json({"type": "session.update", "session": update})
        await _append(ws, 8_000)
        await ws.send_json({"type": "input_audio_buffer.commit"})
        await ws.send_json({"type": "response.create", "event_id": "evt_turn"})
        events = await receive_until(ws, lambda e: e["type"] in ("response.done", "error"))
        error = events[-1]
        assert error["type"] == "error", error
        assert (error["error"]["code"], error["error"]["event_id"]) == ("insufficient_balance", "evt_turn")
        await ws.close()
    # The fake has read every frame the gateway forwarded once its side of the session is closed.
    assert await asyncio.to_thread(billed.alpha.realtime.wait_closed, 1)
    (upstream,) = billed.alpha.realtime.sessions
    assert upstream.received("input_audio_buffer.append") == TURN_SECONDS // 10
    assert upstream.received("response.create") == 0
    rows = await _until(lambda: _rows(storage, tenant.email), lambda r: len(r) == 1)
    assert [(r["status"], r["outcome"], r["cost_micros"]) for r in rows] == [(402, "refused", 0)]
    assert await stored_balance(storage, tenant.email) == FUNDED


async def test_a_cleared_buffer_no_longer_counts(billed) -> None:
    tenant = await funded_tenant(billed, FUNDED)
    base = billed.gateway.base_url
    secret = await asyncio.to_thread(mint, base, tenant)
    async with session() as client:
        ws = await connect(client, base, tenant, secret)
        # G.711 A-law (the beta session shape).
        await ws.send_json({"type": "session.update", "session": {"input_audio_format": "g711_alaw"}})
        await _append(ws, 8_000)
        await ws.send_json({"type": "input_audio_buffer.clear"})
        await ws.send_json({"type": "response.create", "event_id": "evt_cleared"})
        events = await receive_until(ws, lambda e: e["type"] in ("response.done", "error"))
        assert events[-1]["type"] == "response.done", events[-1]
        # The same turn, committed this time: counted, and over the balance.
        await _append(ws, 8_000)
        await ws.send_json({"type": "input_audio_buffer.commit"})
        await ws.send_json({"type": "response.create", "event_id": "evt_counted"})
        events = await receive_until(ws, lambda e: e["type"] in ("response.done", "error"))
        assert events[-1]["type"] == "error", events[-1]
        assert events[-1]["error"]["event_id"] == "evt_counted"
        await ws.close()
    # The fake has read every frame the gateway forwarded once its side of the session is closed.
    assert await asyncio.to_thread(billed.alpha.realtime.wait_closed, 1)
    (upstream,) = billed.alpha.realtime.sessions
    assert upstream.received("response.create") == 1


@pytest.mark.parametrize("empty_commit_first", [False, True])
async def test_audio_the_server_commits_is_reserved_by_its_response_and_consumed_by_it(
    billed, empty_commit_first: bool
) -> None:
    # After the first turn the conversation holds 2,800 tokens: a second response reserves about 39,100 µ,
    # 48,100 µ if the 180 s were still counted. What the first bill leaves covers the one, not the other.
    funded = BILLED + 43_000
    tenant = await funded_tenant(billed, funded)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    realtime = billed.alpha.realtime
    realtime.server_vad = realtime.announce_responses = realtime.empty_commit_error = True
    realtime.usage = AUDIO_TURN
    secret = await asyncio.to_thread(mint, base, tenant)
    async with session() as client:
        ws = await connect(client, base, tenant, secret)
        if empty_commit_first:  # refused upstream: the server's next commit is not an answer to it
            await ws.send_json({"type": "input_audio_buffer.commit", "event_id": "evt_empty"})
            events = await receive_until(ws, lambda e: e["type"] == "error")
            assert events[-1]["error"]["code"] == "input_audio_buffer_commit_empty"
        await _append(ws, 48_000)
        await ws.send_json({"type": "fake.speech_stopped"})  # the server commits and answers by itself
        events = await receive_until(ws, lambda e: e["type"] in ("response.done", "error"))
        assert [e["type"] for e in events if e["type"] != "echo"] == [
            "input_audio_buffer.committed",
            "response.created",
            "response.done",
        ]
        await ws.send_json({"type": "fake.speech_stopped"})  # a turn of no new audio
        events = await receive_until(ws, lambda e: e["type"] in ("response.done", "error"))
        assert events[-1]["type"] == "response.done", events[-1]
        rows = await _until(lambda: _rows(storage, tenant.email), lambda r: len(r) == 2)
        await ws.close()
    assert [(r["outcome"], r["cost_micros"], r["over_reservation_micros"]) for r in rows] == [
        ("completed", BILLED, 0)
    ] * 2
