"""The content matcher of policy rules (`domain.content_matching`): phrases compared in NFKC + casefold form
at word boundaries with offsets into the original text, RE2 patterns refused when they could not run in
linear time, every rule's matches in one order, and time linear in the text."""

from __future__ import annotations

import gc
import time

import pytest

from modelgate.domain.content_matching import (
    DETECTORS,
    PHRASE_EXPANSION,
    UNBOUNDED_MATCH,
    ContentMatch,
    ContentMatcher,
    ContentRuleError,
    ContentTerm,
    check_term,
)


def matcher(*terms: tuple[str, str, str]) -> ContentMatcher:
    return ContentMatcher.compile([ContentTerm(rule_id, kind, value) for rule_id, kind, value in terms])


def spans(found: list[ContentMatch], text: str) -> list[str]:
    return [text[match.start : match.end] for match in found]


def redact(text: str, found: list[ContentMatch]) -> str:
    """Each matched span replaced by [label], as a redacting rule would (matches taken from the end)."""
    for match in sorted(found, key=lambda match: match.start, reverse=True):
        text = text[: match.start] + f"[{match.label}]" + text[match.end :]
    return text


@pytest.mark.parametrize(
    ("phrase", "text", "start", "end"),
    [
        pytest.param("acme support", "call the Acme Support line", 9, 21, id="case"),
        pytest.param("api", "use the \uff21\uff30\uff29 now", 8, 11, id="fullwidth-text"),
        pytest.param("\uff21\uff30\uff29", "use the API now", 8, 11, id="fullwidth-phrase"),
        pytest.param("Straße", "Hauptstrasse 5, STRASSE 7", 16, 23, id="sharp-s-phrase"),
        pytest.param("strasse", "Die Straße ist lang", 4, 10, id="sharp-s-text"),
        pytest.param("café", "un cafe\u0301 noir", 3, 8, id="decomposed-text"),
        pytest.param("cafe\u0301", "un café noir", 3, 7, id="precomposed-text"),
    ],
)
def test_phrase_matches_in_nfkc_casefold_form_with_original_offsets(
    phrase: str, text: str, start: int, end: int
) -> None:
    assert matcher(("r", "phrase", phrase)).find(text) == [ContentMatch(start, end, "r", "phrase")]


def test_phrase_does_not_match_the_base_letter_of_an_accented_one() -> None:
    assert matcher(("r", "phrase", "cafe")).find("un cafe\u0301 noir, un café") == []


def test_phrase_does_not_match_inside_a_word() -> None:
    assert matcher(("r", "phrase", "ssn")).find("lessness and ssns") == []


def test_phrase_matches_at_word_boundaries() -> None:
    text = "SSN: 123, (ssn)"
    assert spans(matcher(("r", "phrase", "ssn")).find(text), text) == ["SSN", "ssn"]


def test_phrase_ending_in_punctuation_matches_before_a_word_character() -> None:
    text = "ticket acme-42 opened"
    assert spans(matcher(("r", "phrase", "acme-")).find(text), text) == ["acme-"]


def test_overlapping_phrases_of_two_rules_are_both_found() -> None:
    text = "from new york city"
    found = matcher(("a", "phrase", "new york"), ("b", "phrase", "york city")).find(text)
    assert [(match.rule_id, text[match.start : match.end]) for match in found] == [
        ("a", "new york"),
        ("b", "york city"),
    ]


def test_pattern_is_case_sensitive_unless_it_says_otherwise() -> None:
    text = "Project-X and project-x"
    assert spans(matcher(("r", "pattern", r"Project-[A-Z]")).find(text), text) == ["Project-X"]
    assert spans(matcher(("r", "pattern", r"(?i)project-x")).find(text), text) == ["Project-X", "project-x"]


def test_a_patterns_flags_stay_within_that_pattern() -> None:
    rules = matcher(("a", "pattern", "(?i)alpha"), ("b", "pattern", "beta"))
    assert [match.rule_id for match in rules.find("ALPHA BETA beta")] == ["a", "b"]


def test_pattern_offsets_index_the_text_not_its_utf8_bytes() -> None:
    text = "Grüße 😀 order-1234 und ünd order-99"
    found = matcher(("r", "pattern", r"order-\d+")).find(text)
    assert spans(found, text) == ["order-1234", "order-99"]


