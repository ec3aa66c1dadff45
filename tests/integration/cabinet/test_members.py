"""Members and roles: who may change roles or remove members, and the last owner's protection."""

from __future__ import annotations

import asyncio

from tests.integration.cabinet.cabinet_client import Cabinet


async def test_every_member_can_list_the_members(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")

    reply = await cabinet.call("GET", "/members", token=member.token)

    assert reply.status == 200
    assert [(m["email"], m["role"]) for m in reply.body["members"]] == [
        (owner.email, "owner"),
        (member.email, "member"),
    ]
    assert set(reply.body["members"][0]) == {"id", "email", "role", "emailVerified", "createdAt"}


async def test_an_admin_promotes_a_member_to_admin(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")
    member = await cabinet.add_member(owner, "member")

    reply = await cabinet.call(
        "PATCH", f"/members/{await cabinet.user_id(member)}", token=admin.token, json={"role": "admin"}
    )

    assert (reply.status, reply.body["role"]) == (200, "admin")
    assert (await cabinet.session(member))["user"]["role"] == "admin"


async def test_a_member_cannot_change_roles_or_remove_members(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    owner_id = await cabinet.user_id(owner)

    patch = await cabinet.call("PATCH", f"/members/{owner_id}", token=member.token, json={"role": "member"})
    delete = await cabinet.call("DELETE", f"/members/{owner_id}", token=member.token)

    assert (patch.status, patch.body) == (403, {"error": "this action requires the owner or admin role"})
    assert (delete.status, delete.body) == (403, {"error": "this action requires the owner or admin role"})


async def test_an_admin_cannot_make_an_owner(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")

    reply = await cabinet.call(
        "PATCH", f"/members/{await cabinet.user_id(admin)}", token=admin.token, json={"role": "owner"}
    )

    assert (reply.status, reply.body) == (
        403,
        {"error": "only an owner can grant or take away the owner role"},
    )


async def test_an_admin_cannot_demote_or_remove_an_owner(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")
    second_owner = await cabinet.add_member(owner, "owner")
    target = await cabinet.user_id(second_owner)

    patch = await cabinet.call("PATCH", f"/members/{target}", token=admin.token, json={"role": "member"})
    delete = await cabinet.call("DELETE", f"/members/{target}", token=admin.token)

    assert (patch.status, delete.status) == (403, 403)


async def test_an_owner_makes_another_owner(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")

    reply = await cabinet.call(
        "PATCH", f"/members/{await cabinet.user_id(admin)}", token=owner.token, json={"role": "owner"}
    )

    assert (reply.status, reply.body["role"]) == (200, "owner")


async def test_the_last_owner_cannot_be_demoted(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call(
        "PATCH", f"/members/{await cabinet.user_id(owner)}", token=owner.token, json={"role": "admin"}
    )

    assert (reply.status, reply.body) == (
        409,
        {"error": "the last owner of the organization cannot be demoted"},
    )
    assert (await cabinet.session(owner))["user"]["role"] == "owner"


async def test_the_last_owner_cannot_be_removed(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call("DELETE", f"/members/{await cabinet.user_id(owner)}", token=owner.token)

    assert (reply.status, reply.body) == (
        409,
        {"error": "the last owner of the organization cannot be removed"},
    )


async def test_with_two_owners_one_may_step_down(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await cabinet.add_member(owner, "owner")

    reply = await cabinet.call(
        "PATCH", f"/members/{await cabinet.user_id(owner)}", token=owner.token, json={"role": "member"}
    )

    assert (reply.status, reply.body["role"]) == (200, "member")


async def test_removing_a_member_ends_their_sessions(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")

    reply = await cabinet.call("DELETE", f"/members/{await cabinet.user_id(member)}", token=owner.token)

    assert (reply.status, reply.body["removed"]) == (200, True)
    assert (await cabinet.call("GET", "/overview", token=member.token)).status == 401
    assert (await cabinet.login(member.email)).status == 401


async def test_an_unknown_role_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")

    reply = await cabinet.call(
        "PATCH", f"/members/{await cabinet.user_id(member)}", token=owner.token, json={"role": "superuser"}
    )

    assert (reply.status, reply.body) == (400, {"error": "role must be one of: owner, admin, member"})


async def test_an_unknown_member_is_404(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    patch = await cabinet.call(
        "PATCH", "/members/usr_000000000000000000000000", token=owner.token, json={"role": "admin"}
    )
    delete = await cabinet.call("DELETE", "/members/garbage", token=owner.token)

    assert (patch.status, patch.body) == (404, {"error": "member not found"})
    assert (delete.status, delete.body) == (404, {"error": "member not found"})


async def test_role_changes_and_removals_are_audited(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    member_id = await cabinet.user_id(member)
    await cabinet.call("PATCH", f"/members/{member_id}", token=owner.token, json={"role": "admin"})
    await cabinet.call("DELETE", f"/members/{member_id}", token=owner.token)

    entries = await cabinet.audit_events(owner)

    assert [e["event"] for e in entries[:2]] == ["member.removed", "member.role_changed"]
    assert entries[1]["details"] == {"email": member.email, "from": "member", "to": "admin"}
    assert entries[0]["targetId"] == member_id


async def test_two_owners_demoting_each_other_at_once_leave_one_owner(cabinet: Cabinet) -> None:
    first = await cabinet.register()
    second = await cabinet.add_member(first, "owner")
    first_id, second_id = await cabinet.user_id(first), await cabinet.user_id(second)

    replies = await asyncio.gather(
        cabinet.call("PATCH", f"/members/{second_id}", token=first.token, json={"role": "member"}),
        cabinet.call("PATCH", f"/members/{first_id}", token=second.token, json={"role": "member"}),
    )

    # The loser is refused either as no longer an owner (403) or as the last owner (409).
    assert sorted(r.status for r in replies)[0] == 200
    assert sorted(r.status for r in replies)[1] in (403, 409)
    owners = await cabinet.db.fetchval("SELECT COUNT(*) FROM users WHERE role = 'owner'")
    assert owners == 1
