"""ID-token validation against attacks a real provider will not stage, with a fake provider over real HTTP:
each test makes one thing about the next token wrong and expects the login to fail for that reason."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from joserfc.jwk import OctKey

from tests.integration.cabinet.cabinet_client import Account
from tests.integration.oidc.browser import Browser, Journey, query_of
from tests.integration.oidc.fake_idp import CLIENT_ID, CLIENT_SECRET, DROP, FakeIdp, rsa_key
from tests.integration.oidc.sso_client import SsoGateway

# Validation logic, not storage: SQLite is enough (the login flow itself runs on both backends).
pytestmark = pytest.mark.parametrize("storage_url", ["sqlite"], indirect=True)


async def _ready(gateway: SsoGateway, fake_idp: FakeIdp, **fields: Any) -> tuple[Account, str]:
    owner = await gateway.cabinet.register()
    fields = {"clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET, **fields}
    return owner, await gateway.ready_provider(owner, fake_idp.issuer, **fields)


async def _login(gateway: SsoGateway, browser: Browser, provider_id: str) -> Journey:
    return await browser.sign_in(gateway.login_url(provider_id), "")


async def _refused(
    gateway: SsoGateway, owner: Account, journey: Journey, reason: str = "invalid_id_token"
) -> str:
    """Assert the login failed for `reason`, nobody was provisioned, and return the audited detail."""
    assert journey.params == {"error": reason}
    [failure] = await gateway.sso_events(owner)
    assert (failure["event"], failure["details"]["reason"]) == ("auth.sso_failed", reason)
    assert await gateway.cabinet.db.fetchval("SELECT COUNT(*) FROM users") == 1
    return failure["details"]["detail"]


async def test_claims_in_the_id_token_sign_in_without_userinfo_using_pkce_and_basic_auth(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    _, provider_id = await _ready(gateway, fake_idp)
    start = await browser.open(gateway.login_url(provider_id))
    asked = query_of(start.headers["location"])

    journey = await browser.resume(start, "")
    [request] = fake_idp.token_requests
    expected_basic = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()

    assert "code" in journey.params
    assert asked["code_challenge_method"] == "S256"
    assert request["grant_type"] == "authorization_code"
    assert request["redirect_uri"] == asked["redirect_uri"]
    assert len(request["code_verifier"]) >= 43  # the fake checked it against the challenge
    assert "client_secret" not in request
    assert fake_idp.token_auth_headers == [expected_basic]


async def test_client_secret_post_sends_the_credentials_in_the_body(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    _, provider_id = await _ready(gateway, fake_idp, tokenAuthMethod="client_secret_post")

    journey = await _login(gateway, browser, provider_id)
    [request] = fake_idp.token_requests

    assert "code" in journey.params
    assert (request["client_id"], request["client_secret"]) == (CLIENT_ID, CLIENT_SECRET)
    assert fake_idp.token_auth_headers == [None]


async def test_a_token_signed_by_another_key_under_the_published_kid_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.signing_key = rsa_key("published-key")

    detail = await _refused(gateway, owner, await _login(gateway, browser, provider_id))

    assert "signature" in detail


async def test_a_token_with_an_unknown_kid_refetches_the_jwks_once_then_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fetched_at_discovery = fake_idp.jwks_fetches
    fake_idp.signing_key = rsa_key("attacker-key")
    fake_idp.header = {"alg": "RS256", "kid": "attacker-key"}

    detail = await _refused(gateway, owner, await _login(gateway, browser, provider_id))

    assert fake_idp.jwks_fetches == fetched_at_discovery + 1
    assert "does not publish" in detail


async def test_a_token_for_another_audience_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"aud": "some-other-client"}

    detail = await _refused(gateway, owner, await _login(gateway, browser, provider_id))

    assert "aud" in detail


async def test_a_token_for_several_audiences_needs_this_client_as_authorized_party(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"aud": [CLIENT_ID, "another-client"], "azp": "another-client"}

    detail = await _refused(gateway, owner, await _login(gateway, browser, provider_id))

    assert "azp" in detail


async def test_a_token_for_several_audiences_with_this_client_as_authorized_party_is_accepted(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    _, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"aud": [CLIENT_ID, "another-client"], "azp": CLIENT_ID}

    journey = await _login(gateway, browser, provider_id)

    assert "code" in journey.params


async def test_a_token_with_another_nonce_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"nonce": "a-nonce-from-another-login"}

    detail = await _refused(gateway, owner, await _login(gateway, browser, provider_id))

    assert "nonce" in detail


async def test_a_token_without_a_nonce_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"nonce": DROP}

    assert "nonce" in await _refused(gateway, owner, await _login(gateway, browser, provider_id))


async def test_a_token_from_another_issuer_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"iss": "https://evil.example"}

    assert "iss" in await _refused(gateway, owner, await _login(gateway, browser, provider_id))


async def test_an_expired_token_is_refused(gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    an_hour_ago = int(time.time()) - 3600
    fake_idp.claim_overrides = {"iat": an_hour_ago - 300, "exp": an_hour_ago}

    assert "expired" in await _refused(gateway, owner, await _login(gateway, browser, provider_id))


async def test_a_token_issued_in_the_future_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"iat": int(time.time()) + 3600, "exp": int(time.time()) + 7200}

    assert "future" in await _refused(gateway, owner, await _login(gateway, browser, provider_id))


async def test_an_unsigned_token_is_refused(gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.unsigned = True

    assert "'none'" in await _refused(gateway, owner, await _login(gateway, browser, provider_id))


async def test_a_token_signed_with_the_client_secret_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.signing_key = OctKey.import_key(CLIENT_SECRET.encode() * 4)
    fake_idp.header = {"alg": "HS256", "kid": "published-key"}

    assert "HS256" in await _refused(gateway, owner, await _login(gateway, browser, provider_id))


async def test_without_an_email_in_the_token_userinfo_supplies_it(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    _, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"email": DROP, "email_verified": DROP}

    journey = await _login(gateway, browser, provider_id)

    assert (await gateway.exchange(journey.params["code"])).body["email"] == "fiona@allowed.test"


async def test_userinfo_about_another_subject_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"email": DROP, "sub": "someone-else"}

    journey = await _login(gateway, browser, provider_id)

    assert "subject" in await _refused(gateway, owner, journey, reason="userinfo_failed")


async def test_an_email_verified_flag_that_is_not_true_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"email_verified": 1}

    await _refused(gateway, owner, await _login(gateway, browser, provider_id), reason="email_not_verified")


async def test_an_authorization_response_naming_another_issuer_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.response_iss = "https://evil.example"

    journey = await _login(gateway, browser, provider_id)

    await _refused(gateway, owner, journey, reason="issuer_mismatch")
    assert fake_idp.token_requests == []


async def test_entra_ids_xms_edov_claim_stands_for_a_missing_email_verified(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    _, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"email_verified": DROP, "xms_edov": True}

    journey = await _login(gateway, browser, provider_id)

    assert "code" in journey.params


async def test_xms_edov_never_overrides_an_explicit_email_verified_false(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"email_verified": False, "xms_edov": True}

    await _refused(gateway, owner, await _login(gateway, browser, provider_id), reason="email_not_verified")


async def test_an_email_without_any_verification_claim_is_refused(
    gateway: SsoGateway, fake_idp: FakeIdp, browser: Browser
) -> None:
    owner, provider_id = await _ready(gateway, fake_idp)
    fake_idp.claim_overrides = {"email_verified": DROP}

    await _refused(gateway, owner, await _login(gateway, browser, provider_id), reason="email_not_verified")
