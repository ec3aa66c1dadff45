"""Invitations: created by owners and admins, accepted once with a token that expires."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest
from aiohttp import web

from modelgate.cabinet.clock import now
from modelgate.cabinet.mail_outbox import waiting_mail
from tests.integration.cabinet.cabinet_client import PASSWORD, Cabinet, unique_email
from tests.integration.cabinet.conftest import CabinetFactory, cabinet_config


async def _accept(cabinet: Cabinet, token: str, password: str = PASSWORD):
    return await cabinet.call("POST", "/invitations/accept", json={"token": token, "password": password})


async def test_an_invitations_token_goes_to_the_address_never_to_the_inviter(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    email = unique_email("invitee")

    created = await cabinet.invite(owner, "admin", email)
    listed = await cabinet.call("GET", "/invitations", token=owner.token)
    token = await cabinet.link_sent_to(email, "invitation")

    assert created.status == 201
    assert created.body["email"] == email
    assert created.body["role"] == "admin"
    assert created.body["status"] == "pending"
    assert created.body["delivery"] == "operator"  # no [email]: the operator passes the link on
    assert "token" not in created.body and token.encode() not in created.raw
    assert [i["id"] for i in listed.body["invitations"]] == [created.body["id"]]
    assert token.encode() not in listed.raw


@pytest.mark.parametrize("password", [PASSWORD, None], ids=["with-password", "token-alone"])
async def test_accepting_creates_the_user_in_the_inviting_organization_with_a_session(
    cabinet: Cabinet, password: str | None
) -> None:
    owner = await cabinet.register()
    invitation = await cabinet.invite_delivered(owner, "admin")
    body = {"token": invitation["token"], **({"password": password} if password else {})}

    accepted = await cabinet.call("POST", "/invitations/accept", json=body)

    assert accepted.status == 200
    assert accepted.body == {
        "token": accepted.body["token"],
        "email": invitation["email"],
        "passwordSet": password is not None,
    }
    session = await cabinet.call("GET", "/auth/session", token=accepted.body["token"])
    assert session.body["organization"]["id"] == await cabinet.organization_id(owner)
    assert session.body["user"]["role"] == "admin"
    stored = await cabinet.db.fetchval(
        "SELECT password_hash FROM users WHERE email = $1", invitation["email"]
    )
    assert (stored is not None) == (password is not None)


async def test_an_accepted_invitation_shows_as_accepted(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    invitation = await cabinet.invite_delivered(owner)
    await _accept(cabinet, invitation["token"])

    listed = await cabinet.call("GET", "/invitations", token=owner.token)

    assert listed.body["invitations"][0]["status"] == "accepted"
    assert listed.body["invitations"][0]["acceptedAt"] is not None


async def test_an_invitation_token_works_only_once(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    token = (await cabinet.invite_delivered(owner))["token"]
    await _accept(cabinet, token)

    again = await _accept(cabinet, token)

    assert (again.status, again.body) == (400, {"error": "invitation has already been used"})


async def test_an_expired_invitation_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    invitation = await cabinet.invite_delivered(owner)
    await cabinet.db.execute("UPDATE invitations SET expires_at = created_at - 1")

    reply = await _accept(cabinet, invitation["token"])
    listed = await cabinet.call("GET", "/invitations", token=owner.token)

    assert (reply.status, reply.body) == (400, {"error": "invitation has expired"})
    assert listed.body["invitations"][0]["status"] == "expired"


async def test_the_invitation_lifetime_comes_from_the_config(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(invitation_ttl_seconds=3600))
    owner = await cabinet.register()
    await cabinet.invite(owner)

    lifetime = await cabinet.db.fetchval("SELECT expires_at - created_at FROM invitations")

    assert lifetime == pytest.approx(3600)


async def test_a_revoked_invitation_cannot_be_accepted(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    invitation = await cabinet.invite_delivered(owner)

    revoked = await cabinet.call("POST", f"/invitations/{invitation['id']}/revoke", token=owner.token)
    reply = await _accept(cabinet, invitation["token"])

    assert (revoked.status, revoked.body["status"]) == (200, "revoked")
    assert (reply.status, reply.body) == (400, {"error": "invitation has been revoked"})


async def test_an_unknown_invitation_token_is_400(cabinet: Cabinet) -> None:
    reply = await _accept(cabinet, "no-such-token")

    assert (reply.status, reply.body) == (400, {"error": "invitation token is not valid"})


async def test_accept_needs_a_token(cabinet: Cabinet) -> None:
    no_token = await cabinet.call("POST", "/invitations/accept", json={"password": PASSWORD})
    mistyped = await cabinet.call("POST", "/invitations/accept", json={"token": 42})

    assert (no_token.status, no_token.body) == (400, {"error": "token is required"})
    assert (mistyped.status, mistyped.body) == (400, {"error": "token must be a string"})


async def test_a_mistyped_password_with_the_token_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    token = (await cabinet.invite_delivered(owner))["token"]

    reply = await cabinet.call("POST", "/invitations/accept", json={"token": token, "password": ["x"]})

    assert (reply.status, reply.body) == (400, {"error": "password must be a string"})


async def test_an_account_without_a_password_gets_the_generic_login_failure(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    invitation = await cabinet.invite_delivered(owner)
    await cabinet.call("POST", "/invitations/accept", json={"token": invitation["token"]})

    passwordless = await cabinet.login(invitation["email"], "any password at all")
    unknown = await cabinet.login(unique_email("nobody"), "any password at all")

    assert (passwordless.status, passwordless.body) == (401, {"error": "invalid e-mail or password"})
    assert (unknown.status, unknown.body) == (passwordless.status, passwordless.body)


async def test_an_account_without_a_password_sets_its_first_one_with_the_session(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    invitation = await cabinet.invite_delivered(owner)
    session = (await cabinet.call("POST", "/invitations/accept", json={"token": invitation["token"]})).body

    first = await cabinet.call(
        "POST", "/auth/password", token=session["token"], json={"newPassword": "my first passphrase"}
    )
    again = await cabinet.call(
        "POST", "/auth/password", token=session["token"], json={"newPassword": "another passphrase"}
    )

    assert (first.status, first.body["ok"]) == (200, True)
    assert (again.status, again.body) == (400, {"error": "currentPassword is required"})
    assert (await cabinet.login(invitation["email"], "my first passphrase")).status == 200
    assert "auth.password_set" in [e["event"] for e in await cabinet.audit_events(owner)]


async def test_a_weak_first_password_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    invitation = await cabinet.invite_delivered(owner)
    session = (await cabinet.call("POST", "/invitations/accept", json={"token": invitation["token"]})).body

    weak = await cabinet.call("POST", "/auth/password", token=session["token"], json={"newPassword": "short"})

    assert (weak.status, weak.body) == (400, {"error": "newPassword must be at least 10 characters"})


async def test_a_token_accepted_without_a_password_works_only_once(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    token = (await cabinet.invite_delivered(owner))["token"]
    await cabinet.call("POST", "/invitations/accept", json={"token": token})

    again = await cabinet.call("POST", "/invitations/accept", json={"token": token})

    assert (again.status, again.body) == (400, {"error": "invitation has already been used"})


async def test_a_second_invitation_to_a_pending_address_is_409(cabinet: Cabinet) -> None:
    """Issue 33, finding 7: the same address could be invited twice (two pending rows)."""
    owner = await cabinet.register()
    email = unique_email("twice")
    first = await cabinet.invite_delivered(owner, "member", email)

    second = await cabinet.invite(owner, "admin", email.upper())
    listed = await cabinet.call("GET", "/invitations", token=owner.token)

    assert (second.status, second.body) == (
        409,
        {"error": f"{email} already has a pending invitation ({first['id']}); revoke it to invite again"},
    )
    assert [i["id"] for i in listed.body["invitations"]] == [first["id"]]


async def test_a_revoked_or_expired_invitation_gives_way_to_a_new_one(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    email = unique_email("again")
    revoked = await cabinet.invite_delivered(owner, "member", email)
    assert (
        await cabinet.call("POST", f"/invitations/{revoked['id']}/revoke", token=owner.token)
    ).status == 200
    expired = await cabinet.invite_delivered(owner, "member", email)
    await cabinet.db.execute(
        "UPDATE invitations SET expires_at = created_at - 1 WHERE id = $1", expired["id"]
    )

    fresh = await cabinet.invite(owner, "member", email)
    listed = await cabinet.call("GET", "/invitations", token=owner.token)

    assert fresh.status == 201, fresh.body
    statuses = {i["id"]: i["status"] for i in listed.body["invitations"]}
    assert statuses == {revoked["id"]: "revoked", expired["id"]: "revoked", fresh.body["id"]: "pending"}
    assert (await _accept(cabinet, await cabinet.link_sent_to(email, "invitation"))).status == 200


async def test_joining_ends_the_addresss_pending_invitations_everywhere(cabinet: Cabinet) -> None:
    """Issue 33, finding 7: the extra invitation stayed pending after the person joined."""
    first_org, second_org = await cabinet.register(), await cabinet.register()
    email = unique_email("wanted")
    joined = await cabinet.invite_delivered(first_org, "member", email)
    other = await cabinet.invite_delivered(second_org, "member", email)

    assert (await _accept(cabinet, joined["token"])).status == 200
    listed = await cabinet.call("GET", "/invitations", token=second_org.token)

    assert [(i["id"], i["status"]) for i in listed.body["invitations"]] == [(other["id"], "revoked")]
    assert (await _accept(cabinet, other["token"])).status == 400


async def test_registering_ends_the_addresss_pending_invitations(cabinet: Cabinet) -> None:
    inviter = await cabinet.register()
    email = unique_email("self-made")
    invitation = await cabinet.invite_delivered(inviter, "member", email)

    await cabinet.register(email)
    listed = await cabinet.call("GET", "/invitations", token=inviter.token)

    assert [(i["id"], i["status"]) for i in listed.body["invitations"]] == [(invitation["id"], "revoked")]


async def test_accepting_with_a_weak_password_is_400_and_keeps_the_invitation(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    token = (await cabinet.invite_delivered(owner))["token"]

    weak = await _accept(cabinet, token, "short")
    strong = await _accept(cabinet, token)

    assert (weak.status, weak.body) == (400, {"error": "password must be at least 10 characters"})
    assert strong.status == 200


async def test_revoking_an_accepted_or_revoked_invitation_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    accepted = await cabinet.invite_delivered(owner)
    await _accept(cabinet, accepted["token"])
    revoked = await cabinet.invite_delivered(owner)
    await cabinet.call("POST", f"/invitations/{revoked['id']}/revoke", token=owner.token)

    again_accepted = await cabinet.call("POST", f"/invitations/{accepted['id']}/revoke", token=owner.token)
    again_revoked = await cabinet.call("POST", f"/invitations/{revoked['id']}/revoke", token=owner.token)

    assert (again_accepted.status, again_accepted.body) == (400, {"error": "invitation already accepted"})
    assert (again_revoked.status, again_revoked.body) == (400, {"error": "invitation already revoked"})


async def test_inviting_an_email_with_a_verified_account_in_another_organization_is_409(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    elsewhere = await cabinet.register()
    await cabinet.verify_address(elsewhere)

    reply = await cabinet.invite(owner, "member", elsewhere.email)

    assert (reply.status, reply.body) == (
        409,
        {"error": "this e-mail already has an account in another organization"},
    )


async def test_accepting_for_an_email_that_meanwhile_registered_elsewhere_is_400(cabinet: Cabinet) -> None:
    # Registering ended the address's pending invitations (issue 33: none stays pending once it joined).
    owner = await cabinet.register()
    invitation = await cabinet.invite_delivered(owner)
    await cabinet.register(invitation["email"])

    reply = await _accept(cabinet, invitation["token"])

    assert (reply.status, reply.body) == (400, {"error": "invitation has been revoked"})


async def test_a_member_cannot_invite_list_or_revoke(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    invitation_id = (await cabinet.invite_delivered(owner))["id"]

    invite = await cabinet.invite(member)
    listed = await cabinet.call("GET", "/invitations", token=member.token)
    revoke = await cabinet.call("POST", f"/invitations/{invitation_id}/revoke", token=member.token)

    assert (invite.status, listed.status, revoke.status) == (403, 403, 403)


async def test_only_an_owner_can_invite_an_owner(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")

    by_admin = await cabinet.invite(admin, "owner")
    by_owner = await cabinet.invite(owner, "owner")

    assert (by_admin.status, by_admin.body) == (403, {"error": "only an owner can invite an owner"})
    assert by_owner.status == 201


async def test_invitations_are_audited(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    accepted = await cabinet.invite_delivered(owner)
    await _accept(cabinet, accepted["token"])
    revoked = await cabinet.invite_delivered(owner)
    await cabinet.call("POST", f"/invitations/{revoked['id']}/revoke", token=owner.token)

    events = [e["event"] for e in await cabinet.audit_events(owner)]

    assert events[:4] == [
        "invitation.revoked",
        "invitation.created",
        "invitation.accepted",
        "invitation.created",
    ]


async def test_the_invitation_is_posted_to_the_configured_webhook(
    start_cabinet: CabinetFactory, aiohttp_server
) -> None:
    received: asyncio.Queue[dict] = asyncio.Queue()

    async def hook(request: web.Request) -> web.Response:
        received.put_nowait(orjson.loads(await request.read()))
        return web.Response(status=204)

    receiver = web.Application()
    receiver.router.add_post("/hooks/invitations", hook)
    server = await aiohttp_server(receiver)
    cabinet = await start_cabinet(
        cabinet_config(invitation_webhook_url=str(server.make_url("/hooks/invitations")))
    )
    owner = await cabinet.register(legal_name="Hooked Inc")

    created = await cabinet.invite_delivered(owner, "admin")
    delivered = await asyncio.wait_for(received.get(), timeout=10)

    assert delivered["event"] == "invitation.created"
    # The webhook is the operator's channel: it gets the token, the inviter's answer does not.
    assert delivered["invitation"] == {k: v for k, v in created.items() if k != "delivery"}
    assert delivered["organization"]["legalName"] == "Hooked Inc"


async def test_a_failing_webhook_does_not_fail_the_invitation(
    start_cabinet: CabinetFactory, aiohttp_server, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500)

    receiver = web.Application()
    receiver.router.add_post("/hook", broken)
    server = await aiohttp_server(receiver)
    cabinet = await start_cabinet(cabinet_config(invitation_webhook_url=str(server.make_url("/hook"))))
    owner = await cabinet.register()

    with caplog.at_level(logging.WARNING, logger="modelgate.cabinet.invitations"):
        created = await cabinet.invite(owner)
        for _ in range(100):
            if any(r.name == "modelgate.cabinet.invitations" for r in caplog.records):
                break
            await asyncio.sleep(0.05)

    assert created.status == 201
    assert "invitation webhook answered HTTP 500" in caplog.text
    assert await cabinet.link_sent_to(created.body["email"], "invitation") not in caplog.text


async def test_a_revoked_invitations_link_is_withdrawn_from_the_outbox(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    email = unique_email("withdrawn")
    invitation = await cabinet.invite_delivered(owner, "member", email)

    await cabinet.call("POST", f"/invitations/{invitation['id']}/revoke", token=owner.token)
    waiting = [m for m in await waiting_mail(cabinet.db, now()) if m.to_address == email]
    stored = await cabinet.db.fetchrow(
        "SELECT status, body, link FROM mail_outbox WHERE to_address = $1", email
    )

    assert waiting == []
    assert stored == {"status": "expired", "body": None, "link": None}
