"""Role-aware pages: a member signs in on the sign-in page and finds no admin pages in the nav and no
controls they may not use (absent, not disabled), while an admin of the same organization has them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tests.web.browser import Contexts, expect, open_route, sign_in_on_page
from tests.web.web_gateway import WebGateway

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

ADMIN_NAV = ("Members", "Systems", "Audit log", "Single sign-on")
NOT_AVAILABLE = re.compile("not available for your role", re.IGNORECASE)


def _controls(page: Page) -> tuple[Locator, Locator]:
    create = page.get_by_role("button", name=re.compile("create", re.IGNORECASE))
    revoke = page.get_by_role("button", name=re.compile("revoke", re.IGNORECASE))
    return create, revoke


def test_a_member_sees_no_admin_pages_or_controls_an_admin_has(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.funded("roles")
    gateway.create_key(owner, "team-key")
    member = gateway.add_member(owner, "member")
    admin = gateway.add_member(owner, "admin")

    page = sign_in_on_page(contexts.page(), member)
    nav = page.get_by_role("navigation", name="Main")
    for label in ADMIN_NAV:
        expect(nav.get_by_role("link", name=label)).to_have_count(0)
    expect(nav.get_by_role("link", name="Overview")).to_have_count(1)
    open_route(page, "keys", "API keys")
    create, revoke = _controls(page)
    expect(create).to_have_count(0)
    expect(revoke).to_have_count(0)
    expect(page.get_by_label(re.compile("^alias", re.IGNORECASE))).to_have_count(0)
    open_route(page, "members", "Members")
    expect(page.locator("#page")).to_contain_text(NOT_AVAILABLE)
    expect(page.get_by_role("button", name=re.compile("invite", re.IGNORECASE))).to_have_count(0)

    admin_page = sign_in_on_page(contexts.page(), admin)
    admin_nav = admin_page.get_by_role("navigation", name="Main")
    for label in ADMIN_NAV:
        expect(admin_nav.get_by_role("link", name=label)).to_have_count(1)
    open_route(admin_page, "keys", "API keys")
    create, revoke = _controls(admin_page)
    expect(create.first).to_be_visible()
    expect(
        admin_page.locator("tr").filter(has_text="team-key").get_by_role("button", name="Revoke")
    ).to_be_visible()
