"""Single sign-on in the browser against the real test OpenID provider (panva/oidc-provider on loopback): the
owner adds the provider on the SSO page, then a colleague picks it on the sign-in page, signs in at the
provider, and lands in the cabinet signed in (the app redeems the one-time code from the return URL)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from modelgate.cabinet.oidc.urls import CALLBACK_PATH
from tests.integration.oidc.node_idp import (
    CLIENT_ID,
    CLIENT_SECRET,
    NodeIdp,
    require_node_harness,
    start_node_idp,
)
from tests.web.browser import (
    Contexts,
    axe_violations,
    describe_violations,
    expect,
    labelled,
    open_route,
    screenshot,
    settle,
)
from tests.web.web_gateway import Account, WebGateway

if TYPE_CHECKING:
    from playwright.sync_api import Page

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
    # bypass_csp: axe-core is injected as a script tag (as tests/web/test_accessibility.py does).
    owner_page = open_route(contexts.signed_in(owner, bypass_csp=True).new_page(), "sso", "Single sign-on")
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
    _claim_and_have_the_operator_approve(gateway, owner, owner_page, "allowed.test")

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


def _claim_and_have_the_operator_approve(
    gateway: WebGateway, owner: Account, page: Page, domain: str
) -> None:
    """The owner claims `domain` on the SSO page and sees the TXT record to publish; the operator approves
    it; after a reload the page shows it verified."""
    claim = page.get_by_role("form", name="Claim a domain")
    claim.get_by_label(labelled("Domain")).fill(domain)
    claim.get_by_role("button", name="Claim domain").click()
    domains = page.get_by_role("region", name="Sign-in domains", exact=True)
    expect(domains).to_contain_text(f"_modelgate.{domain}")
    expect(domains).to_contain_text("modelgate-verification=")
    expect(page.get_by_role("button", name=f"Verify {domain}")).to_be_visible()
    violations = axe_violations(page)
    assert not violations, describe_violations(violations)
    screenshot(page, "sso-domain-claimed")

    gateway.operator(f"/organizations/{owner.organization_id}/sso-domains", {"domain": domain})
    page.reload()
    settle(page, "Single sign-on")
    expect(page.get_by_role("region", name="Sign-in domains", exact=True)).to_contain_text(
        "approved by the operator"
    )
    expect(page.get_by_role("button", name=f"Verify {domain}")).to_have_count(0)


def test_a_domain_claimed_by_another_organization_is_refused_on_the_page(
    contexts: Contexts, gateway: WebGateway
) -> None:
    holder, other = gateway.register("domain-holder"), gateway.register("domain-rival")
    gateway.operator(f"/organizations/{holder.organization_id}/sso-domains", {"domain": "held-web.example"})
    page = open_route(contexts.signed_in(other).new_page(), "sso", "Single sign-on")
    claim = page.get_by_role("form", name="Claim a domain")
    claim.get_by_label(labelled("Domain")).fill("held-web.example")
    claim.get_by_role("button", name="Claim domain").click()

    expect(claim.get_by_role("alert")).to_contain_text("verified by another organization")
    expect(page.get_by_role("region", name="Sign-in domains", exact=True)).not_to_contain_text(
        "held-web.example"
    )


def test_the_sso_page_names_the_public_url_the_operator_must_set(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("sso-public-url")
    page = open_route(contexts.signed_in(owner).new_page(), "sso", "Single sign-on")
    hint = page.locator("#page .sso-public-url")

    expect(hint).to_contain_text("server.public_url")
    expect(hint).to_contain_text(f"followed by {CALLBACK_PATH}")
    expect(hint).to_contain_text("Your gateway operator must set server.public_url")
