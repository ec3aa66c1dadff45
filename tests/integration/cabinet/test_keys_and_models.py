"""Issue #38: the model catalogue (GET /api/models), rules that must name real models, and keys as the unit of
control (limits written at creation, owners who are members, members' own keys, the paged key report)."""

from __future__ import annotations

import calendar
import time
from typing import Any

from tests.integration.cabinet.cabinet_client import Account, Cabinet


async def _rule(cabinet: Cabinet, account: Account, **fields: Any) -> Any:
    body = {"subjectType": "organization", "effect": "allow", "models": ["*"], **fields}
    return await cabinet.call("POST", "/policy-rules", token=account.token, json=body)


async def _report(cabinet: Cabinet, account: Account, query: str = "") -> Any:
    reply = await cabinet.call("GET", f"/key-report{query}", token=account.token)
    assert reply.status == 200, reply.body
    return reply.body


async def _ledger_row(cabinet: Cabinet, org_id: str, key_id: str, n: int, at: float, cost: int) -> None:
    await cabinet.db.execute(
        "INSERT INTO usage_ledger (id, organization_id, key_id, model, request_id, status, cost_micros,"
        " created_at) VALUES ($1, $2, $3, 'mock-chat', $4, 200, $5, $6)",
        f"use_{key_id}_{n}",
        org_id,
        key_id,
        f"req_{key_id}_{n}",
        cost,
        at,
    )


# -- the model catalogue ---------------------------------------------------------------------------------


