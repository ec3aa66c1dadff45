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

Every change is audited (`policy_rule.created/updated/deleted`) and, after commit, announced through the
billing sink (`policy_changed`) so gateways drop their compiled policy at once.
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from modelgate.cabinet.audit import actor_of, record
from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.policy_rule_input import FIELDS, REQUIRED_FIELDS, check_consistent, parse_rule_fields
from modelgate.cabinet.requests import CabinetError, bad_request, json_response, path_id, read_json_object
from modelgate.cabinet.services import CabinetServices, services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor, Row

log = logging.getLogger("modelgate.cabinet.policy_rules")

MAX_RULES_PER_ORGANIZATION = 1000
_COLUMNS = (
    "id, organization_id, subject_type, subject_id, effect, models, budget_micros, budget_period, rpm, tpm,"
    " description, created_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One rule of an organization, as stored."""

    id: str
    organization_id: str
    subject_type: str
    subject_id: str
    effect: str
    models: tuple[str, ...]
    budget_micros: int | None
    budget_period: str | None
    rpm: int | None
    tpm: int | None
    description: str
    created_at: float
    updated_at: float

    def matches(self, model: str) -> bool:
        """Whether one of the rule's globs matches the model name (case-sensitive)."""
        return any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)

    def to_json(self) -> dict[str, Any]:
        """The policy rule object of the API."""
        budget = None
        if self.budget_micros is not None:
            budget = {"amountMicros": self.budget_micros, "period": self.budget_period}
        return {
            "id": self.id,
            "organizationId": self.organization_id,
            "subjectType": self.subject_type,
            "subjectId": self.subject_id,
            "effect": self.effect,
            "models": list(self.models),
            "budget": budget,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "description": self.description,
            "createdAt": isoformat(self.created_at),
            "updatedAt": isoformat(self.updated_at),
        }


def rule_from_row(row: Row) -> PolicyRule:
    """A stored `policy_rules` row as a record (`models` is a JSON array text)."""
    return PolicyRule(**{**row, "models": tuple(orjson.loads(row["models"]))})


async def policy_rules_of(ex: Executor, organization_id: str) -> list[PolicyRule]:
    """The organization's rules, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM policy_rules WHERE organization_id = $1 ORDER BY created_at, id",
        organization_id,
    )
    return [rule_from_row(r) for r in rows]


async def rules_for_key(
    ex: Executor, organization_id: str, key_id: str, system_id: str | None
) -> list[PolicyRule]:
    """The rules that apply to a key: those of its organization, of its system and of the key itself."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM policy_rules WHERE organization_id = $1"
        " AND ((subject_type = 'organization' AND subject_id = $1)"
        " OR (subject_type = 'key' AND subject_id = $2)"
        " OR (subject_type = 'system' AND subject_id = $3))"
        " ORDER BY created_at, id",
        organization_id,
        key_id,
        system_id or "",
    )
    return [rule_from_row(r) for r in rows]


