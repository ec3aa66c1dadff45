"""Policy Rules: which models an organization, a system or a key may use, with budgets and rate limits.

A rule has a subject (`organization`, `system` or `key` of the organization), an effect (`allow` or
`deny`), model name globs (`fnmatch` case-sensitive: `*` any run, `?` one character, `[seq]`), and on an
allow rule optionally a budget (micro-units per UTC `day` or `month`) and `rpm`/`tpm` overrides of the
plan's per-key limits (0: no per-key limit; the plan's organization-wide limits still apply).

How the model API evaluates them for a request by key K (linked to system S) of organization O on model M:

1. The rules of O, of S and of K apply; a rule matches when one of its globs matches M.
2. A matching `deny` rule wins: 403 (policy block).
3. If any `allow` rule applies (to O, S or K), a model matched by none of them is not enabled for the
   key: 404 `model_not_found`. With no allow rule at all, every model is enabled.
4. Every matching rule with a budget must have room for the request's cost in the current period
   (spend is kept per rule and period in `policy_budget_spend`): else 402 `insufficient_balance`.
   Editing a rule starts its budget counter afresh from the stored spend of the period.
5. rpm/tpm: among the matching rules, the most specific subject with a value (key, then system, then
   organization) overrides the plan's per-key limit; without one the plan's limits apply.

A content rule (effect `block`, `redact` or `flag`) has a `content` object instead of limits: where to look
(`prompt`, `answer` or `both`) and what for (literal `phrases`, RE2 `patterns`, built-in `detectors`); its
models default to every model. It takes no part in the access decisions above.

Every change is audited (`policy_rule.created/updated/deleted`) and, after commit, announced through the
billing sink (`policy_changed`) so gateways drop their compiled policy at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.model_catalogue import check_patterns_match
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.policy_rule_input import (
    DEFAULT_CONTENT_MODELS,
    FIELDS,
    REQUIRED_FIELDS,
    check_consistent,
    parse_rule_fields,
)
from modelgate.cabinet.requests import CabinetError, bad_request, json_response, path_id, read_json_object
from modelgate.cabinet.services import CabinetServices, services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.audit_log import changed_fields, record
from modelgate.domain.policy_rules import (
    CONTENT_EFFECTS,
    ContentSpec,
    PolicyRule,
    content_size_of,
    count_rules,
    delete_rule,
    insert_rule,
    lock_rule,
    policy_rules_of,
    rule_in_organization,
    subject_in_organization,
    update_rule,
)
from modelgate.domain.policy_rules import rules_for_key as rules_for_key  # re-exported: the rules of a key
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor

log = logging.getLogger("modelgate.cabinet.policy_rules")

MAX_RULES_PER_ORGANIZATION = 1000
# A content rule may carry 1,000 phrases of 500 characters and 50 patterns of 1,000 (UTF-8, JSON-escaped).
MAX_RULE_BODY_BYTES = 4 * 1024 * 1024
# The characters of phrases, patterns and detectors of all an organization's content rules together. The
# gateway compiles them off the event loop, but compiling still costs CPU time (19 s for 2,000 patterns
# of 950 characters on one core): the bound keeps one tenant's rules from taking the worker for long.
MAX_CONTENT_CHARS_PER_ORGANIZATION = 2_000_000


def _check_content_size(organization_size: int, content: ContentSpec | None) -> None:
    if content is None:
        return
    total = organization_size + content.size
    if total > MAX_CONTENT_CHARS_PER_ORGANIZATION:
        raise bad_request(
            f"the content rules of an organization may hold at most {MAX_CONTENT_CHARS_PER_ORGANIZATION:,}"
            f" characters of phrases, patterns and detectors; with this rule they would hold {total:,}"
        )


async def _rule_fields(request: web.Request) -> dict[str, Any]:
    """The body's fields, checked in a worker thread: checking a content rule's patterns runs Python's regex
    parser on each, which for 50 long patterns takes long enough to hold up every other request."""
    return await asyncio.to_thread(parse_rule_fields, await read_json_object(request, MAX_RULE_BODY_BYTES))


def content_json(content: ContentSpec | None) -> dict[str, Any] | None:
    """The content object of the API: null for an access rule."""
    if content is None:
        return None
    return {
        "where": content.where,
        "phrases": list(content.phrases),
        "patterns": list(content.patterns),
        "detectors": list(content.detectors),
    }


def rule_json(rule: PolicyRule) -> dict[str, Any]:
    """The policy rule object of the API."""
    budget = None
    if rule.budget_micros is not None:
        budget = {"amountMicros": rule.budget_micros, "period": rule.budget_period}
    return {
        "id": rule.id,
        "organizationId": rule.organization_id,
        "subjectType": rule.subject_type,
        "subjectId": rule.subject_id,
        "effect": rule.effect,
        "models": list(rule.models),
        "budget": budget,
        "rpm": rule.rpm,
        "tpm": rule.tpm,
        "description": rule.description,
        "content": content_json(rule.content),
        "createdAt": isoformat(rule.created_at),
        "updatedAt": isoformat(rule.updated_at),
    }


async def _resolve_subject(
    tx: Executor, principal: Principal, subject_type: str, subject_id: str | None
) -> str:
    """The subject id, checked to name something of the caller's organization (another's reads as unknown)."""
    org_id = principal.organization_id
    if subject_type == "organization":
        if subject_id is not None and subject_id != org_id:
            raise bad_request("subjectId: organization not found")
        return org_id
    if subject_id is None:
        raise bad_request("subjectId is required for a key or system rule")
    if not await subject_in_organization(tx, org_id, subject_type, subject_id):
        what = "api key" if subject_type == "key" else "system"
        raise bad_request(f"subjectId: {what} not found")
    return subject_id


# -- handlers ------------------------------------------------------------------------------------------


def _not_found() -> CabinetError:
    return CabinetError(404, "policy rule not found")


async def announce_policy_change(services: CabinetServices, organization_id: str) -> None:
    """Tell the model API, after commit; the change is committed either way, so a failure is only logged."""
    try:
        await services.billing_sink.policy_changed(organization_id)
    except Exception:
        log.exception("billing sink failed on policy_changed for %s", organization_id)


async def create_policy_rule(request: web.Request) -> web.Response:
    """POST /policy-rules {subjectType, subjectId?, effect, models, budget?, rpm?, tpm?, description?} or,
    for a content rule, {subjectType, subjectId?, effect, models?, content, description?}."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    fields = await _rule_fields(request)
    async with services.db.transaction() as tx:
        rule = await insert_checked_rule(tx, services, principal, fields)
    await announce_policy_change(services, principal.organization_id)
    return json_response(rule_json(rule), status=201)


