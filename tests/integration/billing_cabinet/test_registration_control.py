"""Who may register and on which plan: `[cabinet] registration`, self-service plans and the operator's
registration invitations (API and `modelgate billing invite-org`)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from tests.integration.billing_cabinet.billing_client import (
    OPERATOR_TOKEN,
    BillingCabinet,
    BillingCabinetFactory,
    billing_config,
)
from tests.integration.billing_cabinet.test_billing_cli import run_billing, write_config
from tests.integration.cabinet.cabinet_client import PASSWORD, Account, Reply, unique_email

ENTERPRISE_CREDIT_MICROS = 1_000_000_000


async def _register(cabinet: BillingCabinet, email: str, **fields: str) -> Reply:
    body = {"legalName": "Applicant Ltd", "email": email, "password": PASSWORD, **fields}
    return await cabinet.call("POST", "/auth/register", json=body)


async def _organizations(cabinet: BillingCabinet) -> int:
    return int(await cabinet.db.fetchval("SELECT COUNT(*) FROM organizations"))


async def test_self_registration_on_a_credit_plan_is_refused(cabinet: BillingCabinet) -> None:
    reply = await _register(cabinet, unique_email(), planCode="enterprise")

    assert reply.status == 400
    assert reply.body["error"].startswith("planCode 'enterprise' is not open for self-registration")
    assert await _organizations(cabinet) == 0


async def test_plans_without_credit_stay_open_and_the_config_can_close_or_open_any_plan(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    config = billing_config()
    flipped = tuple(replace(p, self_service=p.code != "pro") for p in config.plans)
    cabinet = await start_billing_cabinet(replace(config, plans=flipped))

    pro = await _register(cabinet, unique_email(), planCode="pro")
    enterprise = await _register(cabinet, unique_email(), planCode="enterprise")
    free = await _register(cabinet, unique_email(), planCode="free")

    assert [c.self_service for c in billing_config().plans] == [True, True, False]
    assert pro.status == 400 and "'pro' is not open for self-registration" in pro.body["error"]
    assert (enterprise.status, free.status) == (201, 201)


async def test_closed_registration_is_403_while_member_invitations_still_work(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    opened = await start_billing_cabinet()
    owner = await opened.register(plan="pro")
    closed = await start_billing_cabinet(billing_config(cabinet={"registration": "closed"}))
    email = unique_email()
    invitation_token = await closed.invite_organization(email, "pro")

    refused = await _register(closed, unique_email(), planCode="pro")
    invited = await _register(closed, email, invitationToken=invitation_token)
    member = await closed.add_member(owner)

    assert (refused.status, refused.body) == (403, {"error": "registration is closed"})
    assert (invited.status, invited.body) == (403, {"error": "registration is closed"})
    assert (await closed.session(member))["organization"]["id"] == await closed.organization_id(owner)
    assert await _organizations(closed) == 1


async def test_invite_only_registration_needs_a_valid_invitation_of_the_operator(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    cabinet = await start_billing_cabinet(billing_config(cabinet={"registration": "invite_only"}))
    email = unique_email()

    without = await _register(cabinet, email, planCode="free")
    forged = await _register(cabinet, email, planCode="free", invitationToken="not-a-token")
    token = await cabinet.invite_organization(email, "enterprise")
    other_email = await _register(cabinet, unique_email(), invitationToken=token)
    other_plan = await _register(cabinet, email, invitationToken=token, planCode="free")
    accepted = await _register(cabinet, email.upper(), invitationToken=token)
    again = await _register(cabinet, unique_email(), invitationToken=token)

    assert without.status == 403 and "invitation" in without.body["error"]
    assert (forged.status, forged.body) == (403, {"error": "invitation token is not valid"})
    assert (other_email.status, other_email.body) == (
        403,
        {"error": "the invitation is for another e-mail address"},
    )
    assert other_plan.status == 400 and "the plan of the invitation" in other_plan.body["error"]
    assert accepted.status == 201, accepted.body
    assert (again.status, again.body) == (403, {"error": "invitation has already been used"})
    # The invitation chose the plan, a credit plan included: it may spend before paying.
    session = await cabinet.call("GET", "/overview", token=accepted.body["token"])
    assert session.body["organization"]["planCode"] == "enterprise"
    assert (session.body["billing"]["creditLimitMicros"], session.body["billing"]["canSpend"]) == (
        ENTERPRISE_CREDIT_MICROS,
        True,
    )
    entries = await cabinet.audit_events(Account(accepted.body["token"], accepted.body["email"]))
    [entry] = [entry for entry in entries if entry["event"] == "auth.registered"]
    assert entry["details"]["invitationId"].startswith("reginv_")
    # The plan has no fee: its 0.00 invoice was paid as it was opened.
    paid = [entry["details"]["via"] for entry in entries if entry["event"] == "invoice.paid"]
    assert paid == ["registration"]


async def test_an_invitation_expires_after_the_configured_time(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    cabinet = await start_billing_cabinet(
        billing_config(cabinet={"registration": "invite_only", "invitation_ttl_seconds": 3600})
    )
    email = unique_email()
    reply = await cabinet.operator(
        "POST", "/registration-invitations", json={"email": email, "planCode": "pro"}
    )
    token = reply.body["token"]
    stored = await cabinet.db.fetchrow(
        "SELECT token_hash, created_at, expires_at FROM registration_invitations"
    )
    await cabinet.db.execute("UPDATE registration_invitations SET expires_at = created_at")

    expired = await _register(cabinet, email, invitationToken=token)

    assert reply.status == 201 and reply.body["planCode"] == "pro" and reply.body["status"] == "pending"
    assert stored["expires_at"] - stored["created_at"] == 3600
    # Stored hashed like every other token: the token itself is nowhere in the database.
    assert stored["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert (expired.status, expired.body) == (403, {"error": "invitation has expired"})
    assert await _organizations(cabinet) == 0


async def test_the_operator_invitation_endpoint_checks_its_input_and_token(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    await cabinet.verify_address(owner)  # an unverified account holds nothing (docs/cabinet.md)

    unknown_plan = await cabinet.operator(
        "POST", "/registration-invitations", json={"email": unique_email(), "planCode": "gold"}
    )
    bad_email = await cabinet.operator(
        "POST", "/registration-invitations", json={"email": "nope", "planCode": "pro"}
    )
    taken = await cabinet.operator(
        "POST", "/registration-invitations", json={"email": owner.email, "planCode": "pro"}
    )
    extra = await cabinet.operator(
        "POST", "/registration-invitations", json={"email": unique_email(), "planCode": "pro", "x": 1}
    )
    wrong_token = await cabinet.operator(
        "POST", "/registration-invitations", token="wrong", json={"email": unique_email(), "planCode": "pro"}
    )

    assert unknown_plan.status == 400 and unknown_plan.body["error"].startswith("planCode must be one of")
    assert bad_email.status == 400
    assert (taken.status, taken.body) == (409, {"error": "an account with this e-mail already exists"})
    assert (extra.status, extra.body) == (400, {"error": "unknown field: x"})
    assert wrong_token.status == 401
    assert await cabinet.db.fetchval("SELECT COUNT(*) FROM registration_invitations") == 0


async def test_invite_org_from_the_cli_gives_a_token_that_registers_on_storage_and_through_a_gateway(
    start_billing_cabinet: BillingCabinetFactory, storage_url: str, tmp_path: Path
) -> None:
    cabinet = await start_billing_cabinet(billing_config(cabinet={"registration": "invite_only"}))
    by_storage, by_url = unique_email(), unique_email()
    config = write_config(tmp_path, storage_url, '[[plans]]\ncode = "enterprise"\ncredit_limit = 1000.0\n')

    stored = await run_billing("invite-org", by_storage, "enterprise", "--config", config)
    called = await run_billing(
        "invite-org", by_url, "pro", "--url", str(cabinet.client.make_url("/")), token=OPERATOR_TOKEN
    )
    unknown = await run_billing("invite-org", unique_email(), "gold", "--config", config)

    assert stored[0] == 0, stored[2]
    assert called[0] == 0, called[2]
    assert f"invited {by_storage} to register on plan enterprise" in stored[1]
    assert unknown[0] == 2 and "planCode must be one of" in unknown[2]
    for email, (_, out, _) in ((by_storage, stored), (by_url, called)):
        token = out.split("registration token (shown once): ")[1].split()[0]
        reply = await _register(cabinet, email, invitationToken=token)
        assert reply.status == 201, reply.body
