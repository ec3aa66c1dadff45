"""Reading a policy rule from a request body: every field typed and bounded, unknown fields refused.

The same reader serves create (all required fields) and update (any subset); `null` clears an optional
field. Values are returned under their API names, validated but not yet checked against the database.
A content rule's terms are each checked by the matcher (`check_term`), so a rule that is stored can run.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from modelgate.cabinet.requests import bad_request, optional_text
from modelgate.domain.content_matching import ContentRuleError, check_term
from modelgate.domain.policy_rules import ACCESS_EFFECTS, CONTENT_EFFECTS, CONTENT_PLACES, ContentSpec

SUBJECT_TYPES = ("organization", "key", "system")
EFFECTS = ACCESS_EFFECTS + CONTENT_EFFECTS
BUDGET_PERIODS = ("day", "month")
FIELDS = frozenset(
    {"subjectType", "subjectId", "effect", "models", "budget", "rpm", "tpm", "description", "content"}
)
CONTENT_FIELDS = frozenset({"where", "phrases", "patterns", "detectors"})
# `models` is required of access rules only: a content rule applies to every model unless it names some.
REQUIRED_FIELDS = ("subjectType", "effect")
DEFAULT_CONTENT_MODELS = ("*",)
MAX_PATTERNS = 100
MAX_PATTERN_LENGTH = 200
MAX_DESCRIPTION_LENGTH = 2000
# One billion currency units: far above any real budget, far below BIGINT overflow in spend sums.
MAX_BUDGET_MICROS = 10**15
MAX_RATE = 10**9
MAX_PHRASES = 1000
MAX_PHRASE_LENGTH = 500
MAX_CONTENT_PATTERNS = 50
MAX_CONTENT_PATTERN_LENGTH = 1000
# There are only a handful of detectors; the bound just keeps a body from listing one a million times.
MAX_DETECTORS = 20
MAX_DETECTOR_LENGTH = 100


def _reject_unknown_fields(body: dict[str, Any], known: frozenset[str], prefix: str = "") -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad_request(f"unknown field: {prefix}{unknown[0]}")


def _choice(value: Any, field: str, choices: tuple[str, ...]) -> str:
    if value is None:
        raise bad_request(f"{field} is required")
    if not isinstance(value, str) or value not in choices:
        raise bad_request(f"{field} must be one of: {', '.join(choices)}")
    return value


def _patterns(value: Any) -> tuple[str, ...]:
    if value is None:
        raise bad_request("models is required")
    if not isinstance(value, list) or not value:
        raise bad_request("models must be a non-empty array of model name patterns")
    if len(value) > MAX_PATTERNS:
        raise bad_request(f"models must have at most {MAX_PATTERNS} patterns")
    patterns: list[str] = []
    for index, pattern in enumerate(value):
        if (
            not isinstance(pattern, str)
            or not pattern
            or len(pattern) > MAX_PATTERN_LENGTH
            or not pattern.isprintable()
            or any(ch.isspace() for ch in pattern)
        ):
            raise bad_request(
                f"models[{index}] must be a pattern of 1 to {MAX_PATTERN_LENGTH} printable characters"
                " without spaces"
            )
        if pattern not in patterns:
            patterns.append(pattern)
    return tuple(patterns)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _budget(value: Any) -> tuple[int, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request("budget must be an object with amountMicros and period, or null")
    _reject_unknown_fields(value, frozenset({"amountMicros", "period"}), "budget.")
    amount = value.get("amountMicros")
    # 0 is a real budget: "no spend" (a frozen key or system), refused with 402 for any request that costs.
    if not _is_int(amount) or not 0 <= amount <= MAX_BUDGET_MICROS:
        raise bad_request(f"budget.amountMicros must be an integer from 0 to {MAX_BUDGET_MICROS}")
    return amount, _choice(value.get("period"), "budget.period", BUDGET_PERIODS)


def _rate(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or not 0 <= value <= MAX_RATE:
        raise bad_request(f"{field} must be an integer from 0 to {MAX_RATE} (0 means unlimited), or null")
    return value


# Each list of terms of a content rule: the kind the matcher checks, how many items, how long each.
_TERM_LISTS = {
    "phrases": ("phrase", MAX_PHRASES, MAX_PHRASE_LENGTH),
    "patterns": ("pattern", MAX_CONTENT_PATTERNS, MAX_CONTENT_PATTERN_LENGTH),
    "detectors": ("detector", MAX_DETECTORS, MAX_DETECTOR_LENGTH),
}


def _terms(content: dict[str, Any], name: str) -> tuple[str, ...]:
    """One list of a content rule's terms: strings, each checked by the matcher, duplicates dropped."""
    kind, max_items, max_length = _TERM_LISTS[name]
    field, value = f"content.{name}", content.get(name)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad_request(f"{field} must be an array of strings")
    if len(value) > max_items:
        raise bad_request(f"{field} must have at most {max_items} items")
    terms: dict[str, None] = {}  # ordered and deduplicated
    for index, term in enumerate(value):
        if not isinstance(term, str) or len(term) > max_length:
            raise bad_request(f"{field}[{index}] must be a string of at most {max_length} characters")
        if term in terms:
            continue
        try:
            check_term(kind, term)
        except ContentRuleError as exc:
            raise bad_request(f"{field}[{index}]: {exc}") from exc
        terms[term] = None
    return tuple(terms)


