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
    sent = owner_page.locator("#invitation-sent")
    expect(sent).to_contain_text(f"the operator has the invitation link for {invitee}")
    # The inviter never sees the link: it went to the address (here, to the operator who passes it on).
    assert INVITATION_LINK.search(owner_page.content()) is None
    screenshot(owner_page, "members-invited")
    link = gateway.link(invitee, "invitation")

    second = contexts.new()
    page = second.new_page()
    page.goto(link)
    settle(page, "Accept invitation")
    offer = page.get_by_role("region", name="Invitation")
    expect(offer).to_contain_text(f"{owner.email} invited {invitee} to join Acme Web Ltd as an admin.")
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
