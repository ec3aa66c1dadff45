"""The web cabinet's browser session on the real gateway: the `mg_session` cookie a sign-in from the gateway's
own page sets, the CSRF token every state change by cookie needs, Bearer clients untouched, the model API
deaf to the cookie, and the public sign-in options. Raw HTTP (httpx without a cookie jar doing anything
for us: every cookie is sent by hand), on both storage backends."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterator
from dataclasses import replace
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest

from modelgate.config import Config, load_config
from modelgate.storage import open_database
from tests.support.gateway import ThreadedGateway

PASSWORD = "correct horse battery"
CSRF_FAILURE = {"error": "missing or invalid CSRF token"}


def web_gateway_config(storage_url: str, folder: Path, **server: object) -> Config:
    """The embedded defaults on `storage_url`, the spool in `folder`, some `[server]` settings changed."""
    config = load_config(None)
    return replace(
        config,
        storage=replace(config.storage, url=storage_url),
        billing=replace(config.billing, spool_dir=str(folder / "spool")),
        server=replace(config.server, **server),
    )


@pytest.fixture
def gateway(storage_url: str, tmp_path: Path) -> Iterator[ThreadedGateway]:
    with ThreadedGateway(web_gateway_config(storage_url, tmp_path)) as running:
        yield running


def own_page(gateway: ThreadedGateway) -> dict[str, str]:
    """What a browser adds to a fetch() from a page of the gateway."""
    return {"Origin": gateway.base_url, "Sec-Fetch-Site": "same-origin"}


def the_cookie(reply: httpx.Response) -> SimpleCookie:
    """The `mg_session` cookie a reply sets (exactly one Set-Cookie)."""
    (header,) = reply.headers.get_list("set-cookie")
    cookie = SimpleCookie()
    cookie.load(header)
    assert list(cookie) == ["mg_session"], header
    return cookie


def csrf_of(token: str) -> str:
    return hashlib.sha256(b"modelgate-csrf:" + token.encode()).hexdigest()


def register(gateway: ThreadedGateway, headers: dict[str, str] | None = None) -> httpx.Response:
    reply = httpx.post(
        f"{gateway.base_url}/api/auth/register",
        json={
            "legalName": "Web Org",
            "email": f"web-{os.urandom(5).hex()}@example.com",
            "password": PASSWORD,
            "planCode": "free",
        },
        headers=headers or {},
    )
    assert reply.status_code == 201, reply.text
    return reply


def with_cookie(token: str, **headers: str) -> dict[str, str]:
    return {"Cookie": f"mg_session={token}", **headers}


def call(
    gateway: ThreadedGateway, method: str, path: str, headers: dict[str, str], **kwargs
) -> httpx.Response:
    return httpx.request(method, f"{gateway.base_url}{path}", headers=headers, **kwargs)


def test_a_sign_up_from_the_gateways_page_sets_an_httponly_strict_cookie_on_the_api_path(
    gateway: ThreadedGateway,
) -> None:
    reply = register(gateway, own_page(gateway))

    morsel = the_cookie(reply)["mg_session"]
    assert morsel.value == reply.json()["token"]
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "Strict"
    assert morsel["path"] == "/api"
    assert morsel["max-age"] == str(gateway.config.cabinet.session_ttl_seconds)
    assert not morsel["secure"]  # plain http on loopback
    assert reply.json()["csrfToken"] == csrf_of(reply.json()["token"])


def test_a_password_login_from_the_page_sets_the_cookie_too(gateway: ThreadedGateway) -> None:
    email = register(gateway).json()["email"]

    reply = call(
        gateway, "POST", "/api/auth/login", own_page(gateway), json={"email": email, "password": PASSWORD}
    )

    assert reply.status_code == 200
    assert the_cookie(reply)["mg_session"].value == reply.json()["token"]
    assert set(reply.json()) == {"token", "email", "csrfToken"}


def test_an_origin_header_alone_identifies_the_page_on_plain_http(gateway: ThreadedGateway) -> None:
    # Browsers send no Sec-Fetch-Site to a plain-http origin that is not loopback; Origin is always there.
    reply = register(gateway, {"Origin": gateway.base_url})

    assert the_cookie(reply)["mg_session"].value == reply.json()["token"]


def test_an_api_client_gets_the_documented_body_and_no_cookie(gateway: ThreadedGateway) -> None:
    reply = register(gateway)

    assert set(reply.json()) == {"token", "email"}
    assert "set-cookie" not in reply.headers


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"},
        {"Origin": "https://attacker.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_a_sign_in_another_site_made_the_browser_send_gets_no_cookie(
    gateway: ThreadedGateway, headers: dict[str, str]
) -> None:
    reply = register(gateway, headers)

    assert "set-cookie" not in reply.headers
    assert "csrfToken" not in reply.json()


def test_the_cookie_is_secure_when_the_public_url_is_https(storage_url: str, tmp_path: Path) -> None:
    public_url = "https://cabinet.example.com"
    config = web_gateway_config(storage_url, tmp_path, public_url=public_url)
    with ThreadedGateway(config) as gateway:
        reply = register(gateway, {"Origin": public_url})

    assert the_cookie(reply)["mg_session"]["secure"] is True


def test_the_session_read_by_cookie_carries_the_csrf_token_and_by_bearer_does_not(
    gateway: ThreadedGateway,
) -> None:
    token = register(gateway, own_page(gateway)).json()["token"]

    by_cookie = call(gateway, "GET", "/api/auth/session", with_cookie(token))
    by_bearer = call(gateway, "GET", "/api/auth/session", {"Authorization": f"Bearer {token}"})

    assert by_cookie.status_code == 200 and by_cookie.json()["csrfToken"] == csrf_of(token)
    assert by_bearer.status_code == 200 and "csrfToken" not in by_bearer.json()


def test_a_state_change_by_cookie_needs_the_sessions_csrf_token(gateway: ThreadedGateway) -> None:
    token = register(gateway, own_page(gateway)).json()["token"]
    system = {"name": "web-system"}

    missing = call(gateway, "POST", "/api/systems", with_cookie(token), json=system)
    wrong = call(
        gateway, "POST", "/api/systems", with_cookie(token, **{"X-CSRF-Token": "0" * 64}), json=system
    )
    other_session = csrf_of(register(gateway).json()["token"])
    foreign = call(
        gateway, "POST", "/api/systems", with_cookie(token, **{"X-CSRF-Token": other_session}), json=system
    )
    right = call(
        gateway, "POST", "/api/systems", with_cookie(token, **{"X-CSRF-Token": csrf_of(token)}), json=system
    )

    assert (missing.status_code, missing.json()) == (403, CSRF_FAILURE)
    assert (wrong.status_code, wrong.json()) == (403, CSRF_FAILURE)
    assert (foreign.status_code, foreign.json()) == (403, CSRF_FAILURE)
    assert right.status_code == 201, right.text
    listed = call(gateway, "GET", "/api/systems", with_cookie(token)).json()["systems"]
    assert [s["name"] for s in listed] == ["web-system"]  # the refused ones changed nothing


def test_deletes_and_patches_by_cookie_need_the_token_too(gateway: ThreadedGateway) -> None:
    token = register(gateway, own_page(gateway)).json()["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    system_id = call(gateway, "POST", "/api/systems", bearer, json={"name": "s"}).json()["id"]

    patch = call(gateway, "PATCH", f"/api/systems/{system_id}", with_cookie(token), json={"name": "t"})
    delete = call(gateway, "DELETE", f"/api/systems/{system_id}", with_cookie(token))

    assert (patch.status_code, patch.json()) == (403, CSRF_FAILURE)
    assert (delete.status_code, delete.json()) == (403, CSRF_FAILURE)


def test_a_bearer_request_needs_no_csrf_token_even_beside_a_cookie(gateway: ThreadedGateway) -> None:
    token = register(gateway, own_page(gateway)).json()["token"]
    other = register(gateway).json()["token"]

    reply = call(
        gateway,
        "POST",
        "/api/systems",
        {"Authorization": f"Bearer {token}", "Cookie": f"mg_session={other}"},
        json={"name": "bearer-system"},
    )

    assert reply.status_code == 201, reply.text
    # Bearer first: the system is the Bearer's organization's, not the cookie's.
    assert [
        s["name"] for s in call(gateway, "GET", "/api/systems", with_cookie(other)).json()["systems"]
    ] == []


def test_logout_by_cookie_ends_the_session_and_clears_the_cookie(gateway: ThreadedGateway) -> None:
    token = register(gateway, own_page(gateway)).json()["token"]

    refused = call(gateway, "POST", "/api/auth/logout", with_cookie(token))
    reply = call(gateway, "POST", "/api/auth/logout", with_cookie(token, **{"X-CSRF-Token": csrf_of(token)}))
    after = call(gateway, "GET", "/api/auth/session", with_cookie(token))

    assert refused.status_code == 403
    assert reply.status_code == 200
    morsel = the_cookie(reply)["mg_session"]
    assert (morsel.value, morsel["max-age"], morsel["path"]) == ("", "0", "/api")
    assert after.status_code == 401
    assert the_cookie(after)["mg_session"]["max-age"] == "0"  # a dead cookie is dropped


def test_an_expired_sessions_cookie_is_401(gateway: ThreadedGateway) -> None:
    token = register(gateway, own_page(gateway)).json()["token"]

    async def expire() -> None:
        db = await open_database(gateway.storage_url)
        try:
            await db.execute("UPDATE sessions SET expires_at = created_at - 1")
        finally:
            await db.close()

    asyncio.run(expire())
    reply = call(gateway, "GET", "/api/overview", with_cookie(token))

    assert (reply.status_code, reply.json()) == (401, {"error": "invalid or expired session"})


def test_a_cookie_holding_a_management_key_is_refused(gateway: ThreadedGateway) -> None:
    token = register(gateway).json()["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    key = call(gateway, "POST", "/api/organization/management-keys", bearer, json={"name": "m"}).json()[
        "secret"
    ]

    reply = call(gateway, "GET", "/api/overview", with_cookie(key))

    assert reply.status_code == 401


def test_the_model_api_ignores_the_session_cookie(gateway: ThreadedGateway) -> None:
    token = register(gateway, own_page(gateway)).json()["token"]
    cookie = with_cookie(token, **{"X-CSRF-Token": csrf_of(token)})

    models = call(gateway, "GET", "/v1/models", cookie)
    chat = call(
        gateway,
        "POST",
        "/v1/chat/completions",
        cookie,
        json={"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]},
    )

    for reply in (models, chat):
        assert reply.status_code == 401
        assert reply.json()["error"]["message"].startswith("You didn't provide an API key")


def test_an_accepted_invitation_from_the_page_signs_in_with_the_cookie(gateway: ThreadedGateway) -> None:
    owner = register(gateway).json()["token"]
    invited = f"invited-{os.urandom(4).hex()}@example.com"
    invitation = call(
        gateway,
        "POST",
        "/api/invitations",
        {"Authorization": f"Bearer {owner}"},
        json={"email": invited, "role": "member"},
    ).json()

    reply = call(
        gateway,
        "POST",
        "/api/invitations/accept",
        own_page(gateway),
        json={"token": invitation["token"], "password": PASSWORD},
    )

    assert reply.status_code == 200, reply.text
    assert the_cookie(reply)["mg_session"].value == reply.json()["token"]
    assert reply.json()["csrfToken"] == csrf_of(reply.json()["token"])
    session = call(gateway, "GET", "/api/auth/session", with_cookie(reply.json()["token"])).json()
    assert (session["user"]["email"], session["user"]["role"]) == (invited, "member")


def test_sign_in_options_are_public_and_name_the_version_and_the_registration_mode(
    gateway: ThreadedGateway,
) -> None:
    reply = httpx.get(f"{gateway.base_url}/api/auth/sign-in-options")

    assert reply.status_code == 200
    body = reply.json()
    assert body["name"] == "modelgate" and body["version"]
    assert body["registration"] == "open"
    assert [p["code"] for p in body["plans"]] == [p.code for p in gateway.config.plans if p.self_service]
    assert body["providers"] == []


def test_sign_in_options_refuse_a_bad_email_and_unknown_parameters(gateway: ThreadedGateway) -> None:
    bad_email = httpx.get(f"{gateway.base_url}/api/auth/sign-in-options", params={"email": "not-an-email"})
    unknown = httpx.get(f"{gateway.base_url}/api/auth/sign-in-options", params={"org": "x"})

    assert (bad_email.status_code, bad_email.json()) == (
        400,
        {"error": "email must be a valid e-mail address"},
    )
    assert unknown.status_code == 400 and "unknown query parameter: org" in unknown.json()["error"]


def test_sign_in_options_name_only_the_providers_of_the_emails_domain(
    storage_url: str, tmp_path: Path
) -> None:
    config = web_gateway_config(storage_url, tmp_path, public_url="http://127.0.0.1:9")
    with ThreadedGateway(config) as gateway:
        acme = _provider(gateway, "Acme SSO", ["acme.example", "acme-labs.example"], discovered=True)
        _provider(gateway, "Other SSO", ["other.example"], discovered=True)
        _provider(gateway, "Not ready", ["acme.example"], discovered=False)
        _provider(gateway, "Lookalike", ["acmexlabs.example"], discovered=True)

        def names(email: str) -> list[dict]:
            reply = httpx.get(f"{gateway.base_url}/api/auth/sign-in-options", params={"email": email})
            assert reply.status_code == 200, reply.text
            return reply.json()["providers"]

        assert names("Alice@ACME.example") == [
            {"id": acme, "name": "Acme SSO", "loginUrl": f"http://127.0.0.1:9/api/auth/oidc/{acme}/login"}
        ]
        assert [p["id"] for p in names("bob@acme-labs.example")] == [acme]
        assert names("eve@cme.example") == []
        assert names("eve@acme_labs.example") == []  # `_` in a domain is no wildcard
        assert names("eve@labs.acme.example") == []  # whole domains only


def _provider(gateway: ThreadedGateway, name: str, domains: list[str], *, discovered: bool) -> str:
    """An identity provider of a new organization, stored as discovery would leave it, its domains
    verified by that organization (as the operator's approval would leave them)."""
    owner = register(gateway).json()["token"]
    reply = call(
        gateway,
        "POST",
        "/api/auth/oidc/providers",
        {"Authorization": f"Bearer {owner}"},
        json={
            "name": name,
            "issuer": "http://127.0.0.1:9/issuer",
            "clientId": "client",
            "clientSecret": "secret",
            "allowedDomains": domains,
        },
    )
    assert reply.status_code == 201, reply.text
    provider_id = reply.json()["id"]
    if discovered:

        async def discover() -> None:
            db = await open_database(gateway.storage_url)
            try:
                await db.execute(
                    "UPDATE oidc_providers SET authorization_endpoint = $1, token_endpoint = $1,"
                    " jwks_uri = $1, signing_algs = 'RS256', discovered_at = 1 WHERE id = $2",
                    "http://127.0.0.1:9/authorize",
                    provider_id,
                )
                for domain in domains:
                    await db.execute(
                        "INSERT INTO sso_domains (organization_id, domain, token, created_at, verified_at,"
                        " verified_by) SELECT organization_id, $2, 'token', 1, 1, 'operator'"
                        " FROM oidc_providers WHERE id = $1",
                        provider_id,
                        domain,
                    )
            finally:
                await db.close()

        asyncio.run(discover())
    return provider_id