async def insert_checked_rule(
    tx: Executor, services: CabinetServices, principal: Principal, fields: dict[str, Any]
) -> PolicyRule:
    """Check parsed create fields against each other, the catalogue and the organization, then store and audit
    the rule in `tx` (the caller announces the change after commit). Keys created with limits use it too."""
    for required in REQUIRED_FIELDS:
        if required not in fields:
            raise bad_request(f"{required} is required")
    subject_type, effect = fields["subjectType"], fields["effect"]
    if "models" in fields:
        models = fields["models"]
        check_patterns_match(services.config, models)
    elif effect in CONTENT_EFFECTS:
        models = DEFAULT_CONTENT_MODELS
    else:
        raise bad_request("models is required")
    budget, rpm, tpm = fields.get("budget"), fields.get("rpm"), fields.get("tpm")
    content = fields.get("content")
    check_consistent(effect, budget, rpm, tpm, content)
    at = now()
    org_id = principal.organization_id
    # Locking the organization serialises the count check against concurrent creates.
    await require_organization(tx, org_id, lock=True)
    if await count_rules(tx, org_id) >= MAX_RULES_PER_ORGANIZATION:
        raise CabinetError(409, f"an organization may have at most {MAX_RULES_PER_ORGANIZATION} rules")
    if content is not None:
        _check_content_size(await content_size_of(tx, org_id), content)
    subject_id = await _resolve_subject(tx, principal, subject_type, fields.get("subjectId"))
    rule = PolicyRule(
        id=new_id("pol"),
        organization_id=org_id,
        subject_type=subject_type,
        subject_id=subject_id,
        effect=effect,
        models=models,
        budget_micros=budget[0] if budget else None,
        budget_period=budget[1] if budget else None,
        rpm=rpm,
        tpm=tpm,
        description=fields.get("description", ""),
        created_at=at,
        updated_at=at,
        content=content,
    )
    await insert_rule(tx, rule)
    await record(
        tx,
        org_id,
        "policy_rule.created",
        actor_of(principal),
        at,
        target_id=rule.id,
        details=_summary(rule),
    )
    return rule


def _summary(rule: PolicyRule) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "subjectType": rule.subject_type,
        "subjectId": rule.subject_id,
        "effect": rule.effect,
        "models": list(rule.models),
    }
    if rule.content is not None:
        # Counts, not the terms: a rule may hold a thousand phrases, and the rule itself keeps them.
        summary["content"] = {
            "where": rule.content.where,
            "phrases": len(rule.content.phrases),
            "patterns": len(rule.content.patterns),
            "detectors": list(rule.content.detectors),
        }
    return summary


