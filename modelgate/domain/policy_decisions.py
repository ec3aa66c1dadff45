"""Policy Rules as the model API applies them, compiled per organization and cached until they change.

Evaluation for a request by key K (system S) of organization O on model M — the rules of O, of S and of
K apply, a rule applies when one of its model globs matches M:
1. a matching `deny` rule → 403;
2. if any `allow` rule exists for O, S or K, a model matched by none of them is not enabled → 404
   `model_not_found`;
3. every matching rule with a budget must have room for the request's worst-case cost → else 402;
4. rpm/tpm: the most specific subject (key, then system, then organization) whose matching rule sets a
   value overrides the plan's limit for the key.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass

from modelgate.domain.content_rules import ContentRules, compile_content
from modelgate.domain.policy_rules import PolicyRule, policy_rules_of
from modelgate.storage.database import Database

_SPECIFICITY = {"key": 3, "system": 2, "organization": 1}


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy says about one (key, model)."""

    denied: bool
    not_enabled: bool
    budget_rules: tuple[PolicyRule, ...]
    rpm: int | None
    tpm: int | None
    content: ContentRules | None = None  # the content rules that apply, compiled


ALLOW_ALL = Decision(False, False, (), None, None)


def period_start(period: str, now: float) -> float:
    """Start (UTC epoch seconds) of the day or month containing `now`."""
    t = time.gmtime(now)
    day = t.tm_mday if period == "day" else 1
    return float(calendar.timegm((t.tm_year, t.tm_mon, day, 0, 0, 0)))


class CompiledPolicy:
    """The rules of one organization, with decisions cached per (key, system, model)."""

    __slots__ = ("_content", "_decisions", "organization_id", "rules")

    def __init__(self, organization_id: str, rules: tuple[PolicyRule, ...]) -> None:
        self.organization_id = organization_id
        self.rules = rules
        self._decisions: dict[tuple[str, str | None, str], Decision] = {}
        # Compiled content rules by the ids of the rules in them: keys and models sharing a set share one.
        self._content: dict[tuple[str, ...], ContentRules | None] = {}

    def decide(self, key_id: str, system_id: str | None, model: str) -> Decision:
        cache_key = (key_id, system_id, model)
        decision = self._decisions.get(cache_key)
        if decision is None:
            decision = self._evaluate(key_id, system_id, model)
            self._decisions[cache_key] = decision
        return decision

    def _evaluate(self, key_id: str, system_id: str | None, model: str) -> Decision:
        if not self.rules:
            return ALLOW_ALL
        subjects = {("organization", self.organization_id), ("key", key_id)}
        if system_id:
            subjects.add(("system", system_id))
        applicable = [r for r in self.rules if (r.subject_type, r.subject_id) in subjects]
        matching = [r for r in applicable if r.matches(model)]
        denied = any(r.effect == "deny" for r in matching)
        allows = [r for r in applicable if r.effect == "allow"]
        not_enabled = bool(allows) and not any(r.matches(model) for r in allows)
        budgets = tuple(r for r in matching if r.budget_micros is not None and r.budget_period)
        rpm = tpm = None
        for rule in sorted(matching, key=lambda r: _SPECIFICITY[r.subject_type], reverse=True):
            if rpm is None and rule.rpm is not None:
                rpm = rule.rpm
            if tpm is None and rule.tpm is not None:
                tpm = rule.tpm
        return Decision(denied, not_enabled, budgets, rpm, tpm, self._compiled_content(matching))

    def _compiled_content(self, matching: list[PolicyRule]) -> ContentRules | None:
        rules = [r for r in matching if r.content is not None]
        if not rules:
            return None
        ids = tuple(r.id for r in rules)
        if ids not in self._content:
            self._content[ids] = compile_content(rules)
        return self._content[ids]


class PolicyDirectory:
    """Compiled policies by organization: read once, dropped the moment a rule changes."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._policies: dict[str, CompiledPolicy] = {}
        self._generation = 0

    async def policy(self, organization_id: str) -> CompiledPolicy:
        policy = self._policies.get(organization_id)
        if policy is not None:
            return policy
        generation = self._generation
        rules = tuple(await policy_rules_of(self._db, organization_id))
        policy = CompiledPolicy(organization_id, rules)
        if generation == self._generation:  # no change was announced while we read
            self._policies[organization_id] = policy
        return policy

    def invalidate(self, organization_id: str) -> None:
        self._generation += 1
        self._policies.pop(organization_id, None)

    def invalidate_all(self) -> None:
        """Drop every compiled policy (changes may have been missed): each is read afresh on next use."""
        self._generation += 1
        self._policies.clear()
