"""Content rules compiled for a request: which side each rule scans, whether a stream must hold text back,
and one matcher per rule when together they pass what one matcher may hold."""

from __future__ import annotations

from modelgate.domain import content_matching
from modelgate.domain.content_rules import MatcherGroup, compile_content
from modelgate.domain.policy_rules import ContentSpec, PolicyRule


def rule(rule_id: str, effect: str, where: str, **terms: tuple[str, ...]) -> PolicyRule:
    return PolicyRule(
        id=rule_id,
        organization_id="org",
        subject_type="organization",
        subject_id="org",
        effect=effect,
        models=("*",),
        budget_micros=None,
        budget_period=None,
        rpm=None,
        tpm=None,
        description="",
        created_at=0.0,
        updated_at=0.0,
        content=ContentSpec(where, **terms),
    )


def test_access_rules_compile_to_nothing() -> None:
    allow = rule("a", "allow", "prompt")
    fields = {name: getattr(allow, name) for name in allow.__slots__}
    assert compile_content([PolicyRule(**{**fields, "content": None})]) is None


def test_each_side_gets_the_rules_that_scan_it() -> None:
    content = compile_content(
        [
            rule("p", "block", "prompt", phrases=("alpha",)),
            rule("a", "redact", "answer", phrases=("beta",)),
            rule("b", "flag", "both", detectors=("email",)),
        ]
    )
    assert content is not None
    assert {m.rule_id for m in content.prompt.matcher.find("alpha beta x@example.com")} == {"p", "b"}
    assert {m.rule_id for m in content.answer.matcher.find("alpha beta x@example.com")} == {"a", "b"}
    assert content.prompt.actions == {"p": "block", "b": "flag"}


def test_a_stream_holds_text_back_only_for_block_or_redact_rules() -> None:
    flag_only = compile_content([rule("f", "flag", "answer", phrases=("alpha",))])
    redacting = compile_content([rule("r", "redact", "answer", phrases=("alpha",))])
    assert flag_only.answer.hold is False and flag_only.prompt is None
    assert redacting.answer.hold is True
    assert redacting.answer.window == redacting.answer.matcher.longest_match > 0


def test_a_matcher_group_finds_what_each_of_its_matchers_finds_in_order() -> None:
    # What rules that together pass one matcher's budget are compiled into (one matcher per rule).
    one = content_matching.ContentMatcher.compile([content_matching.ContentTerm("one", "detector", "email")])
    two = content_matching.ContentMatcher.compile(
        [content_matching.ContentTerm("two", "pattern", "case #[0-9]+")]
    )
    group = MatcherGroup([one, two])
    found = group.find("mail a@b.io about case #7")
    assert [(m.rule_id, m.label, m.start) for m in found] == [("one", "email", 5), ("two", "pattern", 18)]
    assert group.longest_match == max(one.longest_match, two.longest_match)


def test_a_matcher_group_says_whether_any_of_its_matchers_may_match() -> None:
    one = content_matching.ContentMatcher.compile([content_matching.ContentTerm("one", "detector", "email")])
    two = content_matching.ContentMatcher.compile([content_matching.ContentTerm("two", "pattern", "^case")])
    group = MatcherGroup([one, two])
    assert group.any_match("case 7") and group.any_match("a@b.io") and not group.any_match("nothing")
    assert group.joinable is False  # one of its patterns is anchored to a text's start