class SilentSet:
    """An RE2 set whose DFA ran out of memory: it answers that nothing matched."""

    def Match(self, data: bytes) -> None:
        return None


def test_every_pattern_runs_when_the_set_answers_nothing() -> None:
    rules = matcher(("a", "pattern", "alpha"), ("b", "detector", "email"), ("c", "pattern", "gamma"))
    rules._set = SilentSet()
    assert [match.rule_id for match in rules.find("alpha to bob@example.com")] == ["a", "b"]


def test_text_with_a_lone_surrogate_is_matched_with_its_offsets() -> None:
    text = "bad \ud800 ünd bob@example.com, secret"
    found = matcher(("e", "detector", "email"), ("p", "phrase", "secret")).find(text)
    assert spans(found, text) == ["bob@example.com", "secret"]


def test_detector_match_is_labelled_with_the_detector_name() -> None:
    assert matcher(("r", "detector", "email")).find("to bob@example.com") == [
        ContentMatch(3, 18, "r", "email")
    ]


def test_two_rules_on_the_same_span_give_two_matches() -> None:
    found = matcher(("b", "phrase", "secret"), ("a", "pattern", "secret")).find("a secret")
    assert found == [ContentMatch(2, 8, "a", "pattern"), ContentMatch(2, 8, "b", "phrase")]


def test_matches_are_ordered_by_start_then_longest_then_rule() -> None:
    found = matcher(
        ("c", "pattern", "beta"),
        ("b", "phrase", "alpha"),
        ("a", "pattern", "alpha beta"),
        ("d", "detector", "email"),
    ).find("x@example.com alpha beta")
    assert [(match.start, match.end, match.rule_id) for match in found] == [
        (0, 13, "d"),
        (14, 24, "a"),
        (14, 19, "b"),
        (20, 24, "c"),
    ]


def test_redaction_of_non_ascii_text_replaces_exactly_the_matched_spans() -> None:
    text = "Grüße aus der Straße 5: \uff21\uff23\uff2d\uff25 GmbH, "
    text += "cre\u0300me bru\u0302le\u0301e, mail bob@example.com, ﬁn."
    found = matcher(
        ("r1", "phrase", "strasse"),
        ("r1", "phrase", "acme gmbh"),
        ("r2", "phrase", "CRÈME BRÛLÉE"),
        ("r3", "detector", "email"),
        ("r4", "phrase", "fin"),
    ).find(text)
    assert redact(text, found) == "Grüße aus der [phrase] 5: [phrase], [phrase], mail [email], [phrase]."


def test_empty_matcher_is_false_and_finds_nothing() -> None:
    empty = ContentMatcher.compile([])
    assert not empty
    assert empty.find("anything at all") == []
    assert empty.longest_match == 0
    assert matcher(("r", "phrase", "x"))


def test_longest_match_bounds_phrases_by_their_folded_length() -> None:
    assert matcher(("r", "phrase", "Straße")).longest_match == PHRASE_EXPANSION * len("strasse")


def test_longest_match_of_a_bounded_pattern_is_its_width() -> None:
    assert matcher(("r", "pattern", r"order-\d{4,8}")).longest_match == 14


def test_longest_match_of_an_unbounded_pattern_is_unbounded_match() -> None:
    assert matcher(("r", "pattern", r"order-\d+"), ("r", "pattern", "a{,3}")).longest_match == UNBOUNDED_MATCH


def test_longest_match_of_detectors() -> None:
    assert 0 < matcher(("r", "detector", "payment_card")).longest_match < 64
    assert matcher(("r", "detector", "credentials")).longest_match == UNBOUNDED_MATCH


