"""Every API error reaches the user as the API's own message, in the page: a duplicate key alias and a
duplicate system name are refused by the server (the form cannot know), and the page says why."""

from __future__ import annotations

import re

from modelgate.cabinet.account import BAD_CREDENTIALS
from tests.web.browser import Contexts, expect, labelled, open_route
from tests.web.web_gateway import WebGateway


def test_a_duplicate_key_alias_shows_the_api_message(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.register("errors")
    gateway.create_key(owner, "taken")
    page = open_route(contexts.signed_in(owner).new_page(), "keys", "API keys")

    page.get_by_label(labelled("Alias")).fill("taken")
    page.get_by_role("button", name="Create key", exact=True).click()

    expect(page.get_by_role("alert").filter(has_text="alias already exists")).to_be_visible()


def test_a_duplicate_system_name_shows_the_api_message(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.register("errors")
    gateway.api("POST", "/systems", owner, {"name": "billing-bot"})
    page = open_route(contexts.signed_in(owner).new_page(), "systems", "Systems")

    page.get_by_label(re.compile("^name", re.IGNORECASE)).fill("billing-bot")
    page.get_by_role("button", name=re.compile("create|add", re.IGNORECASE)).click()

    expect(
        page.get_by_role("alert").filter(has_text="a system named 'billing-bot' already exists")
    ).to_be_visible()


def test_a_wrong_password_shows_the_api_message_on_the_sign_in_page(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("wrong-password")
    page = open_route(contexts.page(), "login", "Sign in")

    page.get_by_label(labelled("E-mail")).fill(owner.email)
    page.get_by_label(labelled("Password")).fill("not the password at all")
    page.get_by_role("button", name="Sign in", exact=True).click()

    expect(page.get_by_role("alert").filter(has_text=BAD_CREDENTIALS)).to_be_visible()
    expect(page.locator("#page-title")).to_have_text("Sign in")


def test_a_form_checks_its_fields_before_sending_anything(contexts: Contexts) -> None:
    page = open_route(contexts.page(), "register", "Register")
    sent: list[str] = []
    page.on(
        "request", lambda request: sent.append(request.url) if "/api/auth/register" in request.url else None
    )

    page.get_by_label(labelled("Organization legal name")).fill("Hasty Ltd")
    page.get_by_label(labelled("Your e-mail")).fill("not-an-address")
    page.get_by_label(labelled("Password")).fill("short")
    page.get_by_role("button", name="Create organization").click()

    email = page.get_by_label(labelled("Your e-mail"))
    expect(email).to_have_attribute("aria-invalid", "true")
    expect(email).to_be_focused()
    expect(page.get_by_label(labelled("Password"))).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".field-error:visible")).to_have_count(2)
    assert sent == []
