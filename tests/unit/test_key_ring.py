"""A host's keys in turn: a refused or throttled key rests on its own; when all rest, the first back."""

from __future__ import annotations

from modelgate.proxy.upstream.key_ring import Credential, KeyRing, fingerprint


def ring(*names: str, cooldown: float = 60.0) -> tuple[KeyRing, list[Credential]]:
    keys = [Credential("authorization", f"Bearer {n}", b"", fingerprint(n)) for n in names]
    return KeyRing(keys, cooldown), keys


def test_keys_are_used_in_turn() -> None:
    keys, (a, b, c) = ring("a", "b", "c")
    assert [keys.pick() for _ in range(4)] == [a, b, c, a]


def test_a_refused_or_throttled_key_rests_and_others_serve() -> None:
    keys, (a, b, c) = ring("a", "b", "c")
    assert keys.answered(b, 401, {}) is True
    assert keys.answered(a, 200, {}) is False and keys.answered(c, 500, {}) is False
    assert [keys.pick() for _ in range(4)] == [a, c, a, c]


def test_a_throttled_key_rests_as_long_as_retry_after_says() -> None:
    keys, (a, b) = ring("a", "b", cooldown=60.0)
    keys.answered(a, 429, {"retry-after": "0"})
    keys.answered(b, 429, {"retry-after": "120"})
    assert keys.pick() is a  # retry-after 0: back at once
    assert b.cooled_until - a.cooled_until > 100


def test_when_every_key_rests_the_one_back_first_is_picked_and_exclude_is_honoured() -> None:
    keys, (a, b) = ring("a", "b")
    keys.answered(a, 429, {"retry-after": "300"})
    keys.answered(b, 403, {})
    assert keys.pick() is b  # back after 60 s, before a
    assert keys.pick(exclude=[b]) is a
    assert keys.pick(exclude=[a, b]) is None


def test_a_fingerprint_is_short_and_not_the_key() -> None:
    assert len(fingerprint("sk-secret")) == 8 and "secret" not in fingerprint("sk-secret")
    assert fingerprint("sk-secret") == fingerprint("sk-secret") != fingerprint("sk-other")


def test_a_single_key_serves_even_while_it_rests() -> None:
    keys, (a,) = ring("a")
    keys.answered(a, 401, {})
    assert keys.pick() is a and keys.pick(exclude=[a]) is None
    assert KeyRing([]).pick() is None
