"""Redacting a text by its hits, and which hit of several decides."""

from __future__ import annotations

from modelgate.proxy.content.redaction import Hit, redact, strongest


def hit(start: int, end: int, action: str = "redact", label: str = "email") -> Hit:
    return Hit(start, end, action, f"rule-{start}", label)


def test_a_redact_hit_is_replaced_by_its_label() -> None:
    assert redact("mail bob@x.io now", [hit(5, 13)]) == "mail [REDACTED:email] now"


def test_several_separate_hits_are_each_replaced() -> None:
    text = "a 1234 b 5678 c"
    hits = [hit(9, 13, label="card"), hit(2, 6, label="pin")]
    assert redact(text, hits) == "a [REDACTED:pin] b [REDACTED:card] c"


def test_overlapping_hits_merge_into_one_replacement_named_by_the_earliest() -> None:
    hits = [hit(4, 10, label="second"), hit(2, 6, label="first")]
    assert redact("ab0123456789yz", hits) == "ab[REDACTED:first]89yz"


def test_adjacent_hits_merge_into_one_replacement() -> None:
    hits = [hit(0, 3, label="left"), hit(3, 6, label="right")]
    assert redact("abcdefgh", hits) == "[REDACTED:left]gh"


def test_block_and_flag_hits_leave_the_text_as_it_is() -> None:
    hits = [hit(0, 3, "block"), hit(4, 7, "flag")]
    assert redact("abc def", hits) == "abc def"


def test_a_hit_at_the_very_end_keeps_nothing_after_it() -> None:
    assert redact("key: sk-1", [hit(5, 9, label="credential")]) == "key: [REDACTED:credential]"


def test_strongest_is_the_first_block_hit_whatever_comes_before_it() -> None:
    flag, redaction, block = hit(0, 1, "flag"), hit(1, 2, "redact"), hit(2, 3, "block")
    assert strongest([flag, redaction, block, hit(5, 6, "block")]) is block


def test_strongest_without_a_block_is_the_first_redact_hit() -> None:
    flag, redaction = hit(0, 1, "flag"), hit(1, 2, "redact")
    assert strongest([flag, redaction, hit(3, 4, "redact")]) is redaction


def test_strongest_of_flags_only_is_the_first_flag() -> None:
    first = hit(0, 1, "flag")
    assert strongest([first, hit(2, 3, "flag")]) is first


def test_strongest_of_no_hits_is_none() -> None:
    assert strongest([]) is None
