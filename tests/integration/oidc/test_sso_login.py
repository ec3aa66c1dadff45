"""Single sign-on against a real OpenID provider (panva/oidc-provider on loopback), end to end: the gateway's
login redirect, the provider's login and consent pages, the callback, the one-time code and the session."""

from __future__ import annotations

from typing import Any

import pytest

from modelgate.cabinet.oidc.urls import CALLBACK_PATH
from modelgate.domain.tokens import hash_token
from tests.integration.cabinet.cabinet_client import Account
from tests.integration.oidc.browser import Browser, query_of
from tests.integration.oidc.conftest import CABINET_URL, GatewayFactory
from tests.integration.oidc.node_idp import CLIENT_ID, POST_CLIENT_ID, NodeIdp
from tests.integration.oidc.sso_client import SsoGateway


async def _owner_with_provider(gateway: SsoGateway, node_idp: NodeIdp, **fields: Any) -> tuple[Account, str]:
    owner = await gateway.cabinet.register()
    return owner, await gateway.ready_provider(owner, node_idp.issuer, **fields)


async def _signed_in(gateway: SsoGateway, browser: Browser, provider_id: str, login: str) -> dict[str, Any]:
    journey = await browser.sign_in(gateway.login_url(provider_id), login)
    exchanged = await gateway.exchange(journey.params["code"])
    assert exchanged.status == 200, exchanged.body
    return await gateway.cabinet.session(Account(exchanged.body["token"], exchanged.body["email"]))


async def test_sso_login_provisions_a_member_and_opens_a_session(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)

    journey = await browser.sign_in(gateway.login_url(provider_id), "alice")
    exchanged = await gateway.exchange(journey.params["code"])
    session = await gateway.cabinet.session(Account(exchanged.body["token"], "alice@allowed.test"))

    assert journey.landed_at.startswith(CABINET_URL + "?code=")
    assert (exchanged.status, exchanged.body["email"]) == (200, "alice@allowed.test")
    assert session["kind"] == "session"
    assert session["user"]["email"] == "alice@allowed.test"
    assert session["user"]["role"] == "member"
    assert session["organization"]["id"] == await gateway.cabinet.organization_id(owner)


