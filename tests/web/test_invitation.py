"""An invitation from the members page, opened in a second browser (its own cookies): the new user sets a
password, lands signed in with the invited role, and the owner's page lists them."""

from __future__ import annotations

import re

from tests.web.browser import Contexts, expect, labelled, open_route, screenshot, settle
from tests.web.web_gateway import PASSWORD, WebGateway, unique_email

INVITATION_LINK = re.compile(r"https?://\S+#/accept-invitation\?token=[A-Za-z0-9_-]+")


def test_an_invitation_accepted_in_a_second_browser_signs_the_new_user_in(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("inviter")
    invitee = unique_email("invitee")
    owner_page = open_route(contexts.signed_in(owner).new_page(), "members", "Members")

    invite = owner_page.get_by_role("form", name="Invite a member")
    invite.get_by_label(labelled("E-mail")).fill(invitee)
    invite.get_by_label(labelled("Role")).select_option("admin")
    invite.get_by_role("button", name="Invite", exact=True).click()
    shown = owner_page.locator(".secret-panel").get_by_text(INVITATION_LINK)
    expect(shown).to_be_visible()
    found = INVITATION_LINK.search(shown.inner_text())
    assert found is not None
    link = found.group(0)
    assert link.startswith(gateway.base_url + "/#/accept-invitation?token=")
    screenshot(owner_page, "members-invited")

    second = contexts.new()
    page = second.new_page()
    page.goto(link)
    settle(page, "Accept invitation")
    page.get_by_label("Choose a password").fill(PASSWORD)
    page.get_by_role("button", name="Accept invitation").click()
    settle(page, "Overview")

    expect(page.locator("#account")).to_contain_text(invitee)
    expect(page.locator("#account")).to_contain_text("Admin")
    assert [c["name"] for c in second.cookies()] == ["mg_session"]
    owner_page.reload()
    settle(owner_page, "Members")
    expect(owner_page.locator("tr").filter(has_text=invitee)).to_contain_text(
        re.compile("admin", re.IGNORECASE)
    )
