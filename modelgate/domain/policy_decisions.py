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

import asyncio
import calendar
import time
from concurrent.futures import Executor
from dataclasses import dataclass, replace

from modelgate.domain.content_rules import ContentRules, compile_content
from modelgate.domain.errors import STORAGE_RETRY_AFTER, STORAGE_UNAVAILABLE, ServiceUnavailable
from modelgate.domain.policy_rules import ContentSpec, PolicyRule, policy_rules_of
from modelgate.storage.database import Database
from modelgate.storage.presence import OUTAGE_READ_SECONDS

_SPECIFICITY = {"key": 3, "system": 2, "organization": 1}
# How long a request waits for its organization's changed content rules to compile before the rules they
# replace serve it instead (until the compile ends).
SERVE_REPLACED_AFTER_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy says about one (key, model)."""

    denied: bool
    not_enabled: bool
    budget_rules: tuple[PolicyRule, ...]
    rpm: int | None
    tpm: int | None
    content: ContentRules | None = None  # the content rules that apply, compiled
    # Set while the content rules that apply are still compiling: `CompiledPolicy.settled` waits for them.
    content_key: tuple | None = None
    content_rules: tuple[PolicyRule, ...] = ()


ALLOW_ALL = Decision(False, False, (), None, None)


def period_start(period: str, now: float) -> float:
    """Start (UTC epoch seconds) of the day or month containing `now`."""
    t = time.gmtime(now)
    day = t.tm_mday if period == "day" else 1
    return float(calendar.timegm((t.tm_year, t.tm_mon, day, 0, 0, 0)))


# Content rules are compiled by what decides the compiled result (each rule's id, effect and terms), so an
# edit of anything else (a description, a budget) reuses the compiled set of the rules before it.
ContentKey = tuple[tuple[str, str, ContentSpec | None], ...]


class ContentCompilations:
    """An organization's compiled content rule sets, kept across changes of its policy, and the compiles under
    way. Compiling runs in a worker thread: 2,000 patterns of 950 characters took 80 s on the event loop,
    during which no request of any organization was served."""

    __slots__ = ("compiled", "running")

    def __init__(self) -> None:
        self.compiled: dict[ContentKey, ContentRules | None] = {}
        self.running: dict[ContentKey, asyncio.Future[ContentRules | None]] = {}

    def keep_only(self, rules: tuple[PolicyRule, ...]) -> None:
        """Forget the sets holding a rule that is gone or changed: they can no longer be asked for."""
        current = {_content_signature(rule) for rule in rules if rule.content is not None}
        for key in [key for key in self.compiled if not current.issuperset(key)]:
            del self.compiled[key]


def _content_signature(rule: PolicyRule) -> tuple[str, str, ContentSpec | None]:
    return rule.id, rule.effect, rule.content


class CompiledPolicy:
    """The rules of one organization, with decisions cached per (key, system, model)."""

    __slots__ = ("_compilations", "_compiler", "_decisions", "_previous", "organization_id", "rules")

    def __init__(
        self,
        organization_id: str,
        rules: tuple[PolicyRule, ...],
        compilations: ContentCompilations | None = None,
        compiler: Executor | None = None,
        previous: CompiledPolicy | None = None,
    ) -> None:
        self.organization_id = organization_id
        self.rules = rules
        self._decisions: dict[tuple[str, str | None, str], Decision] = {}
        self._compilations = compilations if compilations is not None else ContentCompilations()
        self._compiler = compiler  # None: compile on the calling thread (tools and unit tests)
        # The policy this one replaced: its decisions keep serving content rules while ours compile.
        self._previous = previous

    def decide(self, key_id: str, system_id: str | None, model: str) -> Decision:
        """The decision for a request; its `content` may be pending (`content_key` set): see `settled`."""
        cache_key = (key_id, system_id, model)
        decision = self._decisions.get(cache_key)
        if decision is None:
            decision = self._evaluate(key_id, system_id, model)
            if decision.content_key is None:
                self._decisions[cache_key] = decision
        return decision

    async def settled(self, decision: Decision, key_id: str, system_id: str | None, model: str) -> Decision:
        """The decision with its content rules compiled (off the event loop). A compile longer than
        SERVE_REPLACED_AFTER_SECONDS leaves the content rules the replaced policy applied to the same key
        and model serving; with none, the request waits for its own organization's compile (no other
        organization's request ever does)."""
        content_key = decision.content_key
        if content_key is None:
            return decision
        compilations = self._compilations
        if content_key not in compilations.compiled:
            running = compilations.running.get(content_key)
            if running is None:
                running = compilations.running[content_key] = self._start_compile(decision.content_rules)
            earlier = self._previous._served(key_id, system_id, model) if self._previous is not None else None
            if earlier is None:
                await asyncio.shield(running)
            else:
                # The usual compile takes milliseconds: the change applies to this very request. A long
                # one leaves the replaced rules serving this organization until it ends.
                done, _ = await asyncio.wait((running,), timeout=SERVE_REPLACED_AFTER_SECONDS)
                if not done:
                    return replace(decision, content=earlier, content_key=None, content_rules=())
                running.result()
        settled = replace(
            decision, content=compilations.compiled[content_key], content_key=None, content_rules=()
        )
        self._decisions[(key_id, system_id, model)] = settled
        return settled

    def _served(self, key_id: str, system_id: str | None, model: str) -> ContentRules | None:
        decision = self._decisions.get((key_id, system_id, model))
        return decision.content if decision is not None else None

    def _start_compile(self, rules: tuple[PolicyRule, ...]) -> asyncio.Future[ContentRules | None]:
        compilations = self._compilations
        key = tuple(_content_signature(rule) for rule in rules)
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._compiler, compile_content, rules)

        def done(finished: asyncio.Future[ContentRules | None]) -> None:
            compilations.running.pop(key, None)
            if not finished.cancelled() and finished.exception() is None:
                compilations.compiled[key] = finished.result()

        future.add_done_callback(done)
        return future

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
        decision = Decision(denied, not_enabled, budgets, rpm, tpm)
        content = tuple(r for r in matching if r.content is not None)
        if not content:
            return decision
        key = tuple(_content_signature(rule) for rule in content)
        compiled = self._compilations.compiled
        if key in compiled:
            return replace(decision, content=compiled[key])
        if self._compiler is None:
            compiled[key] = compile_content(content)
            return replace(decision, content=compiled[key])
        return replace(decision, content_key=key, content_rules=content)


