"""A realtime session is reserved and charged per model response, as it goes: each `response.create` (or
response the server starts by itself) reserves one response's worst case, each `response.done` settles it and
writes its own ledger row at once, a response the balance cannot cover is refused with an `error` event while
the session stays open, and a session that ends mid-response holds nothing afterwards.

Run on SQLite with in-process counters, and on PostgreSQL with Redis counters. The `realtime-tight` model has
free input, so one response's worst case is exactly its output allowance: 100 tokens at 20 µ = 2000 µ, and the
fake's answers cost 20 output tokens = 400 µ (a cancelled one 5 tokens = 100 µ).
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from tests.fakes.media_records import RealtimeSession
from tests.fakes.realtime_routes import USAGE
from tests.integration.realtime.conftest import (
    ANSWER,
    CANCELLED,
    INPUT_PER_MTOK,
    OUTPUT_PER_MTOK,
    TIGHT,
    WORST,
    connect,
    funded_tenant,
    mint,
    query_rows,
    receive_json,
    receive_until,
    refused,
    response_rows,
    row_summary,
    session,
    stored_balance,
)
from tests.support.gateway import add_budget


async def _until(read: Callable[[], Awaitable[Any]], expected: Callable[[Any], bool]) -> Any:
    """Poll `read` until its value is `expected` (or fail with the last value seen after 10 s)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    while True:
        value = await read()
        if expected(value):
            return value
        assert loop.time() < deadline, f"not reached in time; last seen: {value!r}"
        await asyncio.sleep(0.05)


def _kind(error_event: dict) -> tuple[str, str]:
    return error_event["error"]["type"], error_event["error"]["code"]


def _cancelled_ids(upstream: RealtimeSession) -> list[str | None]:
    """The response ids of the `response.cancel` events the fake received."""
    return [e.get("response_id") for e in upstream.events if e["type"] == "response.cancel"]


async def test_each_response_done_writes_its_row_and_moves_the_balance_at_once(billed) -> None:
    tenant = await funded_tenant(billed, 1_000_000_000)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    start = await stored_balance(storage, tenant.email)
    secret = await asyncio.to_thread(mint, base, tenant)
    # Cached input has no price of its own in this config: it costs the input price (a provider that gives no
    # discount bills it whole; docs/prices.md), so every input token is at the input price.
    cost = math.ceil(USAGE["input_tokens"] * INPUT_PER_MTOK + USAGE["output_tokens"] * OUTPUT_PER_MTOK - 1e-9)
    async with session() as client:
        ws = await connect(client, base, tenant, secret)
        for count in (1, 2, 3):
            await ws.send_json({"type": "response.create"})
            done = await receive_json(ws)
            assert done["type"] == "response.done"
            # Written while the session is still open, one row per response.
            rows = await _until(lambda: response_rows(storage, tenant.email), lambda r, n=count: len(r) == n)
            assert rows[-1]["request_id"].endswith(":" + done["response"]["id"])
            assert (rows[-1]["input_tokens"], rows[-1]["cached_input_tokens"], rows[-1]["output_tokens"]) == (
                USAGE["input_tokens"],
                USAGE["input_token_details"]["cached_tokens"],
                USAGE["output_tokens"],
            )
            assert (rows[-1]["status"], rows[-1]["outcome"], rows[-1]["cost_micros"]) == (
                200,
                "completed",
                cost,
            )
            await _until(
                lambda: stored_balance(storage, tenant.email), lambda b, n=count: b == start - n * cost
            )
        await ws.close()
    assert await asyncio.to_thread(billed.alpha.realtime.wait_closed, 1)
    await _until(lambda: stored_balance(storage, tenant.email), lambda b: b == start - 3 * cost)


async def test_a_balance_for_two_responses_runs_two_and_refuses_the_third_in_the_open_session(billed) -> None:
    # Two responses fit one after the other (each settles to 400 µ); the third's 2000 µ no longer does.
    funded = WORST + ANSWER + ANSWER // 2
    tenant = await funded_tenant(billed, funded)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        for _ in range(2):
            await ws.send_json({"type": "response.create"})
            assert (await receive_json(ws))["type"] == "response.done"
        await ws.send_json({"type": "response.create", "event_id": "evt_third"})
        error = await receive_json(ws)
        assert error["type"] == "error"
        assert (error["error"]["type"], error["error"]["code"]) == (
            "insufficient_quota",
            "insufficient_balance",
        )
        assert "balance" in error["error"]["message"].lower()
        assert error["error"]["event_id"] == "evt_third"
        # The session stays open and relays as before.
        await ws.send_json({"type": "ping"})
        assert (await receive_json(ws))["type"] == "echo"
        (upstream,) = billed.alpha.realtime.sessions
        assert upstream.received("response.create") == 2  # the third never reached the provider
        await ws.close()
    rows = await _until(lambda: response_rows(storage, tenant.email), lambda r: len(r) == 3)
    assert [row_summary(row) for row in rows] == [
        (200, "completed", 20, ANSWER),
        (200, "completed", 20, ANSWER),
        (402, "refused", 0, 0),
    ]
    await _until(lambda: stored_balance(storage, tenant.email), lambda b: b == funded - 2 * ANSWER)


