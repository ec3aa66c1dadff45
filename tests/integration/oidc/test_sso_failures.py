"""Single sign-on that must not succeed, against the real OpenID provider: every failure lands on the cabinet
URL with `?error=<reason>` (or is a 400 without one), and is audited when the organization is known."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from modelgate.cabinet.oidc.urls import CALLBACK_PATH
from tests.integration.cabinet.cabinet_client import Account
from tests.integration.oidc.browser import Browser, query_of
from tests.integration.oidc.conftest import GatewayFactory
from tests.integration.oidc.node_idp import NodeIdp
from tests.integration.oidc.sso_client import SsoGateway


async def _owner_with_provider(gateway: SsoGateway, node_idp: NodeIdp, **fields: Any) -> tuple[Account, str]:
    owner = await gateway.cabinet.register()
    return owner, await gateway.ready_provider(owner, node_idp.issuer, **fields)


async def _failure_audit(gateway: SsoGateway, owner: Account) -> dict[str, Any]:
    events = await gateway.sso_events(owner)
    assert [e["event"] for e in events] == ["auth.sso_failed"], events
    return events[0]["details"]


async def _member_count(gateway: SsoGateway) -> int:
    return int(await gateway.cabinet.db.fetchval("SELECT COUNT(*) FROM users"))


async def test_a_replayed_callback_is_refused(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    _, provider_id = await _owner_with_provider(gateway, node_idp)
    journey = await browser.sign_in(gateway.login_url(provider_id), "alice")
    assert "code" in journey.params

    replay = await browser.open(journey.callback_url)

    assert replay.status_code == 302
    assert query_of(replay.headers["location"]) == {"error": "invalid_state"}


async def test_a_callback_sent_twice_at_once_signs_in_once(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    _, provider_id = await _owner_with_provider(gateway, node_idp)
    journey = await browser.sign_in(gateway.login_url(provider_id), "alice", stop_at_callback=True)

    replies = await asyncio.gather(browser.open(journey.callback_url), browser.open(journey.callback_url))
    outcomes = sorted(next(iter(query_of(r.headers["location"]))) for r in replies)

    assert outcomes == ["code", "error"]


async def test_a_callback_opened_in_another_browser_is_refused(
    gateway: SsoGateway, node_idp: NodeIdp, open_browser
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)
    journey = await open_browser().sign_in(gateway.login_url(provider_id), "alice", stop_at_callback=True)

    # Someone hands their own callback URL to a victim's browser (login CSRF).
    victim = await open_browser().open(journey.callback_url)

    assert query_of(victim.headers["location"]) == {"error": "state_mismatch"}
    assert (await _failure_audit(gateway, owner))["reason"] == "state_mismatch"
    assert await _member_count(gateway) == 1


async def test_an_expired_state_is_refused(gateway: SsoGateway, node_idp: NodeIdp, browser: Browser) -> None:
    _, provider_id = await _owner_with_provider(gateway, node_idp)
    started = await browser.open(gateway.login_url(provider_id))
    await gateway.cabinet.db.execute("UPDATE oidc_login_states SET expires_at = 0")

    journey = await browser.resume(started, "alice")

    assert journey.params == {"error": "invalid_state"}


async def test_a_callback_without_state_is_refused(gateway: SsoGateway, browser: Browser) -> None:
    reply = await browser.open(f"{gateway.base_url}{CALLBACK_PATH}?code=anything")

    assert reply.status_code == 302
    assert query_of(reply.headers["location"]) == {"error": "invalid_state"}


async def test_a_tampered_nonce_is_refused(gateway: SsoGateway, node_idp: NodeIdp, browser: Browser) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)
    started = await browser.open(gateway.login_url(provider_id))
    # The provider signs the nonce it was sent; the gateway now expects another one.
    await gateway.cabinet.db.execute("UPDATE oidc_login_states SET nonce = 'not-the-nonce-that-was-sent'")

    journey = await browser.resume(started, "alice")
    details = await _failure_audit(gateway, owner)

    assert journey.params == {"error": "invalid_id_token"}
    assert details["reason"] == "invalid_id_token"
    assert "nonce" in details["detail"]
    assert await _member_count(gateway) == 1


async def test_an_unverified_email_is_refused(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)

    journey = await browser.sign_in(gateway.login_url(provider_id), "unverified")

    assert journey.params == {"error": "email_not_verified"}
    assert (await _failure_audit(gateway, owner))["reason"] == "email_not_verified"
    assert await _member_count(gateway) == 1


async def test_an_email_outside_the_allowed_domains_is_refused(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)

    journey = await browser.sign_in(gateway.login_url(provider_id), "outsider")

    assert journey.params == {"error": "email_domain_not_allowed"}
    assert "elsewhere.test" in (await _failure_audit(gateway, owner))["detail"]


async def test_a_user_of_another_organization_is_refused(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    # Carol proved her address in her own organization: a provider of another one never takes it (an
    # unverified account would lose it to a sign-in from a verified domain: test_verified_addresses.py).
    other = await gateway.cabinet.register("carol@allowed.test")
    await gateway.cabinet.verify_address(other)
    owner, provider_id = await _owner_with_provider(gateway, node_idp)

    journey = await browser.sign_in(gateway.login_url(provider_id), "carol@allowed.test")

    assert journey.params == {"error": "account_in_other_organization"}
    assert (await _failure_audit(gateway, owner))["reason"] == "account_in_other_organization"
    assert (await gateway.cabinet.session(other))["user"]["role"] == "owner"


async def test_without_auto_provisioning_an_unknown_user_is_refused(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp, autoProvision=False)

    journey = await browser.sign_in(gateway.login_url(provider_id), "alice")

    assert journey.params == {"error": "no_account"}
    assert (await _failure_audit(gateway, owner))["reason"] == "no_account"
    assert await _member_count(gateway) == 1


async def test_an_error_from_the_provider_is_reported(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)
    # The user cancels on the provider's login page: it redirects back with error=access_denied.
    page = await browser.follow(await browser.open(gateway.login_url(provider_id)))
    uid = page.url.path.removeprefix("/interaction/")

    journey = await browser.resume(await browser.open(f"{node_idp.issuer}/interaction/{uid}/abort"), "")
    details = await _failure_audit(gateway, owner)

    assert query_of(journey.callback_url)["error"] == "access_denied"
    assert journey.params == {"error": "idp_error"}
    assert "access_denied" in details["detail"]


async def test_a_forged_authorization_code_is_refused(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)
    state = query_of((await browser.open(gateway.login_url(provider_id))).headers["location"])["state"]

    reply = await browser.open(f"{gateway.base_url}{CALLBACK_PATH}?code=forged-code&state={state}")
    details = await _failure_audit(gateway, owner)

    assert query_of(reply.headers["location"]) == {"error": "token_exchange_failed"}
    assert "invalid_grant" in details["detail"]


async def test_a_wrong_client_secret_is_refused_at_the_token_endpoint(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    _, provider_id = await _owner_with_provider(gateway, node_idp, clientSecret="not-the-secret")

    journey = await browser.sign_in(gateway.login_url(provider_id), "alice")

    assert journey.params == {"error": "token_exchange_failed"}


async def test_without_a_cabinet_url_a_failure_is_a_400(
    start_gateway: GatewayFactory, node_idp: NodeIdp, browser: Browser
) -> None:
    gateway = await start_gateway(cabinet_url=None)
    _, provider_id = await _owner_with_provider(gateway, node_idp)

    journey = await browser.sign_in(gateway.login_url(provider_id), "unverified")

    assert journey.response.status_code == 400
    assert journey.response.json()["error"].startswith("single sign-on failed: email_not_verified")


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?state=%00",
        "?state=" + "x" * 5000,
        "?state=%C3%BC&code=%C3%BC",
        "?state=a&state=b&code=c",
        "?error=%3Cscript%3E&state=s",
        "?code=%FF%FE&state=%FF",
    ],
)
async def test_garbage_callbacks_are_refused_never_a_500(
    gateway: SsoGateway, browser: Browser, query: str
) -> None:
    reply = await browser.open(f"{gateway.base_url}{CALLBACK_PATH}{query}")

    assert reply.status_code == 302
    assert query_of(reply.headers["location"]) == {"error": "invalid_state"}