async def test_the_login_redirect_carries_state_nonce_and_a_pkce_s256_challenge(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    _, provider_id = await _owner_with_provider(gateway, node_idp)

    reply = await browser.open(gateway.login_url(provider_id))
    location = reply.headers["location"]
    asked = query_of(location)
    cookie = reply.headers["set-cookie"]

    assert reply.status_code == 302
    assert location.startswith(f"{node_idp.issuer}/auth?")
    assert asked["response_type"] == "code"
    assert asked["client_id"] == CLIENT_ID
    assert asked["redirect_uri"] == gateway.base_url + CALLBACK_PATH
    assert asked["scope"] == "openid email profile"
    assert asked["code_challenge_method"] == "S256"
    assert len(asked["code_challenge"]) == 43
    assert len(asked["state"]) >= 43 and len(asked["nonce"]) >= 43
    assert asked["state"] != asked["nonce"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and f"Path={CALLBACK_PATH}" in cookie
    assert reply.headers["cache-control"] == "no-store"


async def test_the_state_is_stored_only_as_a_hash(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    _, provider_id = await _owner_with_provider(gateway, node_idp)

    state = query_of((await browser.open(gateway.login_url(provider_id))).headers["location"])["state"]
    rows = await gateway.cabinet.db.fetch("SELECT state_hash FROM oidc_login_states")

    assert rows == [{"state_hash": hash_token(state)}]


@pytest.mark.parametrize(
    "accept_body", [{"password": "correct horse battery"}, {}], ids=["with-password", "token-alone"]
)
async def test_an_existing_member_signs_in_as_themselves_and_keeps_their_role(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser, accept_body: dict[str, str]
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)
    invited = await gateway.cabinet.invite_delivered(owner, "admin", email="alice@allowed.test")
    accepted = await gateway.cabinet.call(
        "POST", "/invitations/accept", json={"token": invited["token"], **accept_body}
    )
    member_id = await gateway.cabinet.user_id(Account(accepted.body["token"], "alice@allowed.test"))

    session = await _signed_in(gateway, browser, provider_id, "alice")
    login = (await gateway.sso_events(owner))[0]

    assert (session["user"]["id"], session["user"]["role"]) == (member_id, "admin")
    assert login["details"]["provisioned"] is False


async def test_new_users_get_the_role_the_provider_is_configured_with(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    _, provider_id = await _owner_with_provider(gateway, node_idp, defaultRole="admin")

    session = await _signed_in(gateway, browser, provider_id, "alice")

    assert session["user"]["role"] == "admin"


async def test_client_secret_post_authenticates_at_the_token_endpoint(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    _, provider_id = await _owner_with_provider(
        gateway, node_idp, clientId=POST_CLIENT_ID, tokenAuthMethod="client_secret_post"
    )

    session = await _signed_in(gateway, browser, provider_id, "alice")

    assert session["user"]["email"] == "alice@allowed.test"


async def test_an_sso_login_is_audited(gateway: SsoGateway, node_idp: NodeIdp, browser: Browser) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)

    session = await _signed_in(gateway, browser, provider_id, "alice")
    [login] = await gateway.sso_events(owner)

    assert login["event"] == "auth.sso_login"
    assert login["actor"] == {"type": "user", "id": session["user"]["id"], "email": "alice@allowed.test"}
    assert login["details"]["providerId"] == provider_id
    assert login["details"]["method"] == "oidc"
    assert login["details"]["provisioned"] is True


async def test_the_session_token_never_appears_in_a_url(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    _, provider_id = await _owner_with_provider(gateway, node_idp)

    journey = await browser.sign_in(gateway.login_url(provider_id), "alice")
    token = (await gateway.exchange(journey.params["code"])).body["token"]

    assert all(token not in url for url in [*journey.visited, journey.landed_at])
    assert set(journey.params) == {"code"}


async def test_a_rotated_signing_key_is_fetched_and_trusted_without_new_discovery(
    gateway: SsoGateway, node_idp: NodeIdp, open_browser
) -> None:
    owner, provider_id = await _owner_with_provider(gateway, node_idp)
    await _signed_in(gateway, open_browser(), provider_id, "alice")

    node_idp.rotate_keys()
    session = await _signed_in(gateway, open_browser(), provider_id, "alice")

    assert session["user"]["email"] == "alice@allowed.test"
    assert [e["event"] for e in await gateway.sso_events(owner)] == ["auth.sso_login", "auth.sso_login"]


async def test_without_a_cabinet_url_the_callback_answers_the_code_in_json(
    start_gateway: GatewayFactory, node_idp: NodeIdp, browser: Browser
) -> None:
    gateway = await start_gateway(cabinet_url=None)
    _, provider_id = await _owner_with_provider(gateway, node_idp)

    journey = await browser.sign_in(gateway.login_url(provider_id), "alice")
    answer = journey.response.json()
    exchanged = await gateway.exchange(answer["code"])

    assert journey.response.status_code == 200
    assert answer["expiresIn"] == 60
    assert (exchanged.status, exchanged.body["email"]) == (200, "alice@allowed.test")


async def test_a_sign_in_from_a_verified_domain_verifies_the_address_and_takes_it_from_an_unverified_account(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    # Issue 33: single sign-on from a domain its organization verified vouches for the address. Another
    # organization registered alice's address without proving it; her company's sign-in takes it, and the
    # squatting organization is told in its audit log. (A provider of an unverified domain signs nobody in:
    # test_sso_domains.py.)
    squatter = await gateway.cabinet.register("alice@allowed.test")
    colleague = await gateway.cabinet.add_member(squatter, "owner")
    _, provider_id = await _owner_with_provider(gateway, node_idp)  # its domain allowed.test approved

    provisioned = await _signed_in(gateway, browser, provider_id, "alice")

    assert provisioned["user"]["emailVerified"] is True
    assert (
        provisioned["organization"]["id"] != (await gateway.cabinet.session(colleague))["organization"]["id"]
    )
    released = [
        e for e in await gateway.cabinet.audit_events(colleague) if e["event"] == "user.address_released"
    ]
    assert [(e["details"]["email"], e["details"]["reason"]) for e in released] == [
        ("alice@allowed.test", "single_sign_on")
    ]
    assert (await gateway.cabinet.login("alice@allowed.test")).status == 401  # the squatter's password
