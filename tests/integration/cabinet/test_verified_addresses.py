"""Verified addresses (issue 33, finding 1): an address becomes an account's only through a link sent to it,
and an unverified account never holds an address against the person who proves it — by registration,
invitation, acceptance, sign-in or address change."""

from __future__ import annotations

from tests.integration.cabinet.cabinet_client import PASSWORD, Account, Cabinet, unique_email

VICTIM = "ceo@victim-co.example"


async def _follow(cabinet: Cabinet, email: str, kind: str):  # -> Reply
    token = await cabinet.link_sent_to(email, kind)
    return await cabinet.call("POST", "/auth/verify-email", json={"token": token})


async def _register_reply(cabinet: Cabinet, email: str, legal_name: str = "Victim Co"):  # -> Reply
    body = {"legalName": legal_name, "email": email, "password": PASSWORD, "planCode": "pro"}
    return await cabinet.call("POST", "/auth/register", json=body)


async def test_findings_scenario_an_organization_cannot_squat_an_address_by_inviting_it(
    cabinet: Cabinet,
) -> None:
    """Org A invites ceo@victim-co.example and tries to accept the invitation itself with a password."""
    squatter = await cabinet.register(legal_name="Org A")
    invited = await cabinet.invite(squatter, "member", VICTIM)
    # On the old code the 201 carried the token and this accepted it; now there is nothing to accept with.
    squat = await cabinet.call(
        "POST", "/invitations/accept", json={"token": invited.body.get("token", ""), "password": PASSWORD}
    )
    third = await cabinet.register(legal_name="Org C")

    registered = await _register_reply(cabinet, VICTIM)
    invited_elsewhere = await cabinet.invite(third, "member", unique_email("colleague"))
    sign_in_as_victim = await cabinet.login(VICTIM, PASSWORD + "-not-the-victims")

    assert registered.status == 201, registered.body  # the real person is not blocked (was 409)
    assert invited.status == 201 and "token" not in invited.body
    assert squat.status == 400
    assert invited_elsewhere.status == 201
    assert sign_in_as_victim.status == 401


async def test_a_self_registered_squatter_loses_the_address_to_the_person_who_proves_it(
    cabinet: Cabinet,
) -> None:
    squatter = await cabinet.register(VICTIM, legal_name="Org A")

    waiting = await _register_reply(cabinet, VICTIM)
    # The link went to the address (here: the operator's outbox), the squatter cannot read it.
    finished = await _follow(cabinet, VICTIM, "register")
    squatter_login = await cabinet.login(VICTIM, PASSWORD)
    squatter_session = await cabinet.call("GET", "/auth/session", token=squatter.token)

    assert waiting.status == 202, waiting.body
    assert "token" not in waiting.body and waiting.body["delivery"] == "operator"
    assert finished.status == 201, finished.body
    assert set(finished.body) == {"token", "email"}
    victim = Account(finished.body["token"], VICTIM)
    session = await cabinet.session(victim)
    assert session["organization"]["legalName"] == "Victim Co"
    assert session["user"]["emailVerified"] is True
    # The login answers for the victim's account now (same password in this test), not the squatter's.
    assert squatter_login.status == 200
    assert (await cabinet.session(Account(squatter_login.body["token"], VICTIM)))["organization"][
        "legalName"
    ] == "Victim Co"
    assert squatter_session.status == 401


async def test_the_squatters_organization_is_told_in_its_audit_log(cabinet: Cabinet) -> None:
    squatter = await cabinet.register(VICTIM, legal_name="Org A")
    colleague = await cabinet.add_member(squatter, "owner")

    await _register_reply(cabinet, VICTIM)
    await _follow(cabinet, VICTIM, "register")

    released = [e for e in await cabinet.audit_events(colleague) if e["event"] == "user.address_released"]
    assert [(e["details"]["email"], e["details"]["reason"]) for e in released] == [(VICTIM, "registration")]


async def test_a_verified_account_keeps_its_address_against_registration_and_invitations(
    cabinet: Cabinet,
) -> None:
    holder = await cabinet.register(VICTIM)
    await cabinet.verify_address(holder)
    other = await cabinet.register()

    registered = await _register_reply(cabinet, VICTIM)
    invited = await cabinet.invite(other, "member", VICTIM)

    assert (registered.status, registered.body) == (
        409,
        {"error": "an account with this e-mail already exists"},
    )
    assert invited.status == 409
    assert (await cabinet.session(holder))["user"]["emailVerified"] is True