def _audited(rule: PolicyRule) -> dict[str, Any]:
    """What an update's entry compares: the summary, the limits and the description."""
    budget = None
    if rule.budget_micros is not None:
        budget = {"amountMicros": rule.budget_micros, "period": rule.budget_period}
    return {
        **_summary(rule),
        "budget": budget,
        "rpm": rule.rpm,
        "tpm": rule.tpm,
        "description": rule.description,
    }


def _changes(before: PolicyRule, after: PolicyRule) -> dict[str, Any]:
    """The fields an update changed. Terms are audited as counts: new terms of the same counts are still a
    change of `content` (the counts before and after, and `termsChanged`)."""
    changes = changed_fields(_audited(before), _audited(after))
    if before.content != after.content and "content" not in changes:
        summary = _audited(after)["content"]
        changes["content"] = {"before": summary, "after": summary, "termsChanged": True}
    return changes


async def list_policy_rules(request: web.Request) -> web.Response:
    """GET /policy-rules → the organization's rules, oldest first (any role)."""
    principal = await authenticate(request)
    rules = await policy_rules_of(services_of(request).db, principal.organization_id)
    return json_response({"policyRules": [rule_json(r) for r in rules]})


async def get_policy_rule(request: web.Request) -> web.Response:
    """GET /policy-rules/{id} → one rule of the organization (any role)."""
    principal = await authenticate(request)
    rule_id = path_id(request, "id", unknown=_not_found())
    rule = await rule_in_organization(services_of(request).db, principal.organization_id, rule_id)
    if rule is None:
        raise _not_found()
    return json_response(rule_json(rule))


async def update_policy_rule(request: web.Request) -> web.Response:
    """PATCH /policy-rules/{id} with any of the create fields (owner/admin) → the updated rule."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    rule_id = path_id(request, "id", unknown=_not_found())
    fields = await _rule_fields(request)
    if not fields:
        raise bad_request(f"give at least one of: {', '.join(sorted(FIELDS))}")
    if "models" in fields:
        check_patterns_match(services.config, fields["models"])
    at = now()
    org_id = principal.organization_id
    async with services.db.transaction() as tx:
        if fields.get("content") is not None:  # serialised with creates, like they are with each other
            await require_organization(tx, org_id, lock=True)
        await lock_rule(tx, org_id, rule_id)
        rule = await rule_in_organization(tx, org_id, rule_id)
        if rule is None:
            raise _not_found()
        subject_type = fields.get("subjectType", rule.subject_type)
        subject_id = rule.subject_id
        if "subjectType" in fields or "subjectId" in fields:
            keeps_subject = subject_type == rule.subject_type and "subjectId" not in fields
            asked = rule.subject_id if keeps_subject else fields.get("subjectId")
            subject_id = await _resolve_subject(tx, principal, subject_type, asked)
        if "budget" in fields:
            budget = fields["budget"]
        elif rule.budget_micros is not None:
            budget = (rule.budget_micros, rule.budget_period or "month")
        else:
            budget = None
        updated = PolicyRule(
            id=rule.id,
            organization_id=org_id,
            subject_type=subject_type,
            subject_id=subject_id,
            effect=fields.get("effect", rule.effect),
            models=fields.get("models", rule.models),
            budget_micros=budget[0] if budget else None,
            budget_period=budget[1] if budget else None,
            rpm=fields.get("rpm", rule.rpm),
            tpm=fields.get("tpm", rule.tpm),
            description=fields.get("description", rule.description),
            created_at=rule.created_at,
            updated_at=max(at, rule.updated_at),
            content=fields["content"] if "content" in fields else rule.content,
        )
        check_consistent(updated.effect, budget, updated.rpm, updated.tpm, updated.content)
        if fields.get("content") is not None:
            _check_content_size(await content_size_of(tx, org_id, besides=rule.id), updated.content)
        await update_rule(tx, updated)
        await record(
            tx,
            org_id,
            "policy_rule.updated",
            actor_of(principal),
            at,
            target_id=rule.id,
            details={"changes": _changes(rule, updated)},
        )
    await announce_policy_change(services, org_id)
    return json_response(rule_json(updated))


async def delete_policy_rule(request: web.Request) -> web.Response:
    """DELETE /policy-rules/{id} (owner/admin) → the deleted rule with `deleted: true`."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    rule_id = path_id(request, "id", unknown=_not_found())
    org_id = principal.organization_id
    async with services.db.transaction() as tx:
        rule = await rule_in_organization(tx, org_id, rule_id)
        if rule is None:
            raise _not_found()
        await delete_rule(tx, rule.id)
        await record(
            tx,
            org_id,
            "policy_rule.deleted",
            actor_of(principal),
            now(),
            target_id=rule.id,
            details=_summary(rule),
        )
    await announce_policy_change(services, org_id)
    return json_response({**rule_json(rule), "deleted": True})
