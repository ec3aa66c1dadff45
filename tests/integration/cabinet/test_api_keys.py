"""Organization API keys, row by row of the description's key state table and cabinet error table."""

from __future__ import annotations

from modelgate.domain.tokens import hash_token
from tests.integration.cabinet.cabinet_client import Cabinet, delete_organization_row

KEY_FIELDS = {"id", "organizationId", "alias", "ownerEmail", "systemId", "status"}


async def test_create_returns_201_with_every_field_of_the_api_key_object_and_the_secret(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    reply = await cabinet.create_key(owner, "billing-service")

    assert reply.status == 201
    assert set(reply.body) == KEY_FIELDS | {"secret"}
    assert reply.body["organizationId"] == org_id
    assert reply.body["alias"] == "billing-service"
    assert reply.body["status"] == "active"
    assert reply.body["systemId"] is None
    assert reply.body["secret"].startswith("sk-") and not reply.body["secret"].startswith("sk-mgmt-")


async def test_create_stores_only_the_hash_of_the_secret(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner)).body

    row = await cabinet.db.fetchrow("SELECT secret_hash, status FROM api_keys WHERE id = $1", created["id"])

    assert row == {"secret_hash": hash_token(created["secret"]), "status": "active"}


async def test_create_records_an_api_key_created_audit_entry_with_actor_key_and_time(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    user_id = await cabinet.user_id(owner)
    created = (await cabinet.create_key(owner, "audited")).body

    entry = next(e for e in await cabinet.audit_events(owner) if e["event"] == "api_key.created")

    assert entry["targetId"] == created["id"]
    assert entry["actor"] == {"type": "user", "id": user_id, "email": owner.email}
    assert entry["createdAt"].endswith("Z")
    assert entry["details"]["alias"] == "audited"


async def test_owner_email_defaults_to_the_e_mail_of_the_calling_session(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")

    reply = await cabinet.create_key(admin)

    assert reply.body["ownerEmail"] == admin.email


async def test_owner_email_can_be_given_and_is_normalised(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner)

    reply = await cabinet.create_key(owner, ownerEmail=f"  {member.email.upper()} ")

    assert reply.status == 201
    assert reply.body["ownerEmail"] == member.email


async def test_an_invalid_owner_email_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.create_key(owner, ownerEmail="not an e-mail")

    assert (reply.status, reply.body) == (400, {"error": "ownerEmail must be a valid e-mail address"})


async def test_a_key_can_be_linked_to_a_system_of_the_organization(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner, "crm")).body

    reply = await cabinet.create_key(owner, systemId=system["id"])

    assert reply.status == 201
    assert reply.body["systemId"] == system["id"]


async def test_create_without_alias_is_400_alias_is_required(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call("POST", "/organization/api-keys", token=owner.token, json={})

    assert (reply.status, reply.body) == (400, {"error": "alias is required"})


async def test_create_with_a_blank_empty_or_non_string_alias_is_400_alias_is_required(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()

    for alias in ("", "   ", None, 42, ["a"], {"a": 1}, True):
        reply = await cabinet.call("POST", "/organization/api-keys", token=owner.token, json={"alias": alias})
        assert (reply.status, reply.body) == (400, {"error": "alias is required"}), alias


async def test_create_with_an_alias_already_used_in_the_organization_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await cabinet.create_key(owner, "worker")

    reply = await cabinet.create_key(owner, "worker")

    assert (reply.status, reply.body) == (400, {"error": "alias already exists"})


async def test_an_alias_spelt_with_combining_characters_is_the_same_alias_and_stored_composed(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    composed = await cabinet.create_key(owner, "caf\u00e9")

    decomposed = await cabinet.create_key(owner, "cafe\u0301")
    stored = await cabinet.db.fetchval("SELECT alias FROM api_keys WHERE id = $1", composed.body["id"])

    assert (decomposed.status, decomposed.body) == (400, {"error": "alias already exists"})
    assert stored == composed.body["alias"] == "caf\u00e9"


async def test_an_alias_used_by_a_revoked_key_stays_taken(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    key = (await cabinet.create_key(owner, "worker")).body
    await cabinet.revoke_key(owner, key["id"])

    reply = await cabinet.create_key(owner, "worker")

    assert (reply.status, reply.body) == (400, {"error": "alias already exists"})


async def test_the_same_alias_may_exist_in_two_organizations(cabinet: Cabinet) -> None:
    first, second = await cabinet.register(), await cabinet.register()
    await cabinet.create_key(first, "worker")

    reply = await cabinet.create_key(second, "worker")

    assert reply.status == 201


async def test_create_with_an_unknown_system_is_400_naming_the_system(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.create_key(owner, systemId="sys_000000000000000000000000")

    assert (reply.status, reply.body) == (400, {"error": "system sys_000000000000000000000000 not found"})


async def test_create_when_the_organization_is_missing_is_400_organization_not_found(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    await delete_organization_row(cabinet.db, await cabinet.organization_id(owner))

    reply = await cabinet.create_key(owner)

    assert (reply.status, reply.body) == (400, {"error": "organization not found"})


async def test_revoke_moves_an_active_key_to_revoked_and_answers_200_with_the_object(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner, "to-revoke")).body

    reply = await cabinet.revoke_key(owner, created["id"])

    assert reply.status == 200
    assert reply.body == {**{k: created[k] for k in KEY_FIELDS}, "status": "revoked"}
    assert await cabinet.db.fetchval("SELECT status FROM api_keys WHERE id = $1", created["id"]) == "revoked"


async def test_revoke_reports_the_key_to_the_model_api_inside_the_transaction(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner)).body

    await cabinet.revoke_key(owner, created["id"])

    assert cabinet.sink.revoked == [hash_token(created["secret"])]
    assert cabinet.sink.status_seen_in_transaction == ["revoked"]


async def test_revoke_records_an_api_key_revoked_audit_entry(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner)).body

    await cabinet.revoke_key(owner, created["id"])

    entry = next(e for e in await cabinet.audit_events(owner) if e["event"] == "api_key.revoked")
    assert entry["targetId"] == created["id"]
    assert entry["actor"]["email"] == owner.email


async def test_revoke_of_an_unknown_key_is_400_api_key_not_found(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    for key_id in ("key_000000000000000000000000", "not-an-id", "%00"):
        reply = await cabinet.revoke_key(owner, key_id)
        assert (reply.status, reply.body) == (400, {"error": "api key not found"}), key_id


async def test_revoke_of_a_revoked_key_is_400_and_leaves_it_unchanged(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner)).body
    await cabinet.revoke_key(owner, created["id"])

    reply = await cabinet.revoke_key(owner, created["id"])

    assert (reply.status, reply.body) == (400, {"error": "api key already revoked"})
    assert len(cabinet.sink.revoked) == 1


async def test_revoke_when_the_organization_is_missing_is_400_organization_not_found(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner)).body
    await delete_organization_row(cabinet.db, created["organizationId"])

    reply = await cabinet.revoke_key(owner, created["id"])

    assert (reply.status, reply.body) == (400, {"error": "organization not found"})


async def test_a_revocation_failure_in_the_model_api_is_400_and_the_key_stays_active(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner)).body
    cabinet.sink.fail_with = RuntimeError("broadcast unavailable")

    reply = await cabinet.revoke_key(owner, created["id"])

    assert reply.status == 400
    assert reply.body == {"error": "api key revocation failed in the model API: broadcast unavailable"}
    assert await cabinet.db.fetchval("SELECT status FROM api_keys WHERE id = $1", created["id"]) == "active"
    assert not [e for e in await cabinet.audit_events(owner) if e["event"] == "api_key.revoked"]


async def test_a_key_whose_revocation_failed_can_be_revoked_again(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner)).body
    cabinet.sink.fail_with = RuntimeError("down")
    await cabinet.revoke_key(owner, created["id"])
    cabinet.sink.fail_with = None

    reply = await cabinet.revoke_key(owner, created["id"])

    assert reply.status == 200
    assert reply.body["status"] == "revoked"


async def test_a_member_cannot_create_or_revoke_keys(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    created = (await cabinet.create_key(owner)).body

    create = await cabinet.create_key(member)
    revoke = await cabinet.revoke_key(member, created["id"])

    assert (create.status, revoke.status) == (403, 403)
    assert create.body == {"error": "this action requires the owner or admin role"}
    assert revoke.body == create.body


async def test_an_admin_can_create_and_revoke_keys(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")

    created = await cabinet.create_key(admin)
    revoked = await cabinet.revoke_key(admin, created.body["id"])

    assert (created.status, revoked.status) == (201, 200)


async def test_the_secret_is_absent_from_every_later_response(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_key(owner)).body
    secret = created["secret"]

    overview = await cabinet.call("GET", "/overview", token=owner.token)
    revoked = await cabinet.revoke_key(owner, created["id"])
    audit = await cabinet.call("GET", "/audit-log", token=owner.token)

    assert [k["id"] for k in overview.body["apiKeys"]] == [created["id"]]
    assert set(overview.body["apiKeys"][0]) == KEY_FIELDS
    for reply in (overview, revoked, audit):
        assert secret.encode() not in reply.raw
        assert secret[-12:].encode() not in reply.raw