class PolicyDirectory:
    """Compiled policies by organization: read once, dropped the moment a rule changes (the content rules
    compiled for it are kept: see `ContentCompilations`)."""

    def __init__(self, db: Database, compiler: Executor | None = None) -> None:
        self._db = db
        self._policies: dict[str, CompiledPolicy] = {}
        self._replaced: dict[str, CompiledPolicy] = {}
        self._compilations: dict[str, ContentCompilations] = {}
        self._compiler = compiler
        self._generation = 0
        # False while this process may miss policy changes (see storage/presence.py): nothing is kept.
        self.caching = True
        # The policies kept when that began: served only while the database cannot be read (an outage, when
        # no rule can change either), so a database outage does not refuse every request.
        self._suspect: dict[str, CompiledPolicy] = {}

    def cached(self, organization_id: str) -> CompiledPolicy | None:
        """The organization's policy when it is kept here (`policy` then returns it without a read)."""
        return self._policies.get(organization_id)

    async def policy(self, organization_id: str) -> CompiledPolicy:
        policy = self._policies.get(organization_id)
        if policy is not None:
            return policy
        generation = self._generation
        suspect = self._suspect.get(organization_id) if self._suspect else None
        if suspect is None:
            try:
                rules = tuple(await policy_rules_of(self._db, organization_id))
            except Exception as exc:  # a reset connection too: not the client leaving
                raise ServiceUnavailable(STORAGE_UNAVAILABLE, headers=STORAGE_RETRY_AFTER) from exc
        else:
            try:  # a database that does not answer (a partition) must not hold the request either
                rules = tuple(
                    await asyncio.wait_for(policy_rules_of(self._db, organization_id), OUTAGE_READ_SECONDS)
                )
            except Exception:
                return suspect  # the database is out of reach: the policy as it was when trust was lost
        self._suspect.pop(organization_id, None)
        compilations = self._compilations.get(organization_id)
        if compilations is None:
            compilations = self._compilations[organization_id] = ContentCompilations()
        previous = self._replaced.get(organization_id)
        policy = CompiledPolicy(organization_id, rules, compilations, self._compiler, previous)
        if self.caching and generation == self._generation:  # no change was announced while we read
            compilations.keep_only(rules)
            self._policies[organization_id] = policy
            self._replaced.pop(organization_id, None)
        return policy

    def close(self) -> None:
        """Stop the compile worker; a compile under way is abandoned (the process is stopping)."""
        if self._compiler is not None:
            self._compiler.shutdown(wait=False, cancel_futures=True)

    def untrusted(self, keep_aside: bool = True) -> None:
        """Changes may be missed from now on: keep nothing, read every policy afresh until `trusted`; with
        `keep_aside`, the policies kept until now serve while the database cannot be read."""
        kept = dict(self._policies)
        self.caching = False
        self.invalidate_all()
        if keep_aside:
            self._suspect.update(kept)

    def trusted(self) -> None:
        self.caching = True
        self._suspect.clear()

    def invalidate(self, organization_id: str) -> None:
        self._generation += 1
        self._suspect.pop(organization_id, None)  # a change heard: the policy kept aside is stale
        replaced = self._policies.pop(organization_id, None)
        if replaced is not None:
            replaced._previous = None  # one policy back is all that serves: no chain of old ones
            self._replaced[organization_id] = replaced

    def invalidate_all(self) -> None:
        """Drop every compiled policy (changes may have been missed): each is read afresh on next use."""
        self._generation += 1
        for organization_id in list(self._policies):
            self.invalidate(organization_id)
