"""Every page, as an owner of an organization with some history, passes axe-core (no violation of serious or
critical impact) in light and in dark mode (`prefers-color-scheme`, emulated) and is saved as a screenshot
(browser.SCREENSHOTS); the signed-out pages too; at a phone's width the nav opens from its menu button and
leads to the pages, with nothing wider than the screen."""

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
    labelled,
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
    ("models", "Models"),
    ("usage", "Usage"),
    ("requests", "Requests"),
    ("members", "Members"),
    ("systems", "Systems"),
    ("rules", "Policy rules"),
    ("invoices", "Invoices"),
    ("alerts", "Alerts"),
    ("audit", "Audit log"),
    ("sso", "Single sign-on"),
    ("account", "Your account"),
]
COLOR_SCHEMES = ["light", "dark"]
SIGNED_OUT_PAGES = [
    ("login", "Sign in"),
    ("register", "Register"),
    ("accept-invitation", "Accept invitation"),
    ("forgot-password", "Forgot password"),
    ("reset-password", "Reset password"),
    ("verify-email", "Confirm e-mail address"),
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


@pytest.mark.parametrize("scheme", COLOR_SCHEMES)
@pytest.mark.parametrize(("route", "title"), SIGNED_IN_PAGES, ids=[route for route, _ in SIGNED_IN_PAGES])
def test_each_signed_in_page_passes_axe_and_is_photographed(
    owner_pages: tuple[Page, Page], route: str, title: str, scheme: str
) -> None:
    shown, checked = owner_pages
    for page in owner_pages:
        page.emulate_media(color_scheme=scheme)
    screenshot(open_route(shown, route, title), route if scheme == "light" else f"{route}-{scheme}")
    # At 1280 px nothing needs sideways scrolling: no table is wider than its box.
    clipped = shown.evaluate(
        "() => [...document.querySelectorAll('#page .table-wrap')]"
        ".filter((wrap) => wrap.scrollWidth > wrap.clientWidth + 1)"
        ".map((wrap) => wrap.getAttribute('aria-label'))"
    )
    assert clipped == [], f"tables wider than the page at 1280 px on #/{route}: {clipped}"

    violations = axe_violations(open_route(checked, route, title))

    assert not violations, f"axe-core on #/{route} ({scheme}):\n{describe_violations(violations)}"


def test_dark_mode_follows_the_system_setting(owner_pages: tuple[Page, Page]) -> None:
    shown, _ = owner_pages
    backgrounds = {}
    for scheme in COLOR_SCHEMES:
        shown.emulate_media(color_scheme=scheme)
        open_route(shown, "overview", "Overview")
        backgrounds[scheme] = shown.evaluate("getComputedStyle(document.body).backgroundColor")

    assert backgrounds == {"light": "rgb(246, 247, 249)", "dark": "rgb(15, 19, 24)"}


@pytest.mark.parametrize("scheme", COLOR_SCHEMES)
@pytest.mark.parametrize(("route", "title"), SIGNED_OUT_PAGES, ids=[route for route, _ in SIGNED_OUT_PAGES])
def test_each_signed_out_page_passes_axe_and_is_photographed(
    contexts: Contexts, gateway: WebGateway, route: str, title: str, scheme: str
) -> None:
    if route == "accept-invitation":
        route = f"accept-invitation?token={gateway.invite(gateway.register('a11y-out'), 'member')[1]}"
    if route == "verify-email":
        route = f"verify-email?token={gateway.link_token(gateway.register('a11y-verify').email, 'verify')}"
    if route == "reset-password":
        account = gateway.register("a11y-reset")
        gateway.api("POST", "/auth/password-reset", body={"email": account.email})
        route = f"reset-password?token={gateway.link_token(account.email, 'reset')}"
    name = route.split("?")[0]
    shown = contexts.page(color_scheme=scheme)
    screenshot(open_route(shown, route, title), name if scheme == "light" else f"{name}-{scheme}")

    violations = axe_violations(open_route(contexts.page(bypass_csp=True, color_scheme=scheme), route, title))

    assert not violations, f"axe-core on #/{route} ({scheme}):\n{describe_violations(violations)}"


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


@pytest.mark.parametrize("scheme", COLOR_SCHEMES)
@pytest.mark.parametrize(
    ("route", "title", "button"),
    [("keys", "API keys", "Revoke support-bot-prod"), ("members", "Members", "Change role")],
    ids=["revoke-dialog", "role-dialog"],
)
def test_the_dialogs_pass_axe_and_close_with_escape(
    owner_pages: tuple[Page, Page], route: str, title: str, button: str, scheme: str
) -> None:
    _, checked = owner_pages
    checked.emulate_media(color_scheme=scheme)
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


# The pages whose tables turn into stacked cards at a phone's width, and a row each must show whole.
PHONE_PAGES = [
    ("overview", "Overview", None),
    ("keys", "API keys", "support-bot-prod"),
    ("invoices", "Invoices", "Balance top-up"),
    ("audit", "Audit log", "api_key.created"),
]


@pytest.mark.parametrize(("route", "title", "row_text"), PHONE_PAGES, ids=[page[0] for page in PHONE_PAGES])
def test_at_phone_width_tables_are_cards_with_every_cell_in_view(
    contexts: Contexts, owner: Account, route: str, title: str, row_text: str | None
) -> None:
    page = open_route(contexts.signed_in(owner, viewport=PHONE).new_page(), route, title)
    screenshot(page, f"phone-{route}")

    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    scrolling = page.evaluate(
        "() => [...document.querySelectorAll('#page .table-wrap')]"
        ".filter((wrap) => wrap.scrollWidth > wrap.clientWidth + 1)"
        ".map((wrap) => wrap.getAttribute('aria-label'))"
    )
    assert scrolling == [], f"tables scrolling sideways at 390 px on #/{route}: {scrolling}"
    if row_text is None:
        return
    row = page.locator("#page tbody tr").filter(has_text=row_text).first
    cells = row.locator("td")
    assert cells.count() > 1
    for index in range(cells.count()):
        cell = cells.nth(index)
        if not cell.is_visible():  # an empty cell (a revoked key's actions) is not shown
            continue
        box = cell.bounding_box()
        assert box is not None
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (
            f"cell {index} of the {row_text!r} row on #/{route} is out of view: {box}"
        )
    # Each card names its fields: the column headings are shown beside the values.
    assert cells.first.get_attribute("data-label")


def test_at_phone_width_a_key_card_shows_status_system_owner_and_a_reachable_revoke(
    contexts: Contexts, owner: Account
) -> None:
    page = open_route(contexts.signed_in(owner, viewport=PHONE).new_page(), "keys", "API keys")
    card = page.locator("#page tbody tr").filter(has_text="support-bot-prod")

    for label, value in (("Status", "active"), ("System", "support-bot"), ("Owner", owner.email)):
        cell = card.locator(f"td[data-label='{label}']")
        expect(cell).to_be_visible()
        expect(cell).to_contain_text(value)
        cell.scroll_into_view_if_needed()
        expect(cell).to_be_in_viewport(ratio=1)
    revoke = card.get_by_role("button", name="Revoke support-bot-prod")
    revoke.scroll_into_view_if_needed()
    expect(revoke).to_be_in_viewport()
    box = revoke.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
    revoke.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("support-bot-prod")
    page.keyboard.press("Escape")  # nothing is revoked: the other tests use this key's history
    expect(dialog).to_have_count(0)
    expect(card.locator("td[data-label='Status']")).to_contain_text("active")


def test_the_budget_bar_is_a_visible_labelled_progress_bar_counting_the_rules_models(
    owner_pages: tuple[Page, Page],
) -> None:
    shown, _ = owner_pages
    open_route(shown, "overview", "Overview")
    bar = shown.get_by_role("progressbar", name=re.compile("System support-bot"))

    expect(bar).to_be_visible()
    box = bar.bounding_box()
    assert box is not None and box["height"] >= 16, f"the budget bar is too thin: {box}"
    # The rule is on the model chat only; the gateway charges its budget exactly the rule's requests.
    meter = shown.locator(".meter").filter(has=bar)
    expect(meter).to_contain_text("$0.75 of $5.00 this month")
    expect(meter).to_contain_text("$0.00 held by requests in flight")
    expect(meter).to_contain_text("15% used")
    expect(meter).not_to_contain_text("refusing")
    expect(meter).to_contain_text("on the model chat only")
    expect(meter).not_to_contain_text("every model")


def test_required_fields_show_a_visible_marker_and_keep_their_names(contexts: Contexts) -> None:
    page = open_route(contexts.page(), "register", "Register")
    email = page.get_by_label(labelled("Your e-mail"))

    # Screen readers hear "required" from the attribute; the accessible name stays the field's name.
    expect(email).to_have_attribute("required", "")
    expect(email).to_have_accessible_name("Your e-mail")
    marker = page.locator(f"label[for='{email.get_attribute('id')}'] .required-mark")
    expect(marker).to_be_visible()
    expect(marker).to_have_text("*")
    expect(page.locator("form .required-note").first).to_contain_text("required")
