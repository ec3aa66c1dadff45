"""Management keys (sk-mgmt-…): issued, listed and revoked by owners only; the secret is shown once."""

from __future__ import annotations

from modelgate.domain.tokens import hash_token
from tests.integration.cabinet.cabinet_client import Cabinet


async def test_an_owner_creates_a_management_key_and_sees_the_secret_once(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    created = await cabinet.create_management_key(owner, "ci pipeline")
    listed = await cabinet.call("GET", "/organization/management-keys", token=owner.token)

    assert created.status == 201
    assert created.body["secret"].startswith("sk-mgmt-")
    assert created.body["name"] == "ci pipeline"
    assert created.body["status"] == "active"
    assert created.body["secretHint"] == f"sk-mgmt-…{created.body['secret'][-4:]}"
    assert [k["id"] for k in listed.body["managementKeys"]] == [created.body["id"]]
    assert "secret" not in listed.body["managementKeys"][0]
    assert created.body["secret"].encode() not in listed.raw
    stored = await cabinet.db.fetchval("SELECT secret_hash FROM management_keys")
    assert stored == hash_token(created.body["secret"])


async def test_a_management_key_needs_a_name(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call("POST", "/organization/management-keys", token=owner.token, json={"name": " "})

    assert (reply.status, reply.body) == (400, {"error": "name is required"})


async def test_admins_and_members_cannot_touch_management_keys(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")
    member = await cabinet.add_member(owner, "member")
    key_id = (await cabinet.create_management_key(owner)).body["id"]

    for account in (admin, member):
        assert (await cabinet.create_management_key(account)).status == 403
        assert (await cabinet.call("GET", "/organization/management-keys", token=account.token)).status == 403
        revoke = await cabinet.call(
            "POST", f"/organization/management-keys/{key_id}/revoke", token=account.token
        )
        assert revoke.status == 403


async def test_revoking_a_management_key_twice_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    key_id = (await cabinet.create_management_key(owner)).body["id"]
    path = f"/organization/management-keys/{key_id}/revoke"

    first = await cabinet.call("POST", path, token=owner.token)
    second = await cabinet.call("POST", path, token=owner.token)

    assert (first.status, first.body["status"]) == (200, "revoked")
    assert (second.status, second.body) == (400, {"error": "management key already revoked"})


async def test_management_key_operations_are_audited(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    key_id = (await cabinet.create_management_key(owner)).body["id"]
    await cabinet.call("POST", f"/organization/management-keys/{key_id}/revoke", token=owner.token)

    events = [e["event"] for e in await cabinet.audit_events(owner)]

    assert events[:2] == ["management_key.revoked", "management_key.created"]


async def test_revoking_an_unknown_management_key_is_404(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call(
        "POST", "/organization/management-keys/mkey_000000000000000000000000/revoke", token=owner.token
    )

    assert (reply.status, reply.body) == (404, {"error": "management key not found"})
