"""Isolation: another organization's keys, systems, invitations and members behave like unknown ids."""

from __future__ import annotations

from tests.integration.cabinet.cabinet_client import Cabinet


async def test_an_organization_cannot_revoke_another_organizations_key(cabinet: Cabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    bobs_key = (await cabinet.create_key(bob)).body

    reply = await cabinet.revoke_key(alice, bobs_key["id"])

    assert (reply.status, reply.body) == (400, {"error": "api key not found"})
    assert await cabinet.db.fetchval("SELECT status FROM api_keys WHERE id = $1", bobs_key["id"]) == "active"


async def test_an_organization_does_not_see_another_organizations_keys_or_systems(cabinet: Cabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    await cabinet.create_key(bob)
    await cabinet.create_system(bob)

    overview = await cabinet.call("GET", "/overview", token=alice.token)
    systems = await cabinet.call("GET", "/systems", token=alice.token)

    assert overview.body["apiKeys"] == []
    assert overview.body["systems"] == []
    assert [m["email"] for m in overview.body["members"]] == [alice.email]
    assert systems.body["systems"] == []


async def test_an_organization_cannot_link_a_key_to_another_organizations_system(cabinet: Cabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    bobs_system = (await cabinet.create_system(bob)).body

    reply = await cabinet.create_key(alice, systemId=bobs_system["id"])

    assert (reply.status, reply.body) == (400, {"error": f"system {bobs_system['id']} not found"})


async def test_an_organization_cannot_read_change_or_delete_another_organizations_system(
    cabinet: Cabinet,
) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    path = f"/systems/{(await cabinet.create_system(bob, 'private')).body['id']}"

    replies = [
        await cabinet.call("GET", path, token=alice.token),
        await cabinet.call("PATCH", path, token=alice.token, json={"name": "stolen"}),
        await cabinet.call("DELETE", path, token=alice.token),
    ]

    assert [(r.status, r.body) for r in replies] == [(404, {"error": "system not found"})] * 3
    assert (await cabinet.call("GET", path, token=bob.token)).body["name"] == "private"


async def test_an_organization_cannot_see_or_revoke_another_organizations_invitations(
    cabinet: Cabinet,
) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    bobs_invitation = (await cabinet.invite(bob)).body

    listed = await cabinet.call("GET", "/invitations", token=alice.token)
    revoke = await cabinet.call("POST", f"/invitations/{bobs_invitation['id']}/revoke", token=alice.token)

    assert listed.body["invitations"] == []
    assert (revoke.status, revoke.body) == (404, {"error": "invitation not found"})


async def test_an_organization_cannot_change_or_remove_another_organizations_members(
    cabinet: Cabinet,
) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    bobs_member = await cabinet.add_member(bob, "member")
    path = f"/members/{await cabinet.user_id(bobs_member)}"

    patch = await cabinet.call("PATCH", path, token=alice.token, json={"role": "admin"})
    delete = await cabinet.call("DELETE", path, token=alice.token)

    assert (patch.status, patch.body) == (404, {"error": "member not found"})
    assert (delete.status, delete.body) == (404, {"error": "member not found"})
    assert (await cabinet.session(bobs_member))["user"]["role"] == "member"


async def test_an_organization_cannot_revoke_another_organizations_management_key(cabinet: Cabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    bobs_key = (await cabinet.create_management_key(bob)).body

    reply = await cabinet.call(
        "POST", f"/organization/management-keys/{bobs_key['id']}/revoke", token=alice.token
    )

    assert (reply.status, reply.body) == (404, {"error": "management key not found"})


async def test_a_management_key_acts_only_within_its_organization(cabinet: Cabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    alices_key = (await cabinet.create_management_key(alice)).body["secret"]
    bobs_api_key = (await cabinet.create_key(bob)).body

    reply = await cabinet.revoke_key(alices_key, bobs_api_key["id"])

    assert (reply.status, reply.body) == (400, {"error": "api key not found"})


async def test_the_audit_log_shows_only_the_callers_organization(cabinet: Cabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    await cabinet.create_key(bob)

    events = [e["event"] for e in await cabinet.audit_events(alice)]

    assert events == ["auth.registered"]
