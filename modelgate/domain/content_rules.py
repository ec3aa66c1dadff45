"""Content rules as the model API applies them: the rules that apply to a request, compiled into one matcher
for its prompt and one for its answer.

A set of rules is compiled once (per organization policy, per distinct set of applicable rules) and reused by
every request until a rule changes; compiling never happens per request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from modelgate.domain.content_matching import (
    ContentMatch,
    ContentMatcher,
    ContentRuleError,
    ContentTerm,
    check_term,
    match_order,
)
from modelgate.domain.policy_rules import PolicyRule

log = logging.getLogger("modelgate.content_rules")

# The most characters of patterns compiled into one RE2 program (see `_program_parts`): RE2 holds the
# interpreter while it compiles, about 10 ms for 16,000 characters here, so a worker thread compiling an
# organization's rules never keeps the event loop waiting longer than that.
PROGRAM_CHARS = 16_000


@dataclass(frozen=True, slots=True)
class ContentScope:
    """The content rules that apply to one side of a request (its prompt or its answer), compiled."""

    matcher: ContentMatcher | MatcherGroup
    actions: Mapping[str, str]  # rule id → block | redact | flag
    hold: bool  # a block or redact rule applies: a stream holds back a window of text until it is checked
    window: int  # the longest text a match can span, in characters


@dataclass(frozen=True, slots=True)
class ContentRules:
    """What the content rules say for one (key, system, model): the prompt's and the answer's scope."""

    prompt: ContentScope | None
    answer: ContentScope | None


def _terms(rule: PolicyRule) -> list[ContentTerm]:
    """The rule's terms; one the matcher no longer accepts (checked at creation) is skipped and logged."""
    spec = rule.content
    terms: list[ContentTerm] = []
    if spec is None:
        return terms
    for kind, values in (("phrase", spec.phrases), ("pattern", spec.patterns), ("detector", spec.detectors)):
        for value in values:
            try:
                check_term(kind, value)
            except ContentRuleError as exc:
                log.error("content rule %s: a %s is skipped: %s", rule.id, kind, exc)
                continue
            terms.append(ContentTerm(rule.id, kind, value))
    return terms


class MatcherGroup:
    """Several matchers searched one after another: the rules' terms when together they exceed what one
    matcher may hold (each rule's own terms always fit: they were checked at creation)."""

    __slots__ = ("_matchers", "joinable", "longest_match")

    def __init__(self, matchers: list[ContentMatcher]) -> None:
        self._matchers = matchers
        self.longest_match = max((m.longest_match for m in matchers), default=0)
        self.joinable = all(m.joinable for m in matchers)

    def any_match(self, text: str) -> bool:
        return any(matcher.any_match(text) for matcher in self._matchers)

    def find(self, text: str) -> list[ContentMatch]:
        found = [match for matcher in self._matchers for match in matcher.find(text)]
        found.sort(key=match_order)
        return found


def _program_parts(terms: list[ContentTerm]) -> list[list[ContentTerm]]:
    """The terms in parts of at most PROGRAM_CHARS characters of patterns each (phrases stay together: an
    automaton of any size is quick to build), so that no one RE2 compile holds the interpreter for long."""
    parts: list[list[ContentTerm]] = [[]]
    size = 0
    for term in terms:
        if term.kind == "pattern":
            if size and size + len(term.value) > PROGRAM_CHARS:
                parts.append([])
                size = 0
            size += len(term.value)
            parts[-1].append(term)
    phrases_and_detectors = [term for term in terms if term.kind != "pattern"]
    parts[0].extend(phrases_and_detectors)
    return [part for part in parts if part]


def _compiled(rules: Sequence[PolicyRule], terms: list[ContentTerm]) -> ContentMatcher | MatcherGroup:
    parts = _program_parts(terms)
    try:
        if len(parts) == 1:
            return ContentMatcher.compile(terms, checked=True)
        return MatcherGroup([ContentMatcher.compile(part, checked=True) for part in parts])
    except ContentRuleError as exc:
        log.warning("content rules of %d rules compiled one matcher per rule: %s", len(rules), exc)
    matchers = []
    for rule in rules:
        own = [term for term in terms if term.rule_id == rule.id]
        try:
            matchers.append(ContentMatcher.compile(own, checked=True))
        except ContentRuleError as exc:  # checked at creation: only an engine change gets here
            log.error("content rule %s cannot be compiled and is skipped: %s", rule.id, exc)
    return MatcherGroup(matchers)


def _scope(rules: Sequence[PolicyRule]) -> ContentScope | None:
    terms = [term for rule in rules for term in _terms(rule)]
    if not terms:
        return None
    matcher = _compiled(rules, terms)
    actions = {rule.id: rule.effect for rule in rules}
    hold = any(action != "flag" for action in actions.values())
    return ContentScope(matcher, actions, hold, matcher.longest_match)


def _applies_to(rule: PolicyRule, where: str) -> bool:
    return rule.content is not None and rule.content.where in (where, "both")


def compile_content(rules: Sequence[PolicyRule]) -> ContentRules | None:
    """Compile the content rules among `rules` (those already known to apply to the request's subject and
    model); None when there are none."""
    content = [rule for rule in rules if rule.content is not None]
    if not content:
        return None
    prompt = _scope([r for r in content if _applies_to(r, "prompt")])
    answer = _scope([r for r in content if _applies_to(r, "answer")])
    if prompt is None and answer is None:
        return None
    return ContentRules(prompt, answer)