def _content(value: Any) -> ContentSpec | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request("content must be an object with where and phrases, patterns or detectors, or null")
    _reject_unknown_fields(value, CONTENT_FIELDS, "content.")
    content = ContentSpec(
        where=_choice(value.get("where"), "content.where", CONTENT_PLACES),
        phrases=_terms(value, "phrases"),
        patterns=_terms(value, "patterns"),
        detectors=_terms(value, "detectors"),
    )
    if not (content.phrases or content.patterns or content.detectors):
        raise bad_request("content must have at least one phrase, pattern or detector")
    return content


def parse_rule_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The fields present in a create or update body, validated; keys are the API field names."""
    _reject_unknown_fields(body, FIELDS)
    fields: dict[str, Any] = {}
    if "subjectType" in body:
        fields["subjectType"] = _choice(body["subjectType"], "subjectType", SUBJECT_TYPES)
    if "subjectId" in body:
        subject_id = body["subjectId"]
        if subject_id is not None and not isinstance(subject_id, str):
            raise bad_request("subjectId must be a string")
        fields["subjectId"] = subject_id or None
    if "effect" in body:
        fields["effect"] = _choice(body["effect"], "effect", EFFECTS)
    if "models" in body:
        fields["models"] = _patterns(body["models"])
    if "budget" in body:
        fields["budget"] = _budget(body["budget"])
    for rate in ("rpm", "tpm"):
        if rate in body:
            fields[rate] = _rate(body[rate], rate)
    if "description" in body:
        fields["description"] = optional_text(body, "description", max_length=MAX_DESCRIPTION_LENGTH) or ""
    if "content" in body:
        fields["content"] = _content(body["content"])
    return fields


def check_consistent(
    effect: str,
    budget: tuple[int, str] | None,
    rpm: int | None,
    tpm: int | None,
    content: ContentSpec | None = None,
) -> None:
    """400 for a combination no rule may have: limits on a deny or content rule, content on an access rule
    or a content rule without it."""
    limited = budget is not None or rpm is not None or tpm is not None
    if effect in CONTENT_EFFECTS:
        if content is None:
            raise bad_request(f"a {effect} rule needs content (where, and phrases, patterns or detectors)")
        # Content rules act on what is said, not on spend or pace: limits belong on an allow rule.
        if limited:
            raise bad_request(f"a {effect} rule cannot have a budget, rpm or tpm")
        return
    if content is not None:
        raise bad_request(
            "an allow or deny rule cannot have content (content rules have effect block, redact or flag;"
            " send content: null to make a content rule an access rule)"
        )
    if effect == "deny" and limited:
        # A matching deny always blocks, so limits on it could never take effect.
        raise bad_request("a deny rule cannot have a budget, rpm or tpm")
