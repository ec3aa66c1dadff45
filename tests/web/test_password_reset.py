"""Password reset and change in the web cabinet: a forgotten password is reset through the link sent to the
address (every session ends), and the account page changes the password with the current one (the other
sessions end, this one stays) and tells whether the address is verified."""

from __future__ import annotations

from tests.web.browser import Contexts, expect, labelled, open_route, screenshot, settle
from tests.web.web_gateway import WebGateway

NEW_PASSWORD = "a brand new passphrase"


def test_a_forgotten_password_is_reset_through_the_link_and_every_session_ends(
    contexts: Contexts, gateway: WebGateway
) -> None:
    account = gateway.register("forgetful")
    page = open_route(contexts.page(), "login", "Sign in")

    page.get_by_role("link", name="Forgot your password?").click()
    settle(page, "Forgot password")
    page.get_by_label(labelled("E-mail")).fill(account.email)
    page.get_by_role("button", name="Send reset link").click()
    expect(page.locator("#page")).to_contain_text("ask your operator for the link")
    screenshot(page, "forgot-password")

    page.goto(gateway.link(account.email, "reset"))
    settle(page, "Reset password")
    page.get_by_label(labelled("New password")).fill(NEW_PASSWORD)
    page.get_by_role("button", name="Set new password").click()
    settle(page, "Sign in")

    expect(page.locator("#notices")).to_contain_text("Every session of the account has ended")
    old_session = gateway.api_status("GET", "/auth/session", account)
    assert old_session == 401
    page.get_by_label(labelled("E-mail")).fill(account.email)
    page.get_by_label(labelled("Password")).fill(NEW_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    settle(page, "Overview")


def test_the_account_page_changes_the_password_and_ends_the_other_sessions(
    contexts: Contexts, gateway: WebGateway
) -> None:
    account = gateway.register("changer")
    elsewhere = contexts.signed_in(account).new_page()
    page = open_route(contexts.signed_in(account).new_page(), "account", "Your account")
    expect(page.locator("#page")).to_contain_text("Not verified yet")

    password = page.get_by_role("form", name="Change your password")
    password.get_by_label(labelled("Current password")).fill(account.password)
    password.get_by_label(labelled("New password")).fill(NEW_PASSWORD)
    password.get_by_role("button", name="Change password").click()

    expect(page.locator("#notices")).to_contain_text("Password changed")
    screenshot(page, "account")
    open_route(elsewhere, "overview", "Sign in")  # its session ended: back to sign-in
    open_route(page, "overview", "Overview")  # this one stays


def test_the_verification_link_confirms_the_address_shown_on_the_account_page(
    contexts: Contexts, gateway: WebGateway
) -> None:
    account = gateway.register("verifier")
    page = contexts.signed_in(account).new_page()

    page.goto(gateway.link(account.email, "verify"))
    settle(page, "Confirm e-mail address")
    page.get_by_role("button", name="Confirm address").click()
    settle(page, "Your account")

    expect(page.locator("#page")).to_contain_text("Verified: a link sent to this address was followed.")