@pytest.mark.parametrize(
    ("kind", "value", "reason"),
    [
        ("pattern", r"(\w+) \1", "cannot run in linear time: it uses a backreference"),
        ("pattern", r"(?P<word>\w+) (?P=word)", "cannot run in linear time: it uses a backreference"),
        ("pattern", r"foo(?=bar)", "cannot run in linear time: it uses a lookahead"),
        ("pattern", r"(?<!x)foo", "cannot run in linear time: it uses a lookbehind"),
        ("pattern", r"(?>foo)", "cannot run in linear time: it uses an atomic group"),
        ("pattern", r"fo++", "cannot run in linear time: it uses a possessive quantifier"),
        ("pattern", r"x*", "matches the empty string"),
        ("pattern", r"\b", "matches the empty string"),
        ("pattern", r"\pL*", "matches the empty string"),
        ("pattern", "a" * 1001, "longer than 1000 characters"),
        ("pattern", r"(unclosed", "not valid RE2 syntax: missing )"),
        ("pattern", r"a\Cb", "uses \\C (any byte)"),
        ("pattern", r"[\pL\pN]{1000}", "program is larger than"),
        ("detector", "ssn", "unknown detector 'ssn'"),
        ("phrase", "", "phrase is empty"),
        ("phrase", " \t ", "phrase is empty"),
        ("phrase", "ﬁ" * 251, "longer than 500 characters once normalised"),
        ("keyword", "x", "unknown kind of term 'keyword'"),
    ],
)
def test_check_term_refuses_with_its_reason(kind: str, value: str, reason: str) -> None:
    with pytest.raises(ContentRuleError) as refused:
        check_term(kind, value)
    assert reason in str(refused.value)


def test_compile_refuses_a_bad_term() -> None:
    with pytest.raises(ContentRuleError, match="lookahead"):
        matcher(("ok", "phrase", "fine"), ("bad", "pattern", "a(?!b)"))


@pytest.mark.parametrize("value", ["(a+)+$", "(a|aa)*b", "(x+x+)+y"])
def test_catastrophic_backtracking_shapes_are_accepted(value: str) -> None:
    check_term("pattern", value)


@pytest.mark.parametrize("value", ["(a+)+$", "(a|aa)*b", "(x+x+)+y"])
def test_catastrophic_shapes_run_in_linear_time_on_an_adversarial_mebibyte(value: str) -> None:
    text = ("x" if value.startswith("(x") else "a") * (1 << 20) + "!"
    started = time.perf_counter()
    found = matcher(("r", "pattern", value)).find(text)
    # A backtracking engine would not finish in a lifetime; RE2 needs milliseconds.
    assert time.perf_counter() - started < 2.0
    assert found == []


def large_rules() -> ContentMatcher:
    terms = [ContentTerm(f"p{index % 20}", "phrase", f"codename {index:04d}") for index in range(1000)]
    terms += [
        ContentTerm(f"x{index}", "pattern", rf"(?i)project[- ]{index}[a-z]{{2}}-\d{{4,8}}")
        for index in range(50)
    ]
    terms += [ContentTerm("d", "detector", name) for name in DETECTORS]
    return ContentMatcher.compile(terms)


def best_time(call, rounds: int = 3) -> float:
    """The best of `rounds` timings, the garbage collector off while they run (as `timeit` has it): a
    collection walks the whole test process, whose heap depends on the tests that ran before, not on the
    call timed."""
    best = float("inf")
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - started)
    finally:
        if collecting:
            gc.enable()
    return best


def test_find_time_grows_linearly_from_one_to_four_mebibytes() -> None:
    rules = large_rules()
    unit = "Summarise the notes of codename 0042 for bob@example.com and the team, please. " * 13
    small = unit * ((1 << 20) // len(unit))
    large = small * 4
    assert len(rules.find(small)) > 1000
    small_time = best_time(lambda: rules.find(small), rounds=5)
    large_time = best_time(lambda: rules.find(large), rounds=5)
    # Linear: 4x the text, about 4x the time; quadratic would be 16x. The bound leaves room for a machine
    # busy with other work during some of the rounds.
    assert large_time < 10.0
    assert large_time / small_time < 8


@pytest.mark.parametrize(
    "text",
    [
        "nothing to see here",
        "Codename 0042 is here",
        "mail bob@example.com",
        "PROJECT-7ab-1234",
        "Straße und Codename 0042",
        "tab\there",
    ],
)
def test_any_match_is_true_whenever_find_finds_something(text: str) -> None:
    rules = large_rules()
    assert rules.any_match(text) is True or rules.find(text) == []
    assert bool(rules.find(text)) <= rules.any_match(text)


def test_a_matcher_with_only_detectors_and_unanchored_patterns_is_joinable() -> None:
    assert large_rules().joinable is True
    assert matcher(("r", "pattern", "^secret")).joinable is False
    assert matcher(("r", "pattern", r"secret\z")).joinable is False
