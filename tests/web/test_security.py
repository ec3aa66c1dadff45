"""The session in the browser: an HttpOnly, SameSite=Strict cookie that scripts cannot read, nothing in web
storage, state changes refused without the CSRF token, the model API deaf to the cookie, the pages' security
headers, and signing out dropping the cookie."""

from __future__ import annotations

import re

import httpx

from tests.web.browser import Contexts, expect, fetch_from_page, open_route, sign_in_on_page
from tests.web.web_gateway import WebGateway

CSRF_REFUSED = {"error": "missing or invalid CSRF token"}


def test_the_session_cookie_is_httponly_strict_on_api_only_and_no_script_or_storage_sees_a_token(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("cookie")
    context = contexts.new()
    page = sign_in_on_page(context.new_page(), owner)

    [cookie] = [c for c in context.cookies() if c["name"] == "mg_session"]
    seen_by_script = page.evaluate("document.cookie")
    stored = page.evaluate(
        "() => ({local: Object.assign({}, localStorage), session: Object.assign({}, sessionStorage)})"
    )

    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/api")
    assert cookie["secure"] is False  # plain http on loopback; https makes it Secure
    assert "mg_session" not in seen_by_script and cookie["value"] not in seen_by_script
    assert stored == {"local": {}, "session": {}}
    # The cookie is a real session: the API knows who it is.
    assert fetch_from_page(page, "GET", "/api/auth/session")["body"]["user"]["email"] == owner.email


def test_a_state_change_from_the_page_needs_the_csrf_token(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.register("csrf")
    page = sign_in_on_page(contexts.page(), owner)
    token = fetch_from_page(page, "GET", "/api/auth/session")["body"]["csrfToken"]
    body = {"alias": "csrf-probe"}

    missing = fetch_from_page(page, "POST", "/api/organization/api-keys", body)
    wrong = fetch_from_page(page, "POST", "/api/organization/api-keys", body, {"X-CSRF-Token": "0" * 64})
    right = fetch_from_page(page, "POST", "/api/organization/api-keys", body, {"X-CSRF-Token": token})

    assert (missing["status"], missing["body"]) == (403, CSRF_REFUSED)
    assert (wrong["status"], wrong["body"]) == (403, CSRF_REFUSED)
    assert right["status"] == 201 and right["body"]["alias"] == "csrf-probe"
    aliases = [key["alias"] for key in gateway.api("GET", "/overview", owner)["apiKeys"]]
    assert aliases.count("csrf-probe") == 1  # the refused requests created nothing


def test_the_model_api_never_accepts_the_session_cookie(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.funded("model-cookie")
    context = contexts.signed_in(owner)
    [cookie] = [c for c in context.cookies() if c["name"] == "mg_session"]
    chat = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    forwarded_before = len(gateway.upstream.requests_to("/v1/chat/completions"))

    reply = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        json=chat,
        cookies={"mg_session": cookie["value"]},
        timeout=30,
    )
    models = httpx.get(f"{gateway.base_url}/v1/models", cookies={"mg_session": cookie["value"]}, timeout=30)

    assert reply.status_code == 401, reply.text
    assert models.status_code == 401, models.text
    assert len(gateway.upstream.requests_to("/v1/chat/completions")) == forwarded_before


def test_the_pages_are_served_with_a_strict_content_security_policy(contexts: Contexts) -> None:
    page = contexts.page()
    document = page.goto("/")
    assert document is not None
    script = page.request.get("/assets/app.js")

    for headers in (document.headers, script.headers):
        policy = headers["content-security-policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy and "'unsafe-inline'" not in policy
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["x-content-type-options"] == "nosniff"
    assert script.headers["content-type"].startswith(("text/javascript", "application/javascript"))


def test_signing_out_drops_the_cookie_and_returns_to_sign_in(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.register("signout")
    context = contexts.new()
    page = sign_in_on_page(context.new_page(), owner)

    page.get_by_role("button", name="Sign out").click()

    expect(page.locator("#page-title")).to_have_text(re.compile("sign in", re.IGNORECASE))
    assert [c for c in context.cookies() if c["name"] == "mg_session"] == []
    assert fetch_from_page(page, "GET", "/api/auth/session")["status"] == 401
    # The page shows no signed-in controls any more.
    expect(page.get_by_role("link", name="API keys")).to_have_count(0)
    open_route(page, "keys", re.compile("sign in", re.IGNORECASE))


def test_the_browser_refuses_inline_script_on_the_pages(contexts: Contexts) -> None:
    page = open_route(contexts.page(), "login", "Sign in")

    with page.expect_console_message(lambda message: "Content Security Policy" in message.text) as refusal:
        ran = page.evaluate(
            """() => {
                const script = document.createElement("script");
                script.textContent = "window.injected = true";
                document.body.append(script);
                return window.injected === true;
            }"""
        )

    assert ran is False
    assert "inline script" in refusal.value.text
    # The same refusal is how every test here notices a page breaking the policy (checked after each test).
    assert [e for e in contexts.problems.errors if "Content Security Policy" in e] != []
    contexts.problems.errors.clear()