async def test_models_lists_each_model_with_kinds_token_prices_context_window_and_the_plans_limits(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register(plan="pro")

    reply = await cabinet.call("GET", "/models", token=owner.token)

    assert reply.status == 200, reply.body
    models = {model["id"]: model for model in reply.body["models"]}
    assert set(models) == {"mock-chat", "mock-embed"}
    chat = models["mock-chat"]
    assert chat["kinds"] == ["chat", "completions", "responses", "messages", "decisions"]
    assert chat["contextWindow"] == 128000
    assert chat["prices"]["perMillionTokens"]["input"] == 0.5
    assert chat["prices"]["perMillionTokens"]["output"] == 1.5
    assert chat["prices"]["perMillionTokens"]["cachedInput"] == 0.5  # no discount named: billed whole
    assert models["mock-embed"]["kinds"] == ["embeddings"]
    assert reply.body["plan"] == {
        "code": "pro",
        "name": "Pro",
        "rpm": 600,
        "tpm": 1000000,
        "realtimeConcurrency": 2,
        "creditLimitMicros": 0,
    }


async def test_models_leaves_out_what_the_organization_denies_and_names_the_rules_that_limit_a_model(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    denied = (await _rule(cabinet, owner, effect="deny", models=["mock-embed"])).body
    limited = (
        await _rule(cabinet, owner, models=["mock-c*"], rpm=7, budget={"amountMicros": 5, "period": "day"})
    ).body

    reply = await cabinet.call("GET", "/models", token=owner.token)

    assert [model["id"] for model in reply.body["models"]] == ["mock-chat"]
    [rule] = reply.body["models"][0]["rules"]
    assert rule["ruleId"] == limited["id"] != denied["id"]
    assert (rule["rpm"], rule["budget"]) == (7, {"amountMicros": 5, "period": "day"})


async def test_models_needs_a_signed_in_caller(cabinet: Cabinet) -> None:
    reply = await cabinet.call("GET", "/models")

    assert reply.status == 401
    assert set(reply.body) == {"error"}


async def test_a_rule_whose_model_pattern_matches_no_model_is_400_naming_the_pattern(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()

    created = await _rule(cabinet, owner, models=["mock-chat", "mock-chta"])

    assert created.status == 400
    assert created.body == {
        "error": 'models[1]: the pattern "mock-chta" matches no model (see GET /api/models)'
    }
    listed = await cabinet.call("GET", "/policy-rules", token=owner.token)
    assert listed.body["policyRules"] == []


async def test_an_edit_to_a_pattern_that_matches_no_model_is_400_and_keeps_the_rule(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    rule = (await _rule(cabinet, owner, models=["mock-*"])).body

    edited = await cabinet.call(
        "PATCH", f"/policy-rules/{rule['id']}", token=owner.token, json={"models": ["gpt-*"]}
    )

    assert (edited.status, edited.body) == (
        400,
        {"error": 'models[0]: the pattern "gpt-*" matches no model (see GET /api/models)'},
    )
    kept = await cabinet.call("GET", f"/policy-rules/{rule['id']}", token=owner.token)
    assert kept.body["models"] == ["mock-*"]


# -- creating a key with its limits ----------------------------------------------------------------------


async def test_a_key_created_with_budget_rates_and_models_gets_its_own_allow_rule(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    budget = {"amountMicros": 2_500_000, "period": "day"}

    created = await cabinet.create_key(
        owner, "limited", budget=budget, rpm=30, tpm=9000, models=["mock-chat"]
    )

    assert created.status == 201, created.body
    assert set(created.body) == {
        "id",
        "organizationId",
        "alias",
        "ownerEmail",
        "systemId",
        "status",
        "secret",
    }
    [rule] = (await cabinet.call("GET", "/policy-rules", token=owner.token)).body["policyRules"]
    assert (rule["subjectType"], rule["subjectId"], rule["effect"]) == ("key", created.body["id"], "allow")
    assert (rule["models"], rule["budget"], rule["rpm"], rule["tpm"]) == (["mock-chat"], budget, 30, 9000)
    entries = {entry["event"]: entry for entry in await cabinet.audit_events(owner)}
    assert entries["policy_rule.created"]["targetId"] == rule["id"]
    assert entries["api_key.created"]["targetId"] == created.body["id"]


async def test_a_key_with_a_budget_only_may_use_no_more_models_than_its_organization_allows(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    await _rule(cabinet, owner, models=["mock-embed"])

    created = await cabinet.create_key(owner, budget={"amountMicros": 1, "period": "month"})

    rules = (await cabinet.call("GET", "/policy-rules", token=owner.token)).body["policyRules"]
    [own] = [rule for rule in rules if rule["subjectId"] == created.body["id"]]
    assert own["models"] == ["mock-embed"]


async def test_a_key_with_a_bad_limit_is_400_and_not_created(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    unknown_model = await cabinet.create_key(owner, "nope-1", models=["mock-chta"])
    bad_budget = await cabinet.create_key(owner, "nope-2", budget={"amountMicros": -1, "period": "day"})
    bad_rpm = await cabinet.create_key(owner, "nope-3", rpm="fast")

    assert (unknown_model.status, unknown_model.body) == (
        400,
        {"error": 'models[0]: the pattern "mock-chta" matches no model (see GET /api/models)'},
    )
    assert bad_budget.status == 400 and bad_budget.body["error"].startswith("budget.amountMicros must be")
    assert bad_rpm.status == 400 and bad_rpm.body["error"].startswith("rpm must be an integer")
    assert (await _report(cabinet, owner))["total"] == 0


async def test_the_owner_e_mail_of_a_key_must_be_a_member_of_the_organization(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    stranger = await cabinet.register()  # a user, but of another organization

    for email in ("nobody@else.example", stranger.email):
        reply = await cabinet.create_key(owner, ownerEmail=email)
        assert (reply.status, reply.body) == (
            400,
            {"error": f"ownerEmail: {email} is not a member of the organization"},
        )


# -- members' own keys -----------------------------------------------------------------------------------


async def test_members_create_keys_only_once_the_organization_lets_them(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner)
    settings = await cabinet.call("GET", "/organization/settings", token=member.token)
    assert settings.body == {"membersCreateKeys": False}

    refused = await cabinet.create_key(member, "mine")
    changed = await cabinet.call(
        "PATCH", "/organization/settings", token=owner.token, json={"membersCreateKeys": True}
    )
    allowed = await cabinet.create_key(member, "mine")

    assert (refused.status, refused.body) == (403, {"error": "this action requires the owner or admin role"})
    assert (changed.status, changed.body) == (200, {"membersCreateKeys": True})
    assert allowed.status == 201 and allowed.body["ownerEmail"] == member.email
    entry = next(
        e for e in await cabinet.audit_events(owner) if e["event"] == "organization.settings_changed"
    )
    assert entry["details"] == {"membersCreateKeys": {"before": False, "after": True}}


async def test_a_member_creates_keys_for_themselves_without_limits_and_cannot_change_the_setting(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner)
    await cabinet.call("PATCH", "/organization/settings", token=owner.token, json={"membersCreateKeys": True})

    for someone_else in (owner.email, "nobody@else.example"):
        other_owner = await cabinet.create_key(member, ownerEmail=someone_else)
        assert other_owner.status == 403
    with_limits = await cabinet.create_key(member, rpm=1000)
    setting = await cabinet.call(
        "PATCH", "/organization/settings", token=member.token, json={"membersCreateKeys": False}
    )

    assert with_limits.status == 403
    assert with_limits.body == {"error": "only owners and admins set a key's budget, rpm, tpm or models"}
    assert setting.status == 403
    assert (await _report(cabinet, owner))["total"] == 0


async def test_a_member_never_revokes_a_key_even_their_own_and_an_owner_or_admin_does(
    cabinet: Cabinet,
) -> None:
    # The service description limits revoke to owners and admins (its endpoint and authentication tables).
    owner = await cabinet.register()
    admin, member = await cabinet.add_member(owner, "admin"), await cabinet.add_member(owner)
    await cabinet.call("PATCH", "/organization/settings", token=owner.token, json={"membersCreateKeys": True})
    first, second = (await cabinet.create_key(member)).body, (await cabinet.create_key(member)).body

    own = await cabinet.revoke_key(member, first["id"])
    by_admin = await cabinet.revoke_key(admin, first["id"])
    by_owner = await cabinet.revoke_key(owner, second["id"])

    assert (own.status, own.body) == (403, {"error": "this action requires the owner or admin role"})
    assert (by_admin.status, by_admin.body["status"]) == (200, "revoked")
    assert (by_owner.status, by_owner.body["status"]) == (200, "revoked")
    revoked = [e for e in await cabinet.audit_events(owner) if e["event"] == "api_key.revoked"]
    assert sorted(e["targetId"] for e in revoked) == sorted([first["id"], second["id"]])


async def test_the_setting_refuses_what_it_does_not_know(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    for body, message in (
        ({"membersCreateKeys": "yes"}, "membersCreateKeys must be true or false"),
        ({"membersCanCreateKeys": True}, "unknown field: membersCanCreateKeys"),
        ({}, "give at least one of: membersCreateKeys"),
    ):
        reply = await cabinet.call("PATCH", "/organization/settings", token=owner.token, json=body)
        assert (reply.status, reply.body) == (400, {"error": message})


# -- the key report --------------------------------------------------------------------------------------


async def test_the_key_report_pages_and_sorts_in_the_server(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    aliases = [f"svc-{n:02d}" for n in range(7)]
    for alias in reversed(aliases):
        assert (await cabinet.create_key(owner, alias)).status == 201

    first = await _report(cabinet, owner, "?sort=alias&limit=3")
    third = await _report(cabinet, owner, "?sort=alias&limit=3&offset=6")
    backwards = await _report(cabinet, owner, "?sort=-alias&limit=2")
    filtered = await _report(cabinet, owner, "?q=SVC-0_&sort=alias")

    assert (first["total"], [key["alias"] for key in first["keys"]]) == (7, aliases[:3])
    assert [key["alias"] for key in third["keys"]] == aliases[6:]
    assert [key["alias"] for key in backwards["keys"]] == ["svc-06", "svc-05"]
    assert filtered["total"] == 0  # `_` is a character to find, not a wildcard


async def test_the_key_report_shows_created_last_use_and_spend_from_the_ledger(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    used = (await cabinet.create_key(owner, "used")).body
    idle = (await cabinet.create_key(owner, "idle")).body
    now = time.time()
    day_start = now - now % 86400
    today = time.gmtime(now)
    month_start = calendar.timegm((today.tm_year, today.tm_mon, 1, 0, 0, 0))
    earlier_this_month = month_start + 1 if month_start + 1 < day_start else None
    await _ledger_row(cabinet, org_id, used["id"], 1, now - 5, 300)
    await _ledger_row(cabinet, org_id, used["id"], 2, day_start - 86400 * 40, 7000)  # another month
    if earlier_this_month is not None:
        await _ledger_row(cabinet, org_id, used["id"], 3, earlier_this_month, 20)

    report = await _report(cabinet, owner, "?sort=-lastUsed")

    first, second = report["keys"]
    assert (first["id"], second["id"]) == (used["id"], idle["id"])
    assert first["lastUsedAt"] is not None and second["lastUsedAt"] is None
    assert first["spendTodayMicros"] == 300
    assert first["spendMonthMicros"] == 300 + (20 if earlier_this_month is not None else 0)
    assert (second["spendTodayMicros"], second["spendMonthMicros"]) == (0, 0)
    assert first["createdAt"].endswith("Z")


async def test_the_key_report_shows_the_rules_that_apply_to_each_key(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner, "crm")).body
    in_system = (await cabinet.create_key(owner, "in-system", systemId=system["id"])).body
    alone = (await cabinet.create_key(owner, "alone", budget={"amountMicros": 9, "period": "month"})).body
    org_rule = (await _rule(cabinet, owner, models=["mock-*"], tpm=100)).body
    system_rule = (await _rule(cabinet, owner, subjectType="system", subjectId=system["id"], rpm=3)).body

    keys = {key["id"]: key for key in (await _report(cabinet, owner))["keys"]}

    assert {rule["id"] for rule in keys[in_system["id"]]["rules"]} == {org_rule["id"], system_rule["id"]}
    alone_rules = {rule["subjectType"]: rule for rule in keys[alone["id"]]["rules"]}
    assert set(alone_rules) == {"organization", "key"}
    assert alone_rules["key"]["budget"] == {"amountMicros": 9, "period": "month", "spentMicros": 0}


async def test_the_key_report_holds_only_the_callers_organization(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    other = await cabinet.register()
    await cabinet.create_key(other, "theirs")

    report = await _report(cabinet, owner, "?q=theirs")

    assert (report["total"], report["keys"]) == (0, [])


async def test_the_key_report_refuses_bad_paging_and_sorting(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    for query, message in (
        ("?limit=0", "limit must be an integer from 1 to 200"),
        ("?limit=201", "limit must be an integer from 1 to 200"),
        ("?offset=-1", "offset must be an integer from 0 to 1000000000"),
        (
            "?sort=secret",
            "sort must be one of: alias, created, lastUsed, spendToday, spendMonth, status, owner",
        ),
    ):
        reply = await cabinet.call("GET", f"/key-report{query}", token=owner.token)
        assert reply.status == 400, query
        assert reply.body["error"].startswith(message), reply.body