async def test_a_server_started_response_over_the_balance_is_cancelled_upstream(billed) -> None:
    funded = WORST + ANSWER // 2  # one response fits; after it (400 µ) the next 2000 µ does not
    tenant = await funded_tenant(billed, funded)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    realtime = billed.alpha.realtime
    realtime.announce_responses = realtime.server_vad = True
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json({"type": "response.create"})
        events = await receive_until(ws, lambda e: e["type"] == "response.done")
        assert [e["type"] for e in events] == ["response.created", "response.done"]
        realtime.hold_responses = True  # the server's own response runs until it is cancelled
        await ws.send_json({"type": "input_audio_buffer.commit"})  # server VAD starts a response
        events = await receive_until(ws, lambda e: e["type"] == "response.done")
        server_id = next(e["response"]["id"] for e in events if e["type"] == "response.created")
        (error,) = [e for e in events if e["type"] == "error"]
        assert (error["error"]["type"], error["error"]["code"]) == (
            "insufficient_quota",
            "insufficient_balance",
        )
        assert events[-1]["response"] == {**events[-1]["response"], "id": server_id, "status": "cancelled"}
        (upstream,) = realtime.sessions
        assert [e.get("response_id") for e in upstream.events if e["type"] == "response.cancel"] == [
            server_id
        ]
        await ws.send_json({"type": "ping"})
        assert (await receive_json(ws))["type"] == "echo"
        await ws.close()
    rows = await _until(lambda: response_rows(storage, tenant.email), lambda r: len(r) == 2)
    assert [row_summary(row) for row in rows] == [(200, "completed", 20, ANSWER), (402, "refused", 0, 0)]
    assert rows[1]["request_id"].endswith(":" + server_id)
    await _until(lambda: stored_balance(storage, tenant.email), lambda b: b == funded - ANSWER)


async def test_a_client_killed_mid_response_is_charged_its_usage_and_holds_nothing(billed) -> None:
    # Room for one response; if the killed one's 2000 µ stayed held, the next session could not start.
    funded = WORST + CANCELLED + 50
    tenant = await funded_tenant(billed, funded)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    realtime = billed.alpha.realtime
    realtime.announce_responses = realtime.hold_responses = True
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json({"type": "response.create"})
        events = await receive_until(ws, lambda e: e["type"] == "response.output_audio.delta")
        response_id = events[0]["response"]["id"]
        # The client dies: its socket ends with no WebSocket close frame.
        ws.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
        assert await asyncio.to_thread(realtime.wait_closed, 1)
    (upstream,) = realtime.sessions
    # The gateway cancelled the running response and charged the usage it reported.
    assert _cancelled_ids(upstream) == [response_id]
    rows = await _until(lambda: response_rows(storage, tenant.email), lambda r: len(r) == 1)
    assert [row_summary(row) for row in rows] == [(200, "client_closed", 5, CANCELLED)]
    realtime.hold_responses = False
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json({"type": "response.create"})
        events = await receive_until(ws, lambda e: e["type"] in ("response.done", "error"))
        assert events[-1]["type"] == "response.done"
        await ws.close()
    await _until(lambda: stored_balance(storage, tenant.email), lambda b: b == funded - CANCELLED - ANSWER)


async def test_an_upstream_gone_mid_response_releases_its_reservation(billed) -> None:
    funded = WORST + 50
    tenant = await funded_tenant(billed, funded)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    realtime = billed.alpha.realtime
    realtime.announce_responses = realtime.hold_responses = True
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json({"type": "response.create"})
        await receive_until(ws, lambda e: e["type"] == "response.output_audio.delta")
        await ws.send_json({"type": "fake.close", "code": 4002})
        message = await ws.receive(timeout=10)
        assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 4002
    rows = await _until(lambda: response_rows(storage, tenant.email), lambda r: len(r) == 1)
    assert [row_summary(row) for row in rows] == [(502, "upstream_error", 0, 0)]
    realtime.hold_responses = False
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)  # 402 if the lost response still held 2000 µ
        await ws.send_json({"type": "response.create"})
        events = await receive_until(ws, lambda e: e["type"] in ("response.done", "error"))
        assert events[-1]["type"] == "response.done"
        await ws.close()


