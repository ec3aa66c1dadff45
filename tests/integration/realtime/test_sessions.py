"""GET /v1/realtime: the client is upgraded to a WebSocket relayed to the row's realtime endpoint — text and
binary frames both ways, the provider's model name and key upstream, and a clean close from either side."""

from __future__ import annotations

import asyncio
import base64

import aiohttp

from tests.fakes import Fault
from tests.integration.model_api.error_bodies import assert_envelope_a
from tests.integration.realtime.conftest import (
    UPSTREAM_KEY,
    RealtimeStack,
    connect,
    mint,
    plain_get,
    receive_json,
    refused,
    session,
)


async def test_text_and_binary_frames_are_relayed_both_ways(stack: RealtimeStack, tenant) -> None:
    secret = mint(stack.gateway.base_url, tenant)
    async with session() as client:
        ws = await connect(client, stack.gateway.base_url, tenant, secret)
        await ws.send_json({"type": "input_audio_buffer.append", "audio": "AAAA"})
        assert await receive_json(ws) == {
            "type": "echo",
            "event": {"type": "input_audio_buffer.append", "audio": "AAAA"},
        }
        frame = bytes(range(256)) * 300
        await ws.send_bytes(frame)
        echoed = await ws.receive(timeout=10)
        assert echoed.type is aiohttp.WSMsgType.BINARY and echoed.data == frame
        await ws.close()
    (upstream,) = stack.alpha.realtime.sessions
    assert upstream.model == "gpt-realtime-upstream"  # the row's model name, not the client's
    assert upstream.authorization == f"Bearer {UPSTREAM_KEY}"  # the provider's key, not the client's
    assert upstream.events[0]["type"] == "input_audio_buffer.append" and upstream.binary_frames == 1


async def test_the_api_key_may_come_as_x_api_key(stack: RealtimeStack, tenant) -> None:
    secret = mint(stack.gateway.base_url, tenant)
    async with session() as client:
        ws = await connect(client, stack.gateway.base_url, tenant, secret, header="x-api-key")
        await ws.send_json({"type": "ping"})
        assert (await receive_json(ws))["type"] == "echo"
        await ws.close()


async def test_the_model_may_be_left_to_the_secret(stack: RealtimeStack, tenant) -> None:
    secret = mint(stack.gateway.base_url, tenant)
    async with session() as client:
        ws = await connect(client, stack.gateway.base_url, tenant, secret, model=None)
        await ws.close()
    assert stack.alpha.realtime.sessions[0].model == "gpt-realtime-upstream"


async def test_a_client_close_closes_the_upstream_with_its_code(stack: RealtimeStack, tenant) -> None:
    secret = mint(stack.gateway.base_url, tenant)
    async with session() as client:
        ws = await connect(client, stack.gateway.base_url, tenant, secret)
        await ws.send_json({"type": "hello"})
        await receive_json(ws)
        await ws.close(code=4001, message=b"bye")
    assert await asyncio.to_thread(stack.alpha.realtime.wait_closed, 1)
    (upstream,) = stack.alpha.realtime.sessions
    assert (upstream.closed_by, upstream.close_code) == ("client", 4001)


async def test_every_frame_the_client_sent_before_its_close_reaches_the_provider(
    stack: RealtimeStack, tenant
) -> None:
    """The provider reads slowly and answers every frame (the fake echoes it) while the client sends 8 MB of
    audio and closes at once: the gateway closes the provider's side with a close handshake, reading what it
    still sends, so the provider reads every frame and the client's code. A connection closed with its
    answers unread would be reset, and the provider would lose what it had not read yet."""
    frames, chunk = 40, base64.b64encode(bytes(150_000)).decode()
    secret = mint(stack.gateway.base_url, tenant)
    async with session() as client:
        ws = await connect(client, stack.gateway.base_url, tenant, secret)
        await ws.send_json({"type": "fake.hold_reading", "gate": "reading"})
        assert await asyncio.to_thread(stack.alpha.wait_held, "reading", 5)
        for _ in range(frames):
            await ws.send_json({"type": "input_audio_buffer.append", "audio": chunk})
        closing = asyncio.ensure_future(ws.close(code=4001))
        stack.alpha.release("reading")
        await closing
    closed = await asyncio.to_thread(stack.alpha.realtime.wait_closed)
    (upstream,) = stack.alpha.realtime.sessions
    assert closed, (upstream.received("input_audio_buffer.append"), upstream.closed_by)
    assert upstream.received("input_audio_buffer.append") == frames
    assert (upstream.closed_by, upstream.close_code) == ("client", 4001)


