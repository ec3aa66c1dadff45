"""Micro-benchmark of modelgate/domain/content_matching.py (not a test): compile time for 1,000 phrases + 50
patterns + every detector, and µs per `find` call (best of several rounds) on the texts the gateway sees.

Run: /work/venv/bin/python bench/content_matching.py
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import ahocorasick
import re2

from modelgate.domain.content_matching import DETECTORS, ContentMatcher, ContentTerm

PROMPT = (
    "You are a helpful assistant. Summarise the following meeting notes for the engineering team and list "
    "the decisions, the open questions and who owns each follow-up. The notes: we reviewed the quarterly "
    "roadmap, agreed to move the billing migration to the second half, and asked the platform group to "
    "estimate the work needed for regional data residency. Several people raised concerns about the on-call "
    "load during the migration window; we will revisit staffing next week. The design review for the new "
    "search service is scheduled for Thursday, and the draft document is ready for comments. Please keep "
    "the summary under two hundred words, use plain language, avoid jargon where possible, and end with a "
    "short list of action items, each with an owner and a due date if one was mentioned in the notes. "
    "Thank you, and please flag anything that looks inconsistent or that needs a decision from leadership."
)

# Text whose folding changes its length (ß into ss): the offset map is built when a phrase is found.
GERMAN = "Die Straße ist lang und grün; wir fahren morgen früh über die Brücke zur Messe. "


def rule_terms(phrases: int = 1000, patterns: int = 50) -> list[ContentTerm]:
    """Terms of a large organization: many phrases, many patterns, every detector."""
    rng = random.Random(16)
    letters = "abcdefghijklmnopqrstuvwxyz"
    terms = [
        ContentTerm(f"rule-{index % 20}", "phrase", f"{''.join(rng.choices(letters, k=7))} {index}")
        for index in range(phrases)
    ]
    terms += [
        ContentTerm(f"rule-{index % 20}", "pattern", f"(?i)project[- ]{index}[a-z]{{2}}-\\d{{4,8}}")
        for index in range(patterns)
    ]
    terms += [ContentTerm("rule-detectors", "detector", name) for name in DETECTORS]
    return terms


def best_us(call: Callable[[], object], rounds: int = 7, budget: float = 0.2) -> float:
    """Microseconds per call, the best of `rounds` rounds of about `budget` seconds each."""
    loops = 1
    while True:
        started = time.perf_counter()
        for _ in range(loops):
            call()
        if time.perf_counter() - started > budget / 10 or loops > 1 << 20:
            break
        loops *= 2
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(loops):
            call()
        best = min(best, (time.perf_counter() - started) / loops)
    return best * 1e6


def compare_phrase_engines(terms: list[ContentTerm], text: str) -> tuple[float, float]:
    """µs per no-match pass over `text` of the phrases: one Aho-Corasick automaton, one RE2 alternation."""
    phrases = [term.value.casefold() for term in terms if term.kind == "phrase"]
    automaton = ahocorasick.Automaton()
    for phrase in phrases:
        automaton.add_word(phrase, phrase)
    automaton.make_automaton()
    alternation = re2.compile("|".join(re2.escape(phrase) for phrase in phrases))
    lowered = text.lower()
    encoded = lowered.encode()
    return (
        best_us(lambda: next(automaton.iter(lowered), None)),
        best_us(lambda: alternation.search(encoded)),
    )


def main() -> None:
    terms = rule_terms()
    started = time.perf_counter()
    matcher = ContentMatcher.compile(terms)
    print(f"compile 1,000 phrases + 50 patterns + {len(DETECTORS)} detectors: "
          f"{(time.perf_counter() - started) * 1e3:.1f} ms")  # fmt: skip
    one_match = PROMPT[:500] + " write to ops@example.com " + PROMPT[526:]
    big = (PROMPT + " ") * (4 * 1024 * 1024 // (len(PROMPT) + 1))
    window = PROMPT[:200]
    assert not matcher.find(PROMPT) and len(matcher.find(one_match)) == 1
    print(f"find, 1 KB prompt, no match:  {best_us(lambda: matcher.find(PROMPT)):9.1f} µs")
    print(f"find, 1 KB prompt, one match: {best_us(lambda: matcher.find(one_match)):9.1f} µs")
    print(f"find, 200-char window:        {best_us(lambda: matcher.find(window)):9.1f} µs")
    print(f"find, 4 MiB prompt, no match: {best_us(lambda: matcher.find(big), rounds=3) / 1e3:9.1f} ms")
    german = GERMAN * (1024 // len(GERMAN))
    german_match = german[:500] + f" {terms[0].value} " + german[500:]
    assert not matcher.find(german) and len(matcher.find(german_match)) == 1
    print(f"find, 1 KB German, no match:  {best_us(lambda: matcher.find(german)):9.1f} µs")
    print(f"find, 1 KB German, a phrase:  {best_us(lambda: matcher.find(german_match)):9.1f} µs")
    automaton_us, alternation_us = compare_phrase_engines(terms, PROMPT)
    print(f"phrases alone, 1 KB no match: Aho-Corasick {automaton_us:.1f} µs, "
          f"RE2 alternation {alternation_us:.1f} µs")  # fmt: skip


if __name__ == "__main__":
    main()