async def test_a_session_that_cannot_afford_one_response_is_402_before_the_upgrade(billed) -> None:
    tenant = await funded_tenant(billed, WORST - 1)
    base = billed.gateway.base_url
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        assert await refused(client, base, tenant, secret, model=TIGHT) == 402
    assert billed.alpha.realtime.sessions == []


async def test_the_connect_holds_nothing_so_one_response_may_use_the_whole_balance(billed) -> None:
    tenant = await funded_tenant(billed, WORST)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json({"type": "response.create"})
        assert (await receive_json(ws))["type"] == "response.done"
        await ws.close()
    rows = await _until(lambda: response_rows(storage, tenant.email), lambda r: len(r) == 1)
    assert [row_summary(row) for row in rows] == [(200, "completed", 20, ANSWER)]


async def test_a_policy_budget_is_reserved_and_charged_per_response(billed) -> None:
    tenant = await funded_tenant(billed, 1_000_000_000)  # the balance is ample: the budget is what runs out
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    budget = WORST + ANSWER + ANSWER // 2
    await asyncio.to_thread(add_budget, base, tenant, budget)
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        for _ in range(2):
            await ws.send_json({"type": "response.create"})
            assert (await receive_json(ws))["type"] == "response.done"
        await ws.send_json({"type": "response.create"})
        error = await receive_json(ws)
        assert _kind(error) == ("insufficient_quota", "insufficient_balance")
        assert "budget" in error["error"]["message"]
        await ws.close()
    spent = await _until(
        lambda: query_rows(
            storage,
            "SELECT s.spent_micros FROM policy_budget_spend s JOIN policy_rules r ON r.id = s.rule_id"
            " JOIN users u ON u.organization_id = r.organization_id WHERE u.email = $1",
            tenant.email,
        ),
        lambda rows: rows == [{"spent_micros": 2 * ANSWER}],
    )
    assert spent == [{"spent_micros": 2 * ANSWER}]


async def test_responses_the_server_starts_are_reserved_and_charged_like_the_clients(billed) -> None:
    funded = WORST + ANSWER  # room for two responses, one after the other
    tenant = await funded_tenant(billed, funded)
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    realtime = billed.alpha.realtime
    realtime.server_vad = realtime.announce_responses = True
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json({"type": "input_audio_buffer.commit"})  # reserved at its response.created
        events = await receive_until(ws, lambda e: e["type"] == "response.done")
        assert [e["type"] for e in events] == [
            "input_audio_buffer.committed",
            "response.created",
            "response.done",
        ]
        realtime.announce_responses = False  # an upstream that reports only the response's end
        await ws.send_json({"type": "input_audio_buffer.commit"})
        events = await receive_until(ws, lambda e: e["type"] == "response.done")
        assert [e["type"] for e in events] == ["input_audio_buffer.committed", "response.done"]
        await ws.close()
    rows = await _until(lambda: response_rows(storage, tenant.email), lambda r: len(r) == 2)
    assert [row_summary(row) for row in rows] == [(200, "completed", 20, ANSWER)] * 2
    await _until(lambda: stored_balance(storage, tenant.email), lambda b: b == funded - 2 * ANSWER)


async def test_a_response_create_is_reserved_whatever_text_it_carries(billed) -> None:
    tenant = await funded_tenant(billed, WORST + ANSWER // 2)  # one response fits, not two
    base = billed.gateway.base_url
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    # Text that names another event type must not make the gateway take it for that event.
    decoy = {"type": "response.create", "response": {"instructions": "input_audio_buffer.append"}}
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json(decoy)
        assert (await receive_json(ws))["type"] == "response.done"
        await ws.send_json(decoy)
        assert _kind(await receive_json(ws)) == ("insufficient_quota", "insufficient_balance")
        await ws.close()
    assert billed.alpha.realtime.sessions[0].received("response.create") == 1


async def test_a_response_create_the_provider_rejects_gives_its_reservation_back(billed) -> None:
    tenant = await funded_tenant(billed, WORST + 50)  # room for one response's reservation at a time
    base, storage = billed.gateway.base_url, billed.gateway.storage_url
    realtime = billed.alpha.realtime
    realtime.reject_responses = True
    secret = await asyncio.to_thread(mint, base, tenant, TIGHT)
    async with session() as client:
        ws = await connect(client, base, tenant, secret, TIGHT)
        await ws.send_json({"type": "response.create", "event_id": "evt_rejected"})
        error = await receive_json(ws)
        assert (error["type"], error["error"]["event_id"]) == ("error", "evt_rejected")
        realtime.reject_responses = False
        await ws.send_json({"type": "response.create"})  # refused if the rejected one still held 2000 µ
        assert (await receive_json(ws))["type"] == "response.done"
        await ws.close()
    rows = await _until(lambda: response_rows(storage, tenant.email), lambda r: len(r) == 1)
    assert [row_summary(row) for row in rows] == [(200, "completed", 20, ANSWER)]
