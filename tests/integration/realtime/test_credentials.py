"""Realtime credentials and the concurrency cap, answered as HTTP before any upgrade: a missing, unknown,
used, expired or foreign client secret is 404 `invalid_realtime_credential`; a second connect while the first
with the same secret is being established is 409 `request_in_progress`; more open sessions than the plan's
cap is 429 `rate_limit_exceeded`. Each runs with the in-process state and with Redis."""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
import pytest

from tests.fakes import Fault
from tests.integration.model_api.error_bodies import assert_envelope_a
from tests.integration.realtime.conftest import (
    RealtimeStack,
    connect,
    mint,
    plain_get,
    refused,
    session,
)


def assert_invalid_credential(response) -> None:
    assert_envelope_a(response, 404, "invalid_request_error", code="invalid_realtime_credential")


@pytest.fixture(params=["in-process", "redis"])
def rt(request: pytest.FixtureRequest, start_gateway, stack: RealtimeStack) -> RealtimeStack:
    """The module's gateway (in-process state), or one whose secrets and slots live in Redis."""
    if request.param == "in-process":
        return stack
    return start_gateway(redis_url=request.getfixturevalue("redis_url"))


@pytest.fixture
def owner(rt: RealtimeStack):
    return rt.tenant()


@pytest.fixture
def stranger(rt: RealtimeStack):
    return rt.tenant()


# -- 404 invalid_realtime_credential --------------------------------------------------------------------


def test_a_connect_without_a_secret_is_404(rt: RealtimeStack, owner) -> None:
    assert_invalid_credential(plain_get(rt.gateway.base_url, owner, None))


def test_an_unknown_secret_is_404(rt: RealtimeStack, owner) -> None:
    assert_invalid_credential(plain_get(rt.gateway.base_url, owner, "ek_made_up"))


async def test_a_used_secret_is_404(rt: RealtimeStack, owner) -> None:
    base = rt.gateway.base_url
    secret = mint(base, owner)
    async with session() as client:
        ws = await connect(client, base, owner, secret)
        # Used from the moment the session is established: while it is open...
        assert await refused(client, base, owner, secret) == 404
        await ws.close()
        # ...and after it ended.
        assert await refused(client, base, owner, secret) == 404
    assert_invalid_credential(plain_get(base, owner, secret))


async def test_an_expired_secret_is_404(rt: RealtimeStack, owner) -> None:
    base = rt.gateway.base_url
    secret = mint(base, owner, expires_after={"anchor": "created_at", "seconds": 1})
    await asyncio.sleep(1.2)  # expires_at is a whole second at most 1 s ahead
    assert_invalid_credential(plain_get(base, owner, secret))


async def test_another_keys_secret_is_404_and_stays_usable_by_its_own_key(
    rt: RealtimeStack, owner, stranger
) -> None:
    base = rt.gateway.base_url
    secret = mint(base, owner)
    async with session() as client:
        assert await refused(client, base, stranger, secret) == 404
        ws = await connect(client, base, owner, secret)
        await ws.close()


async def test_a_secret_for_another_model_is_404(rt: RealtimeStack, owner) -> None:
    secret = mint(rt.gateway.base_url, owner)
    response = plain_get(rt.gateway.base_url, owner, secret, model="realtime-failover")
    assert_invalid_credential(response)


def test_a_connect_needs_the_api_key_too(rt: RealtimeStack, owner) -> None:
    secret = mint(rt.gateway.base_url, owner)
    response = httpx.get(f"{rt.gateway.base_url}/v1/realtime", params={"client_secret": secret}, timeout=30)
    assert_envelope_a(response, 401, "invalid_request_error")


# -- 409 request_in_progress: two connects, one secret ---------------------------------------------------


async def test_two_concurrent_connects_with_one_secret_one_wins_one_is_409(rt: RealtimeStack, owner) -> None:
    base = rt.gateway.base_url
    secret = mint(base, owner)
    rt.alpha.realtime.hold_gate = "handshake"  # the winner's session stays "being established"
    async with session() as client:

        async def attempt() -> aiohttp.ClientWebSocketResponse | int:
            try:
                return await connect(client, base, owner, secret)
            except aiohttp.WSServerHandshakeError as refusal:
                return refusal.status

        first, second = asyncio.ensure_future(attempt()), asyncio.ensure_future(attempt())
        done, pending = await asyncio.wait({first, second}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert [task.result() for task in done] == [409]
        assert await asyncio.to_thread(rt.alpha.wait_held, "handshake", 5)
        rt.alpha.release("handshake")
        (winner,) = await asyncio.gather(*pending)
        assert isinstance(winner, aiohttp.ClientWebSocketResponse)
        # Single use: once the winner is established, the secret is used.
        assert await refused(client, base, owner, secret) == 404
        await winner.close()
    assert len(rt.alpha.realtime.sessions) == 1


# -- 429: the plan's concurrent cap --------------------------------------------------------------------


async def test_sessions_over_the_plans_cap_are_429_until_one_closes(rt: RealtimeStack, owner) -> None:
    base = rt.gateway.base_url
    secrets = [mint(base, owner) for _ in range(4)]
    async with session() as client:
        first = await connect(client, base, owner, secrets[0])
        second = await connect(client, base, owner, secrets[1])
        # The cap is 2 per organization (another key of it counts too).
        assert await refused(client, base, owner, secrets[2]) == 429
        assert_envelope_a(
            plain_get(base, owner, secrets[2]), 429, "rate_limit_error", code="rate_limit_exceeded"
        )
        await first.close()
        assert await asyncio.to_thread(rt.alpha.realtime.wait_closed, 1)
        # The slot is back once the gateway has closed the provider's side too (its close handshake ends just
        # after the fake's), and the refused secret was not used up by the refusal.
        third = await _once_a_slot_is_back(client, base, owner, secrets[2])
        await second.close()
        await third.close()


async def _once_a_slot_is_back(
    client: aiohttp.ClientSession, base: str, owner, secret: str
) -> aiohttp.ClientWebSocketResponse:
    """Connect with `secret`, refused 429 (nothing else) until the closing session's slot is given back."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while True:
        try:
            return await connect(client, base, owner, secret)
        except aiohttp.WSServerHandshakeError as exc:
            assert exc.status == 429 and loop.time() < deadline, exc
        await asyncio.sleep(0.02)


async def test_the_cap_is_per_organization(rt: RealtimeStack, owner, stranger) -> None:
    base = rt.gateway.base_url
    async with session() as client:
        mine = [await connect(client, base, owner, mint(base, owner)) for _ in range(2)]
        theirs = await connect(client, base, stranger, mint(base, stranger))
        for ws in [*mine, theirs]:
            await ws.close()


async def test_a_session_that_fails_to_open_gives_its_slot_back(rt: RealtimeStack, owner) -> None:
    base = rt.gateway.base_url
    rt.alpha.add_fault("/v1/realtime", Fault(status=500), times=3)
    async with session() as client:
        for _ in range(3):
            assert await refused(client, base, owner, mint(base, owner)) == 502
        opened = [await connect(client, base, owner, mint(base, owner)) for _ in range(2)]
        for ws in opened:
            await ws.close()
