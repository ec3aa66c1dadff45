"""Single sign-on in the browser against the real test OpenID provider (panva/oidc-provider on loopback): the
owner adds the provider on the SSO page, then a colleague picks it on the sign-in page, signs in at the
provider, and lands in the cabinet signed in (the app redeems the one-time code from the return URL)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from modelgate.cabinet.oidc.urls import CALLBACK_PATH
from tests.integration.oidc.node_idp import (
    CLIENT_ID,
    CLIENT_SECRET,
    NodeIdp,
    require_node_harness,
    start_node_idp,
)
from tests.web.browser import Contexts, expect, labelled, open_route, screenshot, settle
from tests.web.web_gateway import WebGateway

PROVIDER_NAME = "Test IdP"


@pytest.fixture(scope="module")
def node_idp(gateway: WebGateway) -> Iterator[NodeIdp]:
    """The OpenID provider, with the gateway's callback registered as the redirect URI."""
    idp = start_node_idp(require_node_harness(), gateway.base_url + CALLBACK_PATH)
    yield idp
    idp.stop()


def test_a_colleague_signs_in_with_the_organizations_openid_provider(
    contexts: Contexts, gateway: WebGateway, node_idp: NodeIdp
) -> None:
    owner = gateway.register("sso-owner")
    owner_page = open_route(contexts.signed_in(owner).new_page(), "sso", "Single sign-on")
    add = owner_page.get_by_role("form", name="Add an identity provider")
    add.get_by_label(labelled("Name")).fill(PROVIDER_NAME)
    add.get_by_label(labelled("Issuer URL")).fill(node_idp.issuer)
    add.get_by_label(labelled("Client id")).fill(CLIENT_ID)
    add.get_by_label(labelled("Client secret")).fill(CLIENT_SECRET)
    add.get_by_label(labelled("Allowed domains")).fill("allowed.test")
    add.get_by_label("Create unknown users on their first sign-in").check()
    add.get_by_role("button", name="Add provider").click()
    owner_page.get_by_role("button", name=f"Discover: {PROVIDER_NAME}").click()
    expect(owner_page.get_by_role("heading", name="Discovery succeeded")).to_be_visible()
    settle(owner_page, "Single sign-on")
    screenshot(owner_page, "sso-discovered")

    page = contexts.page()
    open_route(page, "login", "Sign in")
    page.get_by_label(labelled("E-mail")).fill("alice@allowed.test")
    page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").click()
    # The provider's own login and consent pages (devInteractions).
    page.locator("input[name=login]").fill("alice")
    page.locator("input[name=password]").fill("any password")
    page.locator("button[type=submit]").click()
    page.get_by_role("button", name=re.compile("continue", re.IGNORECASE)).click()
    settle(page, "Overview")

    expect(page.locator("#account")).to_contain_text("alice@allowed.test")
    expect(page.locator("#account")).to_contain_text("Member")
    assert "code=" not in page.url  # the one-time code does not linger in the address bar
    assert page.url.startswith(gateway.base_url + "/#/")
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0
    [cookie] = [c for c in page.context.cookies() if c["name"] == "mg_session"]
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
