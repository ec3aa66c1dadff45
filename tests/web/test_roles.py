"""Role-aware pages: a member signs in on the sign-in page and finds no admin-only pages in the nav (opened
anyway, they say so) and no controls they may not use (absent, not disabled), while an admin of the same
organization has them all."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tests.web.browser import Contexts, expect, open_route, sign_in_on_page
from tests.web.web_gateway import WebGateway

if TYPE_CHECKING:
    from playwright.sync_api import Page

NOT_AVAILABLE = re.compile("not available for your role", re.IGNORECASE)
MANAGING = re.compile("^(create|invite|revoke|remove|change role|add|delete|edit)", re.IGNORECASE)


def _nav(page: Page) -> dict[str, str]:
    """The nav's links: label → route."""
    links = page.get_by_role("navigation", name="Main").get_by_role("link")
    return {link.inner_text().strip(): link.get_attribute("href") or "" for link in links.all()}


def test_a_member_sees_no_admin_pages_or_controls_an_admin_has(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("roles")
    gateway.create_key(owner, "team-key")
    member = gateway.add_member(owner, "member")
    admin = gateway.add_member(owner, "admin")
    admin_page = sign_in_on_page(contexts.page(), admin)
    member_page = sign_in_on_page(contexts.page(), member)

    admin_nav, member_nav = _nav(admin_page), _nav(member_page)
    admin_only = {label: route for label, route in admin_nav.items() if label not in member_nav}

    assert set(member_nav) < set(admin_nav), (member_nav, admin_nav)
    assert "Single sign-on" in admin_only, admin_only  # SSO providers are managed by owners and admins
    for route in admin_only.values():
        member_page.goto(f"/{route}")
        expect(member_page.locator("#page")).to_contain_text(NOT_AVAILABLE)
    for route, title in (("keys", "API keys"), ("members", "Members")):
        open_route(admin_page, route, title)
        expect(admin_page.locator("#page").get_by_role("button", name=MANAGING).first).to_be_visible()
        open_route(member_page, route, title)
        expect(member_page.locator("#page").get_by_role("button", name=MANAGING)).to_have_count(0)
        expect(member_page.locator("#page form")).to_have_count(0)
    # The member still sees the organization's keys, read-only.
    open_route(member_page, "keys", "API keys")
    expect(member_page.locator("tr").filter(has_text="team-key")).to_be_visible()