async def rule_in_organization(ex: Executor, organization_id: str, rule_id: str) -> PolicyRule | None:
    """A rule of this organization; another organization's rule is None, exactly like an unknown id."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM policy_rules WHERE id = $1 AND organization_id = $2",
        rule_id,
        organization_id,
    )
    return rule_from_row(row) if row else None


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
    table, what = ("api_keys", "api key") if subject_type == "key" else ("systems", "system")
    found = await tx.fetchval(
        f"SELECT 1 FROM {table} WHERE id = $1 AND organization_id = $2", subject_id, org_id
    )
    if found is None:
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
    """POST /policy-rules {subjectType, subjectId?, effect, models, budget?, rpm?, tpm?, description?}."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    fields = parse_rule_fields(await read_json_object(request))
    for required in REQUIRED_FIELDS:
        if required not in fields:
            raise bad_request(f"{required} is required")
    subject_type, effect, models = fields["subjectType"], fields["effect"], fields["models"]
    budget, rpm, tpm = fields.get("budget"), fields.get("rpm"), fields.get("tpm")
    check_consistent(effect, budget, rpm, tpm)
    at = now()
    org_id = principal.organization_id
    async with services.db.transaction() as tx:
        # Locking the organization serialises the count check against concurrent creates.
        await require_organization(tx, org_id, lock=True)
        count = int(await tx.fetchval("SELECT COUNT(*) FROM policy_rules WHERE organization_id = $1", org_id))
        if count >= MAX_RULES_PER_ORGANIZATION:
            raise CabinetError(409, f"an organization may have at most {MAX_RULES_PER_ORGANIZATION} rules")
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
        )
        await tx.execute(
            f"INSERT INTO policy_rules ({_COLUMNS})"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            rule.id,
            rule.organization_id,
            rule.subject_type,
            rule.subject_id,
            rule.effect,
            orjson.dumps(list(rule.models)).decode(),
            rule.budget_micros,
            rule.budget_period,
            rule.rpm,
            rule.tpm,
            rule.description,
            rule.created_at,
            rule.updated_at,
        )
        await record(
            tx,
            org_id,
            "policy_rule.created",
            actor_of(principal),
            at,
            target_id=rule.id,
            details=_summary(rule),
        )
    await announce_policy_change(services, org_id)
    return json_response(rule.to_json(), status=201)


def _summary(rule: PolicyRule) -> dict[str, Any]:
    return {
        "subjectType": rule.subject_type,
        "subjectId": rule.subject_id,
        "effect": rule.effect,
        "models": list(rule.models),
    }


async def list_policy_rules(request: web.Request) -> web.Response:
    """GET /policy-rules → the organization's rules, oldest first (any role)."""
    principal = await authenticate(request)
    rules = await policy_rules_of(services_of(request).db, principal.organization_id)
    return json_response({"policyRules": [r.to_json() for r in rules]})


async def get_policy_rule(request: web.Request) -> web.Response:
    """GET /policy-rules/{id} → one rule of the organization (any role)."""
    principal = await authenticate(request)
    rule_id = path_id(request, "id", unknown=_not_found())
    rule = await rule_in_organization(services_of(request).db, principal.organization_id, rule_id)
    if rule is None:
        raise _not_found()
    return json_response(rule.to_json())


async def update_policy_rule(request: web.Request) -> web.Response:
    """PATCH /policy-rules/{id} with any of the create fields (owner/admin) → the updated rule."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    rule_id = path_id(request, "id", unknown=_not_found())
    fields = parse_rule_fields(await read_json_object(request))
    if not fields:
        raise bad_request(f"give at least one of: {', '.join(sorted(FIELDS))}")
    at = now()
    org_id = principal.organization_id
    async with services.db.transaction() as tx:
        # A no-op UPDATE write-locks the row on both backends, so concurrent edits apply one after another.
        await tx.execute(
            "UPDATE policy_rules SET updated_at = updated_at WHERE id = $1 AND organization_id = $2",
            rule_id,
            org_id,
        )
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
        )
        check_consistent(updated.effect, budget, updated.rpm, updated.tpm)
        await tx.execute(
            "UPDATE policy_rules SET subject_type = $2, subject_id = $3, effect = $4, models = $5,"
            " budget_micros = $6, budget_period = $7, rpm = $8, tpm = $9, description = $10, updated_at = $11"
            " WHERE id = $1",
            updated.id,
            updated.subject_type,
            updated.subject_id,
            updated.effect,
            orjson.dumps(list(updated.models)).decode(),
            updated.budget_micros,
            updated.budget_period,
            updated.rpm,
            updated.tpm,
            updated.description,
            updated.updated_at,
        )
        await record(
            tx,
            org_id,
            "policy_rule.updated",
            actor_of(principal),
            at,
            target_id=rule.id,
            details={**_summary(updated), "changed": sorted(fields)},
        )
    await announce_policy_change(services, org_id)
    return json_response(updated.to_json())


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
        await tx.execute("DELETE FROM policy_budget_spend WHERE rule_id = $1", rule.id)
        await tx.execute("DELETE FROM policy_rules WHERE id = $1", rule.id)
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
    return json_response({**rule.to_json(), "deleted": True})