async def test_an_invitation_accepted_by_the_address_takes_it_from_an_unverified_account(
    cabinet: Cabinet,
) -> None:
    squatter = await cabinet.register(VICTIM, legal_name="Org A")
    inviter = await cabinet.register(legal_name="Real Employer")

    invitation = await cabinet.invite_delivered(inviter, "admin", VICTIM)
    accepted = await cabinet.call(
        "POST", "/invitations/accept", json={"token": invitation["token"], "password": PASSWORD}
    )

    assert accepted.status == 200, accepted.body
    session = await cabinet.session(Account(accepted.body["token"], VICTIM))
    assert (session["organization"]["id"], session["user"]["role"]) == (
        await cabinet.organization_id(inviter),
        "admin",
    )
    assert session["user"]["emailVerified"] is True
    assert (await cabinet.call("GET", "/auth/session", token=squatter.token)).status == 401


async def test_a_registration_link_loses_to_a_holder_that_verified_meanwhile(cabinet: Cabinet) -> None:
    holder = await cabinet.register(VICTIM)
    await _register_reply(cabinet, VICTIM, legal_name="Late Co")
    await cabinet.verify_address(holder)

    finished = await _follow(cabinet, VICTIM, "register")

    assert (finished.status, finished.body) == (409, {"error": "an account with this e-mail already exists"})
    assert (await cabinet.session(holder))["user"]["emailVerified"] is True


async def test_a_new_account_is_unverified_until_its_link_is_followed_and_the_link_works_once(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    before = (await cabinet.session(owner))["user"]["emailVerified"]
    token = await cabinet.link_sent_to(owner.email, "verify")

    first = await cabinet.call("POST", "/auth/verify-email", json={"token": token})
    again = await cabinet.call("POST", "/auth/verify-email", json={"token": token})

    assert before is False
    assert first.body == {"email": owner.email, "emailVerified": True}
    assert again.status == 400
    assert (await cabinet.session(owner))["user"]["emailVerified"] is True
    members = await cabinet.call("GET", "/members", token=owner.token)
    assert members.body["members"][0]["emailVerified"] is True


async def test_unknown_and_expired_links_are_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await cabinet.db.execute(
        "UPDATE email_links SET expires_at = created_at - 1 WHERE email = $1", owner.email
    )
    token = await cabinet.link_sent_to(owner.email, "verify")

    expired = await cabinet.call("POST", "/auth/verify-email", json={"token": token})
    unknown = await cabinet.call("POST", "/auth/verify-email", json={"token": "x" * 43})

    assert expired.status == unknown.status == 400
    assert expired.body == unknown.body


async def test_an_address_change_moves_the_account_only_when_the_new_address_follows_the_link(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    new = unique_email("moved")

    asked = await cabinet.call(
        "POST", "/auth/email", token=owner.token, json={"newEmail": new, "currentPassword": PASSWORD}
    )
    still = (await cabinet.session(owner))["user"]["email"]
    followed = await _follow(cabinet, new, "change")

    assert asked.status == 202 and "token" not in asked.body
    assert still == owner.email
    assert followed.body == {"email": new, "emailVerified": True}
    assert (await cabinet.login(new)).status == 200
    assert (await cabinet.login(owner.email)).status == 401


async def test_an_address_change_cannot_take_a_verified_address_and_needs_the_password(
    cabinet: Cabinet,
) -> None:
    holder = await cabinet.register(VICTIM)
    await cabinet.verify_address(holder)
    squatter = await cabinet.register()

    taken = await cabinet.call(
        "POST", "/auth/email", token=squatter.token, json={"newEmail": VICTIM, "currentPassword": PASSWORD}
    )
    wrong_password = await cabinet.call(
        "POST",
        "/auth/email",
        token=squatter.token,
        json={"newEmail": unique_email("x"), "currentPassword": "not the password at all"},
    )

    assert taken.status == 409
    assert wrong_password.status == 400


async def test_an_address_change_to_an_unverified_address_waits_for_the_link_then_takes_it(
    cabinet: Cabinet,
) -> None:
    squatter = await cabinet.register(VICTIM, legal_name="Org A")
    mover = await cabinet.register(legal_name="Real Co")

    asked = await cabinet.call(
        "POST", "/auth/email", token=mover.token, json={"newEmail": VICTIM, "currentPassword": PASSWORD}
    )
    followed = await _follow(cabinet, VICTIM, "change")

    assert asked.status == 202
    assert followed.status == 200, followed.body
    assert (await cabinet.call("GET", "/auth/session", token=squatter.token)).status == 401
    assert (await cabinet.session(mover))["user"]["email"] == VICTIM


async def test_asking_for_verification_links_is_throttled(start_cabinet) -> None:
    from tests.integration.cabinet.conftest import cabinet_config

    cabinet = await start_cabinet(cabinet_config(email_links_per_hour=2))
    owner = await cabinet.register()  # its first link

    second = await cabinet.call("POST", "/auth/verify-email/send", token=owner.token)
    third = await cabinet.call("POST", "/auth/verify-email/send", token=owner.token)

    assert second.status == 202
    assert third.status == 429 and third.headers["Retry-After"] == "3600"
