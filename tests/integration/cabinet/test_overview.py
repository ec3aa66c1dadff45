"""GET /api/overview: the organization at a glance, never with a secret."""

from __future__ import annotations

from tests.integration.cabinet.cabinet_client import Cabinet


async def test_the_overview_holds_organization_user_members_keys_systems_and_billing(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register(legal_name="Overview AG", plan="pro")
    member = await cabinet.add_member(owner, "member")
    system = (await cabinet.create_system(owner, "crm")).body
    key = (await cabinet.create_key(owner, "crm-key", systemId=system["id"])).body

    reply = await cabinet.call("GET", "/overview", token=member.token)

    assert reply.status == 200
    body = reply.body
    assert set(body) == {"organization", "user", "members", "apiKeys", "systems", "billing"}
    assert body["organization"]["legalName"] == "Overview AG"
    assert body["user"]["email"] == member.email
    assert body["user"]["role"] == "member"
    assert [m["email"] for m in body["members"]] == [owner.email, member.email]
    assert body["apiKeys"] == [{k: v for k, v in key.items() if k != "secret"}]
    assert [s["id"] for s in body["systems"]] == [system["id"]]


async def test_the_billing_member_shows_the_plan_and_the_open_first_invoice(cabinet: Cabinet) -> None:
    owner = await cabinet.register(plan="pro")

    billing = (await cabinet.call("GET", "/overview", token=owner.token)).body["billing"]

    assert billing["plan"]["code"] == "pro"
    assert billing["plan"]["monthlyFeeMicros"] == 49_000_000
    assert billing["balanceMicros"] == 0
    assert [(i["planCode"], i["amountMicros"], i["status"]) for i in billing["openInvoices"]] == [
        ("pro", 49_000_000, "open")
    ]


async def test_the_overview_never_contains_a_key_secret(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    secrets = [(await cabinet.create_key(owner)).body["secret"] for _ in range(2)]
    secrets.append((await cabinet.create_management_key(owner)).body["secret"])

    reply = await cabinet.call("GET", "/overview", token=owner.token)

    assert all(k["status"] == "active" for k in reply.body["apiKeys"])
    for secret in secrets:
        assert secret.encode() not in reply.raw
    assert b"secret" not in reply.raw
