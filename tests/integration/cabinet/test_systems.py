"""Systems: the information systems or agents API keys are linked to."""

from __future__ import annotations

from tests.integration.cabinet.cabinet_client import Cabinet


async def test_a_system_is_created_read_listed_updated_and_deleted(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    created = await cabinet.create_system(owner, "Support bot", description="answers tickets")
    system_id = created.body["id"]
    fetched = await cabinet.call("GET", f"/systems/{system_id}", token=owner.token)
    updated = await cabinet.call(
        "PATCH", f"/systems/{system_id}", token=owner.token, json={"name": "Helpdesk bot"}
    )
    listed = await cabinet.call("GET", "/systems", token=owner.token)
    deleted = await cabinet.call("DELETE", f"/systems/{system_id}", token=owner.token)
    gone = await cabinet.call("GET", f"/systems/{system_id}", token=owner.token)

    assert created.status == 201
    assert created.body["name"] == "Support bot"
    assert created.body["description"] == "answers tickets"
    assert fetched.body == created.body
    assert (updated.status, updated.body["name"], updated.body["description"]) == (
        200,
        "Helpdesk bot",
        "answers tickets",
    )
    assert [s["name"] for s in listed.body["systems"]] == ["Helpdesk bot"]
    assert deleted.status == 200
    assert (gone.status, gone.body) == (404, {"error": "system not found"})


async def test_a_system_name_is_unique_in_the_organization(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await cabinet.create_system(owner, "crm")
    other = (await cabinet.create_system(owner, "erp")).body

    duplicate = await cabinet.create_system(owner, "crm")
    rename = await cabinet.call("PATCH", f"/systems/{other['id']}", token=owner.token, json={"name": "crm"})

    assert (duplicate.status, duplicate.body) == (409, {"error": "a system named 'crm' already exists"})
    assert (rename.status, rename.body) == (409, {"error": "a system named 'crm' already exists"})


async def test_a_system_needs_a_name(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    missing = await cabinet.call("POST", "/systems", token=owner.token, json={"description": "x"})
    blank_rename = await cabinet.call(
        "PATCH",
        f"/systems/{(await cabinet.create_system(owner)).body['id']}",
        token=owner.token,
        json={"name": ""},
    )

    assert (missing.status, missing.body) == (400, {"error": "name is required"})
    assert (blank_rename.status, blank_rename.body) == (400, {"error": "name is required"})


async def test_deleting_a_system_with_active_keys_is_refused(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner)).body
    await cabinet.create_key(owner, systemId=system["id"])

    reply = await cabinet.call("DELETE", f"/systems/{system['id']}", token=owner.token)

    assert reply.status == 409
    assert reply.body == {
        "error": f"system {system['id']} is still linked to 1 active API key(s); revoke them first"
    }
    assert (await cabinet.call("GET", f"/systems/{system['id']}", token=owner.token)).status == 200


async def test_a_system_whose_keys_are_all_revoked_can_be_deleted(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner)).body
    key = (await cabinet.create_key(owner, systemId=system["id"])).body
    await cabinet.revoke_key(owner, key["id"])

    reply = await cabinet.call("DELETE", f"/systems/{system['id']}", token=owner.token)

    assert reply.status == 200
    overview = await cabinet.call("GET", "/overview", token=owner.token)
    assert overview.body["apiKeys"][0]["systemId"] is None


async def test_members_read_systems_but_cannot_write_them(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    system_id = (await cabinet.create_system(owner)).body["id"]

    reads = [
        await cabinet.call("GET", "/systems", token=member.token),
        await cabinet.call("GET", f"/systems/{system_id}", token=member.token),
    ]
    writes = [
        await cabinet.create_system(member),
        await cabinet.call("PATCH", f"/systems/{system_id}", token=member.token, json={"name": "x"}),
        await cabinet.call("DELETE", f"/systems/{system_id}", token=member.token),
    ]

    assert [r.status for r in reads] == [200, 200]
    assert [r.status for r in writes] == [403, 403, 403]


async def test_a_patch_without_any_field_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system_id = (await cabinet.create_system(owner)).body["id"]

    reply = await cabinet.call("PATCH", f"/systems/{system_id}", token=owner.token, json={"colour": "red"})

    assert (reply.status, reply.body) == (400, {"error": "give name or description to change"})


async def test_system_changes_are_audited(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system_id = (await cabinet.create_system(owner)).body["id"]
    await cabinet.call("PATCH", f"/systems/{system_id}", token=owner.token, json={"description": "new"})
    await cabinet.call("DELETE", f"/systems/{system_id}", token=owner.token)

    events = [e["event"] for e in await cabinet.audit_events(owner)]

    assert events[:3] == ["system.deleted", "system.updated", "system.created"]


async def test_deleting_a_system_named_by_a_policy_rule_is_refused(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner)).body
    rule = await cabinet.call(
        "POST",
        "/policy-rules",
        token=owner.token,
        json={"subjectType": "system", "subjectId": system["id"], "effect": "deny", "models": ["*"]},
    )
    assert rule.status == 201

    refused = await cabinet.call("DELETE", f"/systems/{system['id']}", token=owner.token)

    assert refused.status == 409
    assert refused.body == {
        "error": f"system {system['id']} is still named by 1 policy rule(s); delete or change them first"
    }
    await cabinet.call("DELETE", f"/policy-rules/{rule.body['id']}", token=owner.token)
    assert (await cabinet.call("DELETE", f"/systems/{system['id']}", token=owner.token)).status == 200
