"""Policy rules as stored: the `PolicyRule` record and its repository.

The only SQL on `policy_rules`, and the reads of `policy_budget_spend` (the ledger writes the spend). The
cabinet's handlers (`modelgate/cabinet/policy_rules.py`) and the model API's `PolicyDirectory`
(`modelgate/domain/policy_decisions.py`) both read and write rules through these functions; each takes an
`Executor`, the database or an open transaction, so a handler decides what runs in one transaction.
A content rule's `ContentSpec` is stored as a JSON object in the `content` column (NULL for access rules).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import orjson

from modelgate.storage.database import Executor, Row

_COLUMNS = (
    "id, organization_id, subject_type, subject_id, effect, models, budget_micros, budget_period, rpm, tpm,"
    " description, content, created_at, updated_at"
)

ACCESS_EFFECTS = ("allow", "deny")
CONTENT_EFFECTS = ("block", "redact", "flag")
CONTENT_PLACES = ("prompt", "answer", "both")


@dataclass(frozen=True, slots=True)
class ContentSpec:
    """What a content rule looks for and where: its terms and whether prompts, answers or both are scanned."""

    where: str  # "prompt" | "answer" | "both"
    phrases: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    detectors: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        """The characters of its terms: what compiling them costs grows with it."""
        return sum(len(term) for terms in (self.phrases, self.patterns, self.detectors) for term in terms)


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One rule of an organization, as stored: an access rule (allow or deny, with optional budget and rate
    limits) or a content rule (block, redact or flag, with the `content` it looks for)."""

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
    content: ContentSpec | None = None

    def matches(self, model: str) -> bool:
        """Whether one of the rule's globs matches the model name (case-sensitive)."""
        return any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)


def _content_text(content: ContentSpec | None) -> str | None:
    """The stored form of a content spec: a JSON object, or NULL for an access rule."""
    if content is None:
        return None
    return orjson.dumps(
        {
            "where": content.where,
            "phrases": list(content.phrases),
            "patterns": list(content.patterns),
            "detectors": list(content.detectors),
        }
    ).decode()


def _content_spec(text: str | None) -> ContentSpec | None:
    if text is None:
        return None
    stored = orjson.loads(text)
    return ContentSpec(
        where=stored["where"],
        phrases=tuple(stored.get("phrases", ())),
        patterns=tuple(stored.get("patterns", ())),
        detectors=tuple(stored.get("detectors", ())),
    )


def _rule(row: Row) -> PolicyRule:
    """A stored `policy_rules` row as a record (`models` is a JSON array text, `content` a JSON object)."""
    return PolicyRule(
        **{**row, "models": tuple(orjson.loads(row["models"])), "content": _content_spec(row["content"])}
    )


def _editable(rule: PolicyRule) -> tuple[object, ...]:
    """The stored values of the fields an edit may change, in `_COLUMNS` order (subject_type..content)."""
    return (
        rule.subject_type,
        rule.subject_id,
        rule.effect,
        orjson.dumps(list(rule.models)).decode(),
        rule.budget_micros,
        rule.budget_period,
        rule.rpm,
        rule.tpm,
        rule.description,
        _content_text(rule.content),
    )


async def policy_rules_of(ex: Executor, organization_id: str) -> list[PolicyRule]:
    """The organization's rules, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM policy_rules WHERE organization_id = $1 ORDER BY created_at, id",
        organization_id,
    )
    return [_rule(r) for r in rows]


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
    return [_rule(r) for r in rows]


async def rule_in_organization(ex: Executor, organization_id: str, rule_id: str) -> PolicyRule | None:
    """A rule of this organization; another organization's rule is None, exactly like an unknown id."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM policy_rules WHERE id = $1 AND organization_id = $2",
        rule_id,
        organization_id,
    )
    return _rule(row) if row else None


async def content_size_of(ex: Executor, organization_id: str, *, besides: str | None = None) -> int:
    """The characters of the terms of the organization's content rules (but rule `besides`)."""
    rules = await policy_rules_of(ex, organization_id)
    return sum(rule.content.size for rule in rules if rule.content is not None and rule.id != besides)


async def count_rules(ex: Executor, organization_id: str) -> int:
    """How many rules the organization has."""
    return int(
        await ex.fetchval("SELECT COUNT(*) FROM policy_rules WHERE organization_id = $1", organization_id)
    )


async def count_rules_naming(ex: Executor, organization_id: str, subject_type: str, subject_id: str) -> int:
    """How many of the organization's rules name this subject (a system or key about to be deleted)."""
    count = await ex.fetchval(
        "SELECT COUNT(*) FROM policy_rules"
        " WHERE organization_id = $1 AND subject_type = $2 AND subject_id = $3",
        organization_id,
        subject_type,
        subject_id,
    )
    return int(count or 0)


async def subject_in_organization(
    ex: Executor, organization_id: str, subject_type: str, subject_id: str
) -> bool:
    """Whether a `key` or `system` subject id names one of the organization's API keys or systems."""
    table = "api_keys" if subject_type == "key" else "systems"
    found = await ex.fetchval(
        f"SELECT 1 FROM {table} WHERE id = $1 AND organization_id = $2",
        subject_id,
        organization_id,
    )
    return found is not None


async def insert_rule(ex: Executor, rule: PolicyRule) -> None:
    """Store a new rule."""
    await ex.execute(
        f"INSERT INTO policy_rules ({_COLUMNS})"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        rule.id,
        rule.organization_id,
        *_editable(rule),
        rule.created_at,
        rule.updated_at,
    )


async def lock_rule(ex: Executor, organization_id: str, rule_id: str) -> None:
    """Write-lock the rule for the rest of the transaction, so concurrent edits apply one after another."""
    # A no-op UPDATE write-locks the row on both backends.
    await ex.execute(
        "UPDATE policy_rules SET updated_at = updated_at WHERE id = $1 AND organization_id = $2",
        rule_id,
        organization_id,
    )


async def update_rule(ex: Executor, rule: PolicyRule) -> None:
    """Store every editable field of an existing rule (its id, organization and creation stay)."""
    await ex.execute(
        "UPDATE policy_rules SET subject_type = $2, subject_id = $3, effect = $4, models = $5,"
        " budget_micros = $6, budget_period = $7, rpm = $8, tpm = $9, description = $10, content = $11,"
        " updated_at = $12"
        " WHERE id = $1",
        rule.id,
        *_editable(rule),
        rule.updated_at,
    )


async def delete_rule(ex: Executor, rule_id: str) -> None:
    """Delete a rule with the spend recorded against its budget."""
    await ex.execute("DELETE FROM policy_budget_spend WHERE rule_id = $1", rule_id)
    await ex.execute("DELETE FROM policy_rules WHERE id = $1", rule_id)


async def budget_spent(ex: Executor, rule_id: str, period_start: float) -> int:
    """The spend recorded against a rule's budget in the period starting at `period_start` (0 if none)."""
    spent = await ex.fetchval(
        "SELECT spent_micros FROM policy_budget_spend WHERE rule_id = $1 AND period_start = $2",
        rule_id,
        period_start,
    )
    return int(spent or 0)
