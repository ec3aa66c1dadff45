"""The one-time code the callback hands the cabinet: POST /api/auth/oidc/exchange turns it into the session
token once, within a minute; the database alone never yields the token."""

from __future__ import annotations

import asyncio

import pytest

from modelgate.domain.tokens import hash_token
from tests.integration.oidc.browser import Browser
from tests.integration.oidc.fake_idp import FakeIdp
from tests.integration.oidc.sso_client import SsoGateway

INVALID = {"error": "code is invalid, expired or already used"}


async def _code(gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser) -> str:
    owner = await gateway.cabinet.register()
    provider_id = await gateway.ready_provider(
        owner, fake_idp.issuer, clientId="fake-client", clientSecret="fake-secret"
    )
    journey = await browser.sign_in(gateway.login_url(provider_id), "")
    return journey.params["code"]


async def test_a_login_code_works_once(gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser) -> None:
    code = await _code(gateway, fake_idp, browser)

    first = await gateway.exchange(code)
    second = await gateway.exchange(code)

    assert (first.status, first.body["email"]) == (200, "fiona@allowed.test")
    assert (second.status, second.body) == (400, INVALID)


async def test_a_login_code_redeemed_twice_at_once_works_once(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    code = await _code(gateway, fake_idp, browser)

    replies = await asyncio.gather(gateway.exchange(code), gateway.exchange(code))

    assert sorted(r.status for r in replies) == [200, 400]


async def test_an_expired_login_code_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    code = await _code(gateway, fake_idp, browser)
    await gateway.cabinet.db.execute("UPDATE oidc_login_codes SET expires_at = created_at - 1")

    reply = await gateway.exchange(code)

    assert (reply.status, reply.body) == (400, INVALID)


async def test_the_session_token_is_stored_sealed_under_the_code(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    code = await _code(gateway, fake_idp, browser)
    [row] = await gateway.cabinet.db.fetch("SELECT code_hash, sealed_token FROM oidc_login_codes")

    token = (await gateway.exchange(code)).body["token"]

    assert row["code_hash"] == hash_token(code)
    assert token not in row["sealed_token"] and code not in row["sealed_token"]
    assert await gateway.cabinet.db.fetchval("SELECT COUNT(*) FROM oidc_login_codes") == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"code": "never-issued"}, INVALID["error"]),
        ({"code": "x" * 500}, INVALID["error"]),
        ({}, "code is required"),
        ({"code": 42}, "code must be a string"),
    ],
)
async def test_a_bad_exchange_request_is_400(gateway: SsoGateway, body: dict, message: str) -> None:
    reply = await gateway.cabinet.call("POST", "/auth/oidc/exchange", json=body)

    assert (reply.status, reply.body) == (400, {"error": message})
