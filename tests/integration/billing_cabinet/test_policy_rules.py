"""Policy rules: CRUD, strict validation, isolation between organizations, roles, audit and the sink."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from modelgate.cabinet.policy_rules import rules_for_key
from tests.integration.billing_cabinet.billing_client import BillingCabinet


async def test_a_rule_is_created_read_listed_updated_and_deleted(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    created = await cabinet.create_rule(
        owner,
        models=["mock-c*", "mock-e*"],
        budget={"amountMicros": 5_000_000, "period": "month"},
        rpm=100,
        description="the default set",
    )
    path = f"/policy-rules/{created.body['id']}"
    fetched = await cabinet.call("GET", path, token=owner.token)
    updated = await cabinet.call(
        "PATCH", path, token=owner.token, json={"models": ["mock-chat"], "tpm": 5000}
    )
    listed = await cabinet.call("GET", "/policy-rules", token=owner.token)
    deleted = await cabinet.call("DELETE", path, token=owner.token)
    gone = await cabinet.call("GET", path, token=owner.token)

    assert created.status == 201
    assert {k: v for k, v in created.body.items() if k not in ("id", "createdAt", "updatedAt")} == {
        "organizationId": org_id,
        "subjectType": "organization",
        "subjectId": org_id,
        "effect": "allow",
        "models": ["mock-c*", "mock-e*"],
        "budget": {"amountMicros": 5_000_000, "period": "month"},
        "rpm": 100,
        "tpm": None,
        "description": "the default set",
        "content": None,
    }
    assert created.body["id"].startswith("pol_")
    assert fetched.body == created.body
    assert (updated.status, updated.body["models"], updated.body["tpm"]) == (200, ["mock-chat"], 5000)
    assert updated.body["budget"] == created.body["budget"]
    assert updated.body["rpm"] == 100
    assert [r["id"] for r in listed.body["policyRules"]] == [created.body["id"]]
    assert (deleted.status, deleted.body["deleted"]) == (200, True)
    assert (gone.status, gone.body) == (404, {"error": "policy rule not found"})


async def test_an_organization_rule_defaults_its_subject_to_the_callers_organization(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    implicit = await cabinet.create_rule(owner)
    explicit = await cabinet.create_rule(owner, subjectId=org_id)

    assert (implicit.status, implicit.body["subjectId"]) == (201, org_id)
    assert (explicit.status, explicit.body["subjectId"]) == (201, org_id)


async def test_key_and_system_rules_name_a_key_and_a_system_of_the_organization(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner)).body
    key = (await cabinet.create_key(owner, systemId=system["id"])).body

    key_rule = await cabinet.create_rule(owner, subjectType="key", subjectId=key["id"], effect="deny")
    system_rule = await cabinet.create_rule(owner, subjectType="system", subjectId=system["id"], tpm=0)
    missing = await cabinet.create_rule(owner, subjectType="key")

    assert (key_rule.status, key_rule.body["subjectType"], key_rule.body["subjectId"]) == (
        201,
        "key",
        key["id"],
    )
    assert (system_rule.status, system_rule.body["subjectId"]) == (201, system["id"])
    assert (missing.status, missing.body) == (
        400,
        {"error": "subjectId is required for a key or system rule"},
    )


async def test_a_key_or_system_of_another_organization_is_refused_like_an_unknown_one(
    cabinet: BillingCabinet,
) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    bobs_system = (await cabinet.create_system(bob)).body
    bobs_key = (await cabinet.create_key(bob)).body

    replies = {
        "other key": await cabinet.create_rule(alice, subjectType="key", subjectId=bobs_key["id"]),
        "unknown key": await cabinet.create_rule(alice, subjectType="key", subjectId="key_0123456789abcdef"),
        "other system": await cabinet.create_rule(alice, subjectType="system", subjectId=bobs_system["id"]),
        "unknown system": await cabinet.create_rule(alice, subjectType="system", subjectId="sys_00000000"),
        "other org": await cabinet.create_rule(alice, subjectId=await cabinet.organization_id(bob)),
    }

    assert {name: (r.status, r.body) for name, r in replies.items()} == {
        "other key": (400, {"error": "subjectId: api key not found"}),
        "unknown key": (400, {"error": "subjectId: api key not found"}),
        "other system": (400, {"error": "subjectId: system not found"}),
        "unknown system": (400, {"error": "subjectId: system not found"}),
        "other org": (400, {"error": "subjectId: organization not found"}),
    }
    assert await cabinet.db.fetchval("SELECT COUNT(*) FROM policy_rules") == 0


INVALID_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"subjectType": "organization", "effect": "allow"}, "models is required"),
    ({"effect": "allow", "models": ["*"]}, "subjectType is required"),
    ({"subjectType": "organization", "models": ["*"]}, "effect is required"),
    ({"subjectType": "team", "effect": "allow", "models": ["*"]}, "subjectType must be one of"),
    ({"subjectType": 1, "effect": "allow", "models": ["*"]}, "subjectType must be one of"),
    ({"subjectType": "organization", "effect": "permit", "models": ["*"]}, "effect must be one of"),
    ({"subjectType": "organization", "effect": "allow", "models": []}, "models must be a non-empty array"),
    ({"subjectType": "organization", "effect": "allow", "models": "mock-c*"}, "models must be a non-empty"),
    ({"subjectType": "organization", "effect": "allow", "models": ["ok", 3]}, "models[1] must be a pattern"),
    ({"subjectType": "organization", "effect": "allow", "models": [""]}, "models[0] must be a pattern"),
    ({"subjectType": "organization", "effect": "allow", "models": ["gpt 4"]}, "models[0] must be a pattern"),
    ({"subjectType": "organization", "effect": "allow", "models": ["a\nb"]}, "models[0] must be a pattern"),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["m" * 201]},
        "models[0] must be a pattern",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"] * 101},
        "models must have at most 100",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "owner": "x"},
        "unknown field: owner",
    ),
    ({"subjectType": "organization", "effect": "allow", "models": ["*"], "id": "pol_1"}, "unknown field: id"),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "subjectId": 5},
        "subjectId must be",
    ),
    ({"subjectType": "organization", "effect": "allow", "models": ["*"], "budget": 5}, "budget must be an"),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "budget": {"amountMicros": 5}},
        "budget.period is required",
    ),
    (
        {
            "subjectType": "organization",
            "effect": "allow",
            "models": ["*"],
            "budget": {"amountMicros": -1, "period": "day"},
        },
        "budget.amountMicros must be an integer from 0",
    ),
    (
        {
            "subjectType": "organization",
            "effect": "allow",
            "models": ["*"],
            "budget": {"amountMicros": 1.5, "period": "day"},
        },
        "budget.amountMicros must be an integer from 0",
    ),
    (
        {
            "subjectType": "organization",
            "effect": "allow",
            "models": ["*"],
            "budget": {"amountMicros": True, "period": "day"},
        },
        "budget.amountMicros must be an integer from 0",
    ),
    (
        {
            "subjectType": "organization",
            "effect": "allow",
            "models": ["*"],
            "budget": {"amountMicros": 10**16, "period": "day"},
        },
        "budget.amountMicros must be an integer from 0",
    ),
    (
        {
            "subjectType": "organization",
            "effect": "allow",
            "models": ["*"],
            "budget": {"amountMicros": 5, "period": "week"},
        },
        "budget.period must be one of: day, month",
    ),
    (
        {
            "subjectType": "organization",
            "effect": "allow",
            "models": ["*"],
            "budget": {"amountMicros": 5, "period": "day", "currency": "EUR"},
        },
        "unknown field: budget.currency",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "rpm": -1},
        "rpm must be an integer",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "rpm": "60"},
        "rpm must be an integer",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "tpm": 1.0},
        "tpm must be an integer",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "tpm": False},
        "tpm must be an integer",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "rpm": 10**10},
        "rpm must be an integer",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "description": 7},
        "description must be",
    ),
    (
        {"subjectType": "organization", "effect": "allow", "models": ["*"], "description": "x" * 2001},
        "description must be at most 2000 characters",
    ),
    (
        {"subjectType": "organization", "effect": "deny", "models": ["*"], "rpm": 5},
        "a deny rule cannot have a budget, rpm or tpm",
    ),
    (
        {
            "subjectType": "organization",
            "effect": "deny",
            "models": ["*"],
            "budget": {"amountMicros": 5, "period": "day"},
        },
        "a deny rule cannot have a budget, rpm or tpm",
    ),
]


async def test_invalid_rules_are_400_with_the_reason_and_store_nothing(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()

    for body, message in INVALID_BODIES:
        reply = await cabinet.call("POST", "/policy-rules", token=owner.token, json=body)

        assert reply.status == 400, (body, reply.body)
        assert list(reply.body) == ["error"]
        assert reply.body["error"].startswith(message), (body, reply.body)
    assert await cabinet.db.fetchval("SELECT COUNT(*) FROM policy_rules") == 0
    assert cabinet.billing.policy_changes == []


async def test_a_body_that_is_not_a_json_object_is_400(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    rule_id = (await cabinet.create_rule(owner)).body["id"]

    for method, path in (("POST", "/policy-rules"), ("PATCH", f"/policy-rules/{rule_id}")):
        for raw, message in (
            (b"{oops", "request body is not valid JSON"),
            (b"[]", "request body must be a JSON object"),
        ):
            reply = await cabinet.call(method, path, token=owner.token, data=raw)

            assert (reply.status, reply.body) == (400, {"error": message})


async def test_invalid_updates_are_400_and_change_nothing(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    created = (await cabinet.create_rule(owner, rpm=10)).body
    path = f"/policy-rules/{created['id']}"

    bodies = [
        ({}, "give at least one of"),
        ({"models": []}, "models must be a non-empty array"),
        ({"effect": "deny"}, "a deny rule cannot have a budget, rpm or tpm"),
        ({"subjectType": "key"}, "subjectId is required for a key or system rule"),
        ({"subjectType": "system", "subjectId": "sys_0123456789"}, "subjectId: system not found"),
        ({"createdAt": "2020-01-01T00:00:00Z"}, "unknown field: createdAt"),
        ({"effect": None}, "effect is required"),
    ]
    for body, message in bodies:
        reply = await cabinet.call("PATCH", path, token=owner.token, json=body)

        assert reply.status == 400, (body, reply.body)
        assert reply.body["error"].startswith(message), (body, reply.body)
    assert (await cabinet.call("GET", path, token=owner.token)).body == created
    assert cabinet.billing.policy_changes == [created["organizationId"]]


async def test_null_clears_a_budget_and_rate_overrides(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    rule = (await cabinet.create_rule(owner, budget={"amountMicros": 10, "period": "day"}, rpm=1, tpm=2)).body

    cleared = await cabinet.call(
        "PATCH",
        f"/policy-rules/{rule['id']}",
        token=owner.token,
        json={"budget": None, "rpm": None, "tpm": None},
    )
    denied = await cabinet.call(
        "PATCH", f"/policy-rules/{rule['id']}", token=owner.token, json={"effect": "deny"}
    )

    assert (cleared.body["budget"], cleared.body["rpm"], cleared.body["tpm"]) == (None, None, None)
    assert cleared.body["updatedAt"] >= rule["updatedAt"]
    assert (denied.status, denied.body["effect"]) == (200, "deny")
    row = await cabinet.db.fetchrow(
        "SELECT budget_micros, budget_period, rpm, tpm FROM policy_rules WHERE id = $1", rule["id"]
    )
    assert row == {"budget_micros": None, "budget_period": None, "rpm": None, "tpm": None}


async def test_a_rule_can_move_to_another_subject_of_the_organization(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    key = (await cabinet.create_key(owner)).body
    rule = (await cabinet.create_rule(owner)).body
    path = f"/policy-rules/{rule['id']}"

    to_key = await cabinet.call(
        "PATCH", path, token=owner.token, json={"subjectType": "key", "subjectId": key["id"]}
    )
    back = await cabinet.call("PATCH", path, token=owner.token, json={"subjectType": "organization"})

    assert (to_key.status, to_key.body["subjectType"], to_key.body["subjectId"]) == (200, "key", key["id"])
    assert (back.status, back.body["subjectType"], back.body["subjectId"]) == (200, "organization", org_id)


async def test_models_are_stored_as_a_json_array_and_budgets_in_their_columns(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register()
    rule = (
        await cabinet.create_rule(
            owner, models=["mock-c*", "mock-c*", "mock-ch?t"], budget={"amountMicros": 7, "period": "day"}
        )
    ).body

    row = await cabinet.db.fetchrow(
        "SELECT models, budget_micros, budget_period FROM policy_rules WHERE id = $1", rule["id"]
    )

    assert orjson.loads(row["models"]) == ["mock-c*", "mock-ch?t"]
    assert (row["budget_micros"], row["budget_period"]) == (7, "day")


async def test_another_organizations_rule_is_404_for_read_update_and_delete(cabinet: BillingCabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    path = f"/policy-rules/{(await cabinet.create_rule(bob, description='private')).body['id']}"

    replies = [
        await cabinet.call("GET", path, token=alice.token),
        await cabinet.call("PATCH", path, token=alice.token, json={"description": "stolen"}),
        await cabinet.call("DELETE", path, token=alice.token),
        await cabinet.call("GET", "/policy-rules/not-an-id", token=alice.token),
    ]
    alices_list = await cabinet.call("GET", "/policy-rules", token=alice.token)

    assert [(r.status, r.body) for r in replies] == [(404, {"error": "policy rule not found"})] * 4
    assert alices_list.body == {"policyRules": []}
    assert (await cabinet.call("GET", path, token=bob.token)).body["description"] == "private"


async def test_members_read_rules_but_only_owners_and_admins_write_them(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")
    member = await cabinet.add_member(owner, "member")
    rule_id = (await cabinet.create_rule(admin)).body["id"]
    path = f"/policy-rules/{rule_id}"

    member_reads = [
        await cabinet.call("GET", "/policy-rules", token=member.token),
        await cabinet.call("GET", path, token=member.token),
    ]
    member_writes = [
        await cabinet.create_rule(member),
        await cabinet.call("PATCH", path, token=member.token, json={"description": "x"}),
        await cabinet.call("DELETE", path, token=member.token),
    ]

    assert [r.status for r in member_reads] == [200, 200]
    assert [r.status for r in member_writes] == [403, 403, 403]
    assert all(list(r.body) == ["error"] for r in member_writes)
    assert (await cabinet.call("DELETE", path, token=admin.token)).status == 200


async def test_a_management_key_manages_rules_like_an_admin(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    management_key = (await cabinet.create_management_key(owner)).body["secret"]

    created = await cabinet.create_rule(management_key, effect="deny", models=["mock-embed"])

    assert (created.status, created.body["effect"]) == (201, "deny")


async def test_rules_need_a_bearer_token_and_refuse_model_keys(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    model_key = (await cabinet.create_key(owner)).body["secret"]

    anonymous = await cabinet.call("GET", "/policy-rules")
    with_model_key = await cabinet.create_rule(model_key)

    assert anonymous.status == 401
    assert with_model_key.status == 401


async def test_every_write_is_audited(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    rule_id = (await cabinet.create_rule(owner, models=["mock-c*"])).body["id"]
    await cabinet.call("PATCH", f"/policy-rules/{rule_id}", token=owner.token, json={"rpm": 5})
    await cabinet.call("DELETE", f"/policy-rules/{rule_id}", token=owner.token)

    entries = [e for e in await cabinet.audit_events(owner) if e["event"].startswith("policy_rule.")]

    assert [e["event"] for e in entries] == [
        "policy_rule.deleted",
        "policy_rule.updated",
        "policy_rule.created",
    ]
    assert {e["targetId"] for e in entries} == {rule_id}
    assert entries[1]["details"]["changes"] == {"rpm": {"before": None, "after": 5}}
    assert entries[2]["details"]["models"] == ["mock-c*"]
    assert entries[2]["actor"]["email"] == owner.email


async def test_the_billing_sink_hears_each_write_once_after_its_commit(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    rule_id = (await cabinet.create_rule(owner)).body["id"]
    await cabinet.create_rule(owner, effect="deny", models=["mock-embed"])
    await cabinet.call("PATCH", f"/policy-rules/{rule_id}", token=owner.token, json={"rpm": 1})
    await cabinet.call("DELETE", f"/policy-rules/{rule_id}", token=owner.token)

    assert cabinet.billing.policy_changes == [org_id] * 4
    # Each call saw its own write committed: 1 rule, 2 rules, 2 rules, 1 rule.
    assert cabinet.billing.rule_counts_seen == [1, 2, 2, 1]


async def test_the_billing_sink_is_not_called_when_a_write_fails(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    other = await cabinet.register()
    others_rule = (await cabinet.create_rule(other)).body["id"]
    cabinet.billing.policy_changes.clear()

    await cabinet.create_rule(owner, models=[])
    await cabinet.create_rule(owner, subjectType="key", subjectId="key_0123456789")
    await cabinet.create_rule(member)
    await cabinet.call("PATCH", f"/policy-rules/{others_rule}", token=owner.token, json={"rpm": 1})
    await cabinet.call("DELETE", f"/policy-rules/{others_rule}", token=owner.token)

    assert cabinet.billing.policy_changes == []


async def test_deleting_a_rule_removes_its_budget_spend(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    rule_id = (await cabinet.create_rule(owner, budget={"amountMicros": 100, "period": "day"})).body["id"]
    await cabinet.db.execute(
        "INSERT INTO policy_budget_spend (rule_id, period_start, spent_micros) VALUES ($1, $2, $3)",
        rule_id,
        0.0,
        5,
    )

    await cabinet.call("DELETE", f"/policy-rules/{rule_id}", token=owner.token)

    assert (
        await cabinet.db.fetchval("SELECT COUNT(*) FROM policy_budget_spend WHERE rule_id = $1", rule_id) == 0
    )


async def test_rules_for_a_key_are_those_of_its_organization_system_and_itself(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    system = (await cabinet.create_system(owner)).body
    key = (await cabinet.create_key(owner, systemId=system["id"])).body
    other_key = (await cabinet.create_key(owner)).body
    org_rule = (await cabinet.create_rule(owner)).body["id"]
    system_rule = (await cabinet.create_rule(owner, subjectType="system", subjectId=system["id"])).body["id"]
    key_rule = (await cabinet.create_rule(owner, subjectType="key", subjectId=key["id"])).body["id"]
    await cabinet.create_rule(owner, subjectType="key", subjectId=other_key["id"])

    rules = await rules_for_key(cabinet.db, org_id, key["id"], system["id"])
    without_system = await rules_for_key(cabinet.db, org_id, key["id"], None)

    assert [r.id for r in rules] == [org_rule, system_rule, key_rule]
    assert [r.id for r in without_system] == [org_rule, key_rule]
    assert rules[0].matches("mock-chat") and rules[0].models == ("*",)


async def test_concurrent_edits_of_different_fields_all_take_effect(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    path = f"/policy-rules/{(await cabinet.create_rule(owner)).body['id']}"
    edits = [{"rpm": 5}, {"tpm": 7}, {"description": "edited"}, {"models": ["mock-*"]}]

    replies = await asyncio.gather(*(cabinet.call("PATCH", path, token=owner.token, json=e) for e in edits))
    final = (await cabinet.call("GET", path, token=owner.token)).body

    assert [r.status for r in replies] == [200] * 4
    assert (final["rpm"], final["tpm"], final["description"], final["models"]) == (5, 7, "edited", ["mock-*"])
