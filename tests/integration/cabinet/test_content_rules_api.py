"""Content rules in the Policy Rules API: a block, redact or flag rule with the content it looks for; created,
read, changed and deleted like any rule, every term checked, stored across a restart and a migration."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from modelgate.cabinet import policy_rules as policy_rule_handlers
from modelgate.cabinet.app import build_cabinet_app
from modelgate.cabinet.services import CabinetServices
from modelgate.config import load_config
from modelgate.domain.audit_log import newest_entries
from modelgate.domain.policy_rules import ContentSpec, policy_rules_of
from modelgate.storage import MIGRATIONS, IntegrityViolation, apply_migrations, open_database
from tests.integration.cabinet.cabinet_client import Account, Cabinet, RecordingSink, Reply

CONTENT = {
    "where": "both",
    "phrases": ["project nightingale"],
    "patterns": ["ACME-[0-9]{6}"],
    "detectors": ["email", "iban"],
}


ACCESS_RULE = {"subjectType": "organization", "effect": "allow", "models": ["*"]}


def _rule(**fields: Any) -> dict[str, Any]:
    """A body for an organization block rule with CONTENT, changed by `fields`."""
    return {"subjectType": "organization", "effect": "block", "content": CONTENT, **fields}


async def _post(cabinet: Cabinet, account: Account, body: dict[str, Any]) -> Reply:
    return await cabinet.call("POST", "/policy-rules", token=account.token, json=body)


async def _create(cabinet: Cabinet, account: Account, **fields: Any) -> dict[str, Any]:
    reply = await _post(cabinet, account, _rule(**fields))
    assert reply.status == 201, reply.body
    return reply.body


async def _patch(cabinet: Cabinet, account: Account, rule_id: str, **fields: Any) -> Reply:
    return await cabinet.call("PATCH", f"/policy-rules/{rule_id}", token=account.token, json=fields)


async def _refusal(cabinet: Cabinet, account: Account, body: dict[str, Any]) -> tuple[int, str]:
    reply = await _post(cabinet, account, body)
    return reply.status, reply.body["error"]


# -- create, read, list, delete ------------------------------------------------------------------------


async def test_a_content_rule_is_created_read_listed_and_deleted(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    created = await _create(cabinet, owner, description="no code names")
    path = f"/policy-rules/{created['id']}"
    fetched = await cabinet.call("GET", path, token=owner.token)
    listed = await cabinet.call("GET", "/policy-rules", token=owner.token)
    deleted = await cabinet.call("DELETE", path, token=owner.token)
    gone = await cabinet.call("GET", path, token=owner.token)

    assert {k: v for k, v in created.items() if k not in ("id", "createdAt", "updatedAt")} == {
        "organizationId": org_id,
        "subjectType": "organization",
        "subjectId": org_id,
        "effect": "block",
        "models": ["*"],
        "budget": None,
        "rpm": None,
        "tpm": None,
        "description": "no code names",
        "content": CONTENT,
    }
    assert fetched.body == created
    assert listed.body["policyRules"] == [created]
    assert (deleted.status, deleted.body["deleted"]) == (200, True)
    assert gone.status == 404


async def test_a_content_rule_may_name_its_models_and_a_key_subject(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    key = (await cabinet.create_key(owner)).body

    rule = await _create(cabinet, owner, subjectType="key", subjectId=key["id"], models=["mock-*"])

    assert (rule["subjectType"], rule["subjectId"], rule["models"]) == ("key", key["id"], ["mock-*"])


@pytest.mark.parametrize("effect", ["block", "redact", "flag"])
async def test_every_content_effect_is_accepted(cabinet: Cabinet, effect: str) -> None:
    owner = await cabinet.register()

    assert (await _create(cabinet, owner, effect=effect))["effect"] == effect


async def test_the_term_lists_are_optional_and_deduplicated_in_order(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    rule = await _create(
        cabinet,
        owner,
        content={"where": "prompt", "phrases": ["b", "a", "b"], "detectors": ["phone", "phone"]},
    )

    assert rule["content"] == {
        "where": "prompt",
        "phrases": ["b", "a"],
        "patterns": [],
        "detectors": ["phone"],
    }


async def test_an_access_rule_has_content_null(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await _post(cabinet, owner, {**ACCESS_RULE, "effect": "deny", "models": ["mock-*"]})

    assert (reply.status, reply.body["content"]) == (201, None)


# -- validation ----------------------------------------------------------------------------------------

REFUSALS: list[tuple[dict[str, Any], str]] = [
    (_rule(content=None), "a block rule needs content (where, and phrases, patterns or detectors)"),
    ({"subjectType": "organization", "effect": "flag"}, "a flag rule needs content"),
    (_rule(content="email"), "content must be an object with where and phrases, patterns or detectors"),
    (_rule(content={"phrases": ["x"]}), "content.where is required"),
    (_rule(content={"where": "both"}), "content must have at least one phrase, pattern or detector"),
    (
        _rule(content={"where": "both", "phrases": [], "patterns": [], "detectors": []}),
        "content must have at least one phrase, pattern or detector",
    ),
    (
        _rule(content={"where": "everywhere", "phrases": ["x"]}),
        "content.where must be one of: prompt, answer",
    ),
    (_rule(content={"where": "both", "phrases": ["x"], "regex": ["y"]}), "unknown field: content.regex"),
    (_rule(content={"where": "both", "phrases": "x"}), "content.phrases must be an array of strings"),
    (
        _rule(content={"where": "both", "phrases": ["x", 5]}),
        "content.phrases[1] must be a string of at most 500",
    ),
    (
        _rule(content={"where": "both", "phrases": ["x" * 501]}),
        "content.phrases[0] must be a string of at most",
    ),
    (_rule(content={"where": "both", "phrases": ["ok", " "]}), "content.phrases[1]: the phrase is empty"),
    (
        _rule(content={"where": "both", "phrases": ["p"] * 1001}),
        "content.phrases must have at most 1000 items",
    ),
    (
        _rule(content={"where": "both", "patterns": ["x" * 1001]}),
        "content.patterns[0] must be a string of at most 1000",
    ),
    (_rule(content={"where": "both", "patterns": ["p"] * 51}), "content.patterns must have at most 50 items"),
    (
        _rule(content={"where": "both", "patterns": ["ok", "fine", "(a)\\1"]}),
        "content.patterns[2]: the pattern cannot run in linear time",
    ),
    (
        _rule(content={"where": "both", "patterns": ["(?=secret)s"]}),
        "content.patterns[0]: the pattern cannot run in linear time",
    ),
    (
        _rule(content={"where": "both", "patterns": ["a*"]}),
        "content.patterns[0]: the pattern matches the empty",
    ),
    (
        _rule(content={"where": "both", "detectors": ["email", "ssn"]}),
        "content.detectors[1]: unknown detector",
    ),
    (_rule(budget={"amountMicros": 5, "period": "day"}), "a block rule cannot have a budget, rpm or tpm"),
    (_rule(effect="redact", rpm=10), "a redact rule cannot have a budget, rpm or tpm"),
    (_rule(effect="flag", tpm=0), "a flag rule cannot have a budget, rpm or tpm"),
    (_rule(effect="allow", models=["*"]), "an allow or deny rule cannot have content"),
    (_rule(effect="deny", models=["*"]), "an allow or deny rule cannot have content"),
    ({"subjectType": "organization", "effect": "allow"}, "models is required"),
]


async def test_every_invalid_content_rule_is_400_with_its_reason_and_stores_nothing(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    for body, message in REFUSALS:
        status, error = await _refusal(cabinet, owner, body)

        assert status == 400, (body, error)
        assert error.startswith(message), (body, error)
    assert await cabinet.db.fetchval("SELECT COUNT(*) FROM policy_rules") == 0


async def test_a_pattern_refusal_says_what_keeps_it_from_linear_time(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    status, error = await _refusal(cabinet, owner, _rule(content={"where": "answer", "patterns": ["(a)\\1"]}))

    assert status == 400
    assert "backreference" in error


async def test_a_content_rule_counts_towards_the_rule_limit(
    cabinet: Cabinet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(policy_rule_handlers, "MAX_RULES_PER_ORGANIZATION", 2)
    owner = await cabinet.register()
    await _create(cabinet, owner)
    await _post(cabinet, owner, ACCESS_RULE)

    reply = await _post(cabinet, owner, _rule(effect="flag"))

    assert (reply.status, reply.body) == (409, {"error": "an organization may have at most 2 rules"})


# -- changes -------------------------------------------------------------------------------------------


async def test_patch_changes_the_effect_between_content_effects_and_keeps_the_content(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner)

    reply = await _patch(cabinet, owner, rule["id"], effect="redact", description="redact them")

    assert reply.status == 200, reply.body
    assert (reply.body["effect"], reply.body["content"], reply.body["description"]) == (
        "redact",
        CONTENT,
        "redact them",
    )


async def test_patch_replaces_the_content_whole(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner)

    reply = await _patch(
        cabinet, owner, rule["id"], content={"where": "answer", "detectors": ["credentials"]}
    )
    stored = await cabinet.call("GET", f"/policy-rules/{rule['id']}", token=owner.token)

    expected = {"where": "answer", "phrases": [], "patterns": [], "detectors": ["credentials"]}
    assert (reply.status, reply.body["content"]) == (200, expected)
    assert stored.body["content"] == expected


async def test_patch_refuses_invalid_content_and_keeps_the_rule(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner)

    reply = await _patch(cabinet, owner, rule["id"], content={"where": "both", "patterns": ["ok", "(?<=x)y"]})
    stored = await cabinet.call("GET", f"/policy-rules/{rule['id']}", token=owner.token)

    assert reply.status == 400
    assert reply.body["error"].startswith("content.patterns[1]: the pattern cannot run in linear time")
    assert stored.body == rule


async def test_a_content_rule_becomes_an_access_rule_only_when_its_content_is_cleared(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner)

    kept = await _patch(cabinet, owner, rule["id"], effect="deny")
    cleared = await _patch(cabinet, owner, rule["id"], effect="deny", content=None)

    assert kept.status == 400
    assert kept.body["error"] == (
        "an allow or deny rule cannot have content (content rules have effect block, redact or flag;"
        " send content: null to make a content rule an access rule)"
    )
    assert (cleared.status, cleared.body["effect"], cleared.body["content"]) == (200, "deny", None)


async def test_an_access_rule_becomes_a_content_rule_only_with_content_and_without_limits(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    created = await _post(cabinet, owner, {**ACCESS_RULE, "rpm": 5})
    rule_id = created.body["id"]

    bare = await _patch(cabinet, owner, rule_id, effect="flag")
    limited = await _patch(cabinet, owner, rule_id, effect="flag", content=CONTENT)
    switched = await _patch(cabinet, owner, rule_id, effect="flag", content=CONTENT, rpm=None)

    assert (bare.status, bare.body["error"]) == (
        400,
        "a flag rule needs content (where, and phrases, patterns or detectors)",
    )
    assert (limited.status, limited.body["error"]) == (400, "a flag rule cannot have a budget, rpm or tpm")
    assert switched.status == 200, switched.body
    assert (switched.body["effect"], switched.body["content"], switched.body["rpm"]) == (
        "flag",
        CONTENT,
        None,
    )


async def test_content_on_an_access_rule_is_refused_on_patch(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    created = await _post(cabinet, owner, ACCESS_RULE)

    reply = await _patch(cabinet, owner, created.body["id"], content=CONTENT)

    assert reply.status == 400
    assert reply.body["error"].startswith("an allow or deny rule cannot have content")


# -- audit, roles, isolation ---------------------------------------------------------------------------


async def test_rule_changes_are_audited_with_the_effect_and_term_counts_not_the_terms(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner, content={**CONTENT, "phrases": ["alpha", "beta"]})
    await _patch(cabinet, owner, rule["id"], effect="flag")

    updated, created = (await cabinet.audit_events(owner))[:2]

    assert (created["event"], created["targetId"]) == ("policy_rule.created", rule["id"])
    assert created["details"]["effect"] == "block"
    assert created["details"]["content"] == {
        "where": "both",
        "phrases": 2,
        "patterns": 1,
        "detectors": ["email", "iban"],
    }
    assert updated["event"] == "policy_rule.updated"
    assert updated["details"] == {"changes": {"effect": {"before": "block", "after": "flag"}}}
    assert "alpha" not in str(created) and "ACME" not in str(created)


async def test_a_member_cannot_create_change_or_delete_a_content_rule(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    rule = await _create(cabinet, owner)

    created = await _post(cabinet, member, _rule())
    patched = await _patch(cabinet, member, rule["id"], effect="flag")
    deleted = await cabinet.call("DELETE", f"/policy-rules/{rule['id']}", token=member.token)
    listed = await cabinet.call("GET", "/policy-rules", token=member.token)

    assert (created.status, patched.status, deleted.status) == (403, 403, 403)
    assert listed.body["policyRules"] == [rule]


async def test_another_organizations_content_rules_are_never_visible(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    stranger = await cabinet.register()
    rule = await _create(cabinet, owner)
    path = f"/policy-rules/{rule['id']}"

    listed = await cabinet.call("GET", "/policy-rules", token=stranger.token)
    fetched = await cabinet.call("GET", path, token=stranger.token)
    patched = await _patch(cabinet, stranger, rule["id"], content={"where": "prompt", "phrases": ["x"]})
    deleted = await cabinet.call("DELETE", path, token=stranger.token)
    still = await cabinet.call("GET", path, token=owner.token)

    assert listed.body["policyRules"] == []
    assert (fetched.status, patched.status, deleted.status) == (404, 404, 404)
    assert still.body == rule


# -- storage -------------------------------------------------------------------------------------------


async def test_a_content_rule_is_read_back_after_a_restart(
    cabinet: Cabinet, storage_url: str, aiohttp_client
) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner, effect="redact", models=["mock-*", "mock-e*"])

    reopened = await open_database(storage_url)
    try:
        root = web.Application()
        root.add_subapp(
            "/api", build_cabinet_app(CabinetServices(load_config(None), reopened, RecordingSink()))
        )
        restarted = Cabinet(await aiohttp_client(root), reopened, RecordingSink())
        fetched = await restarted.call("GET", f"/policy-rules/{rule['id']}", token=owner.token)
    finally:
        await reopened.close()

    assert (fetched.status, fetched.body) == (200, rule)


async def test_migration_9_keeps_the_access_rules_of_a_version_8_database(storage_url: str) -> None:
    db = await open_database(storage_url)
    try:
        await apply_migrations(db, tuple(m for m in MIGRATIONS if m.version <= 8))
        await db.execute(
            "INSERT INTO organizations (id, legal_name, plan_code, created_at) VALUES ($1, 'Acme', 'pro', 1)",
            "org_1",
        )
        async with db.transaction() as tx:
            await tx.executemany(
                "INSERT INTO policy_rules (id, organization_id, subject_type, subject_id, effect, models,"
                " budget_micros, budget_period, rpm, tpm, description, created_at, updated_at)"
                " VALUES ($1, 'org_1', $2, $3, $4, $5, $6, $7, $8, NULL, $9, $10, $11)",
                [
                    ("pol_a", "organization", "org_1", "allow", '["mock-*"]', 500, "day", 10, "a", 1.0, 2.0),
                    ("pol_d", "key", "key_1", "deny", '["*"]', None, None, None, "", 3.0, 4.0),
                ],
            )

        assert await apply_migrations(db) == [m.version for m in MIGRATIONS if m.version > 8]
        rules = await policy_rules_of(db, "org_1")
    finally:
        await db.close()

    assert [
        (r.id, r.effect, r.models, r.budget_micros, r.budget_period, r.rpm, r.content) for r in rules
    ] == [
        ("pol_a", "allow", ("mock-*",), 500, "day", 10, None),
        ("pol_d", "deny", ("*",), None, None, None, None),
    ]
    assert [(r.subject_type, r.subject_id, r.description, r.created_at, r.updated_at) for r in rules] == [
        ("organization", "org_1", "a", 1.0, 2.0),
        ("key", "key_1", "", 3.0, 4.0),
    ]


async def test_migration_9_keeps_audit_entries_and_ledger_rows_of_a_version_8_database(
    storage_url: str,
) -> None:
    db = await open_database(storage_url)
    try:
        await apply_migrations(db, tuple(m for m in MIGRATIONS if m.version <= 8))
        await db.execute(
            "INSERT INTO audit_log (id, organization_id, event, actor_type, actor_id, target_id, created_at)"
            " VALUES ('aud_1', 'org_1', 'policy_rule.created', 'user', 'usr_1', 'pol_a', 5)"
        )
        await db.execute(
            "INSERT INTO usage_ledger (id, organization_id, model, request_id, status, created_at)"
            " VALUES ('use_1', 'org_1', 'gpt-4o', 'req_1', 200, 6)"
        )

        await apply_migrations(db)
        [entry] = await newest_entries(db, "org_1", 10, None)
        ledger = await db.fetchrow("SELECT outcome, content_action FROM usage_ledger WHERE id = 'use_1'")
    finally:
        await db.close()

    assert (entry.id, entry.event, entry.target_id, entry.created_at) == (
        "aud_1",
        "policy_rule.created",
        "pol_a",
        5.0,
    )
    assert (entry.key_id, entry.system_id, entry.route) == (None, None, None)
    assert ledger == {"outcome": "completed", "content_action": ""}


async def test_the_schema_refuses_a_content_effect_without_content(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    with pytest.raises(IntegrityViolation):
        await cabinet.db.execute(
            "INSERT INTO policy_rules (id, organization_id, subject_type, subject_id, effect, models,"
            " description, created_at, updated_at)"
            " VALUES ('pol_x', $1, 'organization', $1, 'block', '[\"*\"]', '', 1, 1)",
            org_id,
        )


async def test_the_stored_content_is_the_records_content_spec(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner)

    [stored] = await policy_rules_of(cabinet.db, await cabinet.organization_id(owner))

    assert stored.id == rule["id"]
    assert stored.content == ContentSpec(
        "both", ("project nightingale",), ("ACME-[0-9]{6}",), ("email", "iban")
    )


async def test_a_change_of_terms_is_audited_as_counts_before_and_after_never_the_terms(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner, content={**CONTENT, "phrases": ["alpha", "beta"]})
    await _patch(cabinet, owner, rule["id"], content={**CONTENT, "phrases": ["gamma"]})

    [updated] = [e for e in await cabinet.audit_events(owner) if e["event"] == "policy_rule.updated"]

    before = {"where": "both", "phrases": 2, "patterns": 1, "detectors": ["email", "iban"]}
    assert updated["details"] == {
        "changes": {"content": {"before": before, "after": {**before, "phrases": 1}}}
    }
    assert "gamma" not in str(updated) and "alpha" not in str(updated)


async def test_new_terms_of_the_same_counts_are_still_audited_as_a_change(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    rule = await _create(cabinet, owner, content={**CONTENT, "phrases": ["alpha"]})
    await _patch(cabinet, owner, rule["id"], content={**CONTENT, "phrases": ["delta"]})

    [updated] = [e for e in await cabinet.audit_events(owner) if e["event"] == "policy_rule.updated"]

    same = {"where": "both", "phrases": 1, "patterns": 1, "detectors": ["email", "iban"]}
    assert updated["details"] == {
        "changes": {"content": {"before": same, "after": same, "termsChanged": True}}
    }
    assert "delta" not in str(updated)