async def test_an_upstream_close_closes_the_client_with_its_code(stack: RealtimeStack, tenant) -> None:
    secret = mint(stack.gateway.base_url, tenant)
    async with session() as client:
        ws = await connect(client, stack.gateway.base_url, tenant, secret)
        await ws.send_json({"type": "fake.close", "code": 4002})
        message = await ws.receive(timeout=10)
        assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 4002
        assert (await ws.receive(timeout=10)).type is aiohttp.WSMsgType.CLOSED
    assert await asyncio.to_thread(stack.alpha.realtime.wait_closed, 1)
    assert stack.alpha.realtime.sessions[0].closed_by == "fake"


async def test_session_options_of_the_secret_open_the_session(stack: RealtimeStack, tenant) -> None:
    secret = mint(stack.gateway.base_url, tenant, instructions="speak like a pirate")
    async with session() as client:
        ws = await connect(client, stack.gateway.base_url, tenant, secret)
        updated = await receive_json(ws)
        assert updated == {
            "type": "session.updated",
            "session": {"type": "realtime", "instructions": "speak like a pirate"},
        }
        await ws.close()
    assert stack.alpha.realtime.sessions[0].events[0]["type"] == "session.update"


async def test_a_failing_row_is_failed_over_before_the_upgrade(stack: RealtimeStack, tenant) -> None:
    stack.beta.add_fault("/v1/realtime", Fault(status=503))
    secret = mint(stack.gateway.base_url, tenant, model="realtime-failover")
    async with session() as client:
        ws = await connect(client, stack.gateway.base_url, tenant, secret, model="realtime-failover")
        await ws.close()
    assert stack.alpha.realtime.sessions[0].model == "rt-alpha"
    assert stack.beta.realtime.sessions == []


async def test_no_reachable_row_is_502_and_leaves_the_secret_usable(stack: RealtimeStack, tenant) -> None:
    stack.alpha.add_fault("/v1/realtime", Fault(status=500))
    base = stack.gateway.base_url
    secret = mint(base, tenant)
    async with session() as client:
        assert await refused(client, base, tenant, secret) == 502
        # The session never opened, so the secret was not used: it still works, once.
        ws = await connect(client, base, tenant, secret)
        await ws.close()
        assert await refused(client, base, tenant, secret) == 404


async def test_a_plain_get_without_an_upgrade_is_400_and_leaves_the_secret_usable(
    stack: RealtimeStack, tenant
) -> None:
    base = stack.gateway.base_url
    secret = mint(base, tenant)
    assert_envelope_a(plain_get(base, tenant, secret), 400, "invalid_request_error")
    async with session() as client:
        ws = await connect(client, base, tenant, secret)
        await ws.close()


async def test_a_row_without_a_realtime_endpoint_is_502(stack: RealtimeStack, tenant) -> None:
    secret = mint(stack.gateway.base_url, tenant, model="realtime-mock")
    async with session() as client:
        assert await refused(client, stack.gateway.base_url, tenant, secret, model="realtime-mock") == 502


async def test_shutdown_closes_open_sessions_with_going_away(start_gateway) -> None:
    own = start_gateway()
    tenant = await asyncio.to_thread(own.tenant)
    secret = mint(own.gateway.base_url, tenant)
    async with session() as client:
        ws = await connect(client, own.gateway.base_url, tenant, secret)
        await ws.send_json({"type": "hello"})
        await receive_json(ws)
        await asyncio.to_thread(own.gateway.stop)
        message = await ws.receive(timeout=10)
        assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1001
    assert await asyncio.to_thread(own.alpha.realtime.wait_closed, 1)
