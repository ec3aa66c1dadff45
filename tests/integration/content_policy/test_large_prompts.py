"""A prompt near the 4 MiB limit against 1,000 phrases, 50 patterns and every detector is scanned and served
(the matcher is linear: tests/unit/test_content_matching.py measures how the time grows with the size)."""

from __future__ import annotations

import httpx

from tests.integration.content_policy.conftest import Stack


def test_a_4_mib_prompt_against_a_thousand_phrases_and_fifty_patterns_is_served(stack: Stack) -> None:
    stack.rule("block", phrases=[f"forbidden term {n}" for n in range(1000)])
    stack.rule("redact", patterns=[f"TICKET-{n:02d}-[0-9]{{6}}" for n in range(50)])
    stack.rule("flag", detectors=["email", "phone", "payment_card", "iban", "credentials"])
    words = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 51_000)[
        :4_000_000
    ]
    text = words + " TICKET-07-123456"
    reply = httpx.post(
        f"{stack.base_url}/v1/embeddings",
        json={"model": "gpt", "input": text},
        headers={"authorization": f"Bearer {stack.tenant.api_key}"},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text[:300]
    [sent] = stack.oai.requests_to("/v1/embeddings")
    assert sent.json["input"].endswith(" [REDACTED:pattern]")
    assert len(sent.json["input"]) == len(words) + len(" [REDACTED:pattern]")
    blocked = httpx.post(
        f"{stack.base_url}/v1/embeddings",
        json={"model": "gpt", "input": words + " FORBIDDEN Term 999."},
        headers={"authorization": f"Bearer {stack.tenant.api_key}"},
        timeout=120,
    )
    assert blocked.status_code == 403, blocked.text[:300]


def test_a_rule_with_the_most_and_longest_terms_is_accepted_and_a_larger_body_is_413(stack: Stack) -> None:
    phrases = [f"{n:04d} " + "ä" * 495 for n in range(1000)]
    patterns = [f"CASE-{n:02d}-" + "[0-9]" * 198 for n in range(50)]
    created = stack.cabinet(
        "POST",
        "/policy-rules",
        {
            "subjectType": "organization",
            "effect": "flag",
            "content": {"where": "prompt", "phrases": phrases, "patterns": patterns},
        },
    )
    assert created.status_code == 201, created.text[:300]
    assert len(created.json()["content"]["phrases"]) == 1000
    too_large = stack.cabinet(
        "POST",
        "/policy-rules",
        {"subjectType": "organization", "effect": "flag", "description": "x" * (4 * 1024 * 1024)},
    )
    assert too_large.status_code == 413
