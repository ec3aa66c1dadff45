"""GET /api/auth/oidc/{providerId}/login for providers that cannot be used: 404 (or 409 without the
server's public URL), never a redirect."""

from __future__ import annotations

import logging

import pytest

from modelgate.cabinet.oidc import login
from tests.integration.oidc.browser import Browser
from tests.integration.oidc.conftest import GatewayFactory
from tests.integration.oidc.fake_idp import FakeIdp
from tests.integration.oidc.sso_client import SsoGateway


@pytest.mark.parametrize("provider_id", ["oidc_000000000000000000000000", "google", "..%2F..%2Fadmin"])
async def test_an_unknown_provider_is_404(gateway: SsoGateway, browser: Browser, provider_id: str) -> None:
    reply = await browser.open(gateway.login_url(provider_id))

    assert (reply.status_code, reply.json()) == (404, {"error": "identity provider not found"})


async def test_an_undiscovered_provider_is_404(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner = await gateway.cabinet.register()
    created = await gateway.add_provider(owner, fake_idp.issuer)

    reply = await browser.open(gateway.login_url(created.body["id"]))

    assert reply.status_code == 404
    assert reply.json() == {"error": "identity provider is not ready for login: run discovery first"}


async def test_a_deleted_provider_is_404(gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser) -> None:
    owner = await gateway.cabinet.register()
    provider_id = await gateway.ready_provider(owner, fake_idp.issuer)
    await gateway.cabinet.call("DELETE", f"/auth/oidc/providers/{provider_id}", token=owner.token)

    reply = await browser.open(gateway.login_url(provider_id))

    assert reply.status_code == 404


async def test_without_a_public_url_sso_login_and_callback_are_409_with_an_operator_log_line(
    start_gateway: GatewayFactory, browser: Browser, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = await start_gateway(public_url="")

    with caplog.at_level(logging.WARNING, logger="modelgate.cabinet.oidc"):
        login_reply = await browser.open(gateway.login_url("oidc_000000000000000000000000"))
        callback_reply = await browser.open(f"{gateway.base_url}/api/auth/oidc/callback?code=c&state=s")

    for reply in (login_reply, callback_reply):
        assert reply.status_code == 409
        assert reply.json() == {"error": "SSO requires server.public_url to be configured"}
    operator_lines = [r.getMessage() for r in caplog.records if "public_url is not set" in r.getMessage()]
    assert len(operator_lines) == 2
    assert "/api/auth/oidc/callback" in operator_lines[0]


async def test_too_many_logins_under_way_is_429(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(login, "MAX_PENDING_LOGINS_PER_PROVIDER", 2)
    owner = await gateway.cabinet.register()
    provider_id = await gateway.ready_provider(owner, fake_idp.issuer)

    replies = [await browser.open(gateway.login_url(provider_id)) for _ in range(3)]

    assert [r.status_code for r in replies] == [302, 302, 429]
    assert replies[2].headers["retry-after"] == "60"
