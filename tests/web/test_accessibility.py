"""Every page, as an owner of an organization with some history, passes axe-core (no violation of serious or
critical impact) and is saved as a screenshot (browser.SCREENSHOTS); the signed-out pages too; at a phone's
width the nav opens from its menu button and leads to the pages, with nothing wider than the screen."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import version
from typing import TYPE_CHECKING

import pytest

from tests.web.browser import (
    PHONE,
    Contexts,
    axe_violations,
    describe_violations,
    expect,
    open_route,
    screenshot,
    settle,
)
from tests.web.web_gateway import Account, WebGateway

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

SIGNED_IN_PAGES = [
    ("overview", "Overview"),
    ("keys", "API keys"),
    ("usage", "Usage"),
    ("members", "Members"),
    ("systems", "Systems"),
    ("rules", "Policy rules"),
    ("invoices", "Invoices"),
    ("audit", "Audit log"),
    ("sso", "Single sign-on"),
]
SIGNED_OUT_PAGES = [
    ("login", "Sign in"),
    ("register", "Register"),
    ("accept-invitation", "Accept invitation"),
]


@pytest.fixture(scope="module")
def owner(gateway: WebGateway) -> Account:
    """An organization with a paid invoice, keys (one revoked), a system with a budget, a content rule,
    traffic, a member and a pending invitation: every page has something to show."""
    owner = gateway.funded("a11y")
    system = gateway.api("POST", "/systems", owner, {"name": "support-bot"})
    key = gateway.api(
        "POST", "/organization/api-keys", owner, {"alias": "support-bot-prod", "systemId": system["id"]}
    )
    budget = {"amountMicros": 5_000_000, "period": "month"}
    gateway.api(
        "POST",
        "/policy-rules",
        owner,
        {
            "subjectType": "system",
            "subjectId": system["id"],
            "effect": "allow",
            "models": ["chat"],
            "budget": budget,
        },
    )
    content = {"where": "both", "detectors": ["email"]}
    gateway.api(
        "POST", "/policy-rules", owner, {"subjectType": "organization", "effect": "flag", "content": content}
    )
    old = gateway.create_key(owner, "old-laptop")
    gateway.api("POST", f"/organization/api-keys/{old['id']}/revoke", owner)
    gateway.chat_when_ready(key["secret"])
    for text in ("what is the weather", "summarise this"):
        gateway.chat(key["secret"], text)
    gateway.add_member(owner, "member")
    gateway.invite(owner, "admin")
    return owner


@pytest.fixture(scope="module")
def owner_pages(browser: Browser, gateway: WebGateway, owner: Account) -> Iterator[tuple[Page, Page]]:
    """The owner's pages for the whole module: one as the app runs (for the screenshots), and one in a
    context that ignores the CSP, only so that axe-core can be injected."""
    contexts = Contexts(browser, gateway.base_url)
    pages = (contexts.signed_in(owner).new_page(), contexts.signed_in(owner, bypass_csp=True).new_page())
    yield pages
    contexts.close()
    assert not contexts.problems.errors, "errors in the pages:\n" + "\n".join(contexts.problems.errors)


@pytest.mark.parametrize(("route", "title"), SIGNED_IN_PAGES, ids=[route for route, _ in SIGNED_IN_PAGES])
def test_each_signed_in_page_passes_axe_and_is_photographed(
    owner_pages: tuple[Page, Page], route: str, title: str
) -> None:
    shown, checked = owner_pages
    screenshot(open_route(shown, route, title), route)
    # At 1280 px nothing needs sideways scrolling: no table is wider than its box.
    clipped = shown.evaluate(
        "() => [...document.querySelectorAll('#page .table-wrap')]"
        ".filter((wrap) => wrap.scrollWidth > wrap.clientWidth + 1)"
        ".map((wrap) => wrap.getAttribute('aria-label'))"
    )
    assert clipped == [], f"tables wider than the page at 1280 px on #/{route}: {clipped}"

    violations = axe_violations(open_route(checked, route, title))

    assert not violations, f"axe-core on #/{route}:\n{describe_violations(violations)}"


@pytest.mark.parametrize(("route", "title"), SIGNED_OUT_PAGES, ids=[route for route, _ in SIGNED_OUT_PAGES])
def test_each_signed_out_page_passes_axe_and_is_photographed(
    contexts: Contexts, gateway: WebGateway, route: str, title: str
) -> None:
    if route == "accept-invitation":
        route = f"accept-invitation?token={gateway.invite(gateway.register('a11y-out'), 'member')[1]}"
    screenshot(open_route(contexts.page(), route, title), route.split("?")[0])

    violations = axe_violations(open_route(contexts.page(bypass_csp=True), route, title))

    assert not violations, f"axe-core on #/{route}:\n{describe_violations(violations)}"


def test_at_phone_width_the_nav_opens_from_the_menu_and_nothing_overflows(
    contexts: Contexts, owner: Account
) -> None:
    page = open_route(contexts.signed_in(owner, viewport=PHONE).new_page(), "overview", "Overview")
    screenshot(page, "overview-phone")
    keys_link = page.get_by_role("navigation", name="Main").get_by_role("link", name="API keys")
    menu = page.get_by_role("button", name="Menu")

    expect(menu).to_be_visible()
    expect(keys_link).to_be_hidden()
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    keys_link.click()
    settle(page, "API keys")

    expect(keys_link).to_be_hidden()  # the menu closes after navigating
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "keys-phone")
    # Keyboard users: Escape closes an open menu and gives the focus back to its button.
    menu.click()
    page.keyboard.press("Escape")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(menu).to_be_focused()
    assert re.search(r"#/keys$", page.url)


@pytest.mark.parametrize(
    ("route", "title", "button"),
    [("keys", "API keys", "Revoke support-bot-prod"), ("members", "Members", "Change role")],
    ids=["revoke-dialog", "role-dialog"],
)
def test_the_dialogs_pass_axe_and_close_with_escape(
    owner_pages: tuple[Page, Page], route: str, title: str, button: str
) -> None:
    _, checked = owner_pages
    open_route(checked, route, title)
    opener = checked.locator("#page").get_by_role("button", name=button).first
    opener.click()
    dialog = checked.get_by_role("dialog")
    expect(dialog).to_be_visible()

    violations = axe_violations(checked)
    checked.keyboard.press("Escape")

    assert not violations, f"axe-core on #/{route} with its dialog open:\n{describe_violations(violations)}"
    expect(dialog).to_have_count(0)


def test_the_footer_names_the_gateway_and_its_version(contexts: Contexts) -> None:
    page = open_route(contexts.page(), "login", "Sign in")

    expect(page.locator("footer")).to_have_text(
        re.compile(rf"^\s*modelgate\s+{re.escape(version('modelgate'))}\s*$")
    )
