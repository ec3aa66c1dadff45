"""Content rules on answers: a whole answer is checked before it is sent; a streamed one as it passes, over
a window wide enough for the longest rule, so a match split across chunks is still caught; a block ends the
stream with an error event in the route's format."""

from __future__ import annotations

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.integration.content_policy.conftest import Stack
from tests.integration.content_policy.test_prompts import _audit_eventually, _ledger_row_eventually

# The fakes answer "echo: " + the prompt, one word per stream event: the phrase arrives split across two.
PROMPT = "tell me about project nightingale please"
REDACTED = "echo: tell me about [REDACTED:phrase] please"
PHRASE = "Project Nightingale"


def _chat(client: openai.OpenAI, model: str = "gpt", **extra):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": PROMPT}], **extra
    )


def test_a_whole_answer_is_redacted_before_it_is_sent(stack: Stack) -> None:
    stack.rule("redact", where="answer", phrases=[PHRASE])
    with stack.openai() as client:
        answer = _chat(client)
    assert answer.choices[0].message.content == REDACTED
    [sent] = stack.oai.requests_to("/v1/chat/completions")
    assert sent.json["messages"][0]["content"] == PROMPT  # an answer rule leaves the prompt alone


def test_a_blocked_whole_answer_is_403_and_charged_as_generated(stack: Stack) -> None:
    rule = stack.rule("block", where="answer", phrases=[PHRASE])
    reply = stack.post(
        "/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": PROMPT}]}
    )
    assert reply.status_code == 403
    assert rule["id"] in reply.json()["error"]["message"]
    assert "nightingale" not in reply.text.lower()
    row = _ledger_row_eventually(stack, reply.headers["x-request-id"])
    assert row["content_action"] == "blocked" and row["outcome"] == "blocked"
    assert row["cost_micros"] > 0  # the provider generated it


def test_a_streamed_answer_is_redacted_across_two_events(stack: Stack) -> None:
    stack.rule("redact", where="answer", phrases=[PHRASE])
    with stack.openai() as client:
        stream = _chat(client, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == REDACTED


def test_a_streamed_answer_split_across_two_chunks_of_bytes_is_redacted(stack: Stack) -> None:
    stack.rule("redact", where="answer", detectors=["email"])
    prompt = "write to alice.smith@example.com now"
    with httpx.stream(
        "POST",
        f"{stack.base_url}/v1/chat/completions",
        json={"model": "gpt", "messages": [{"role": "user", "content": prompt}], "stream": True},
        headers={"authorization": f"Bearer {stack.tenant.api_key}"},
        timeout=30,
    ) as reply:
        raw = b"".join(reply.iter_bytes())
    assert b"alice.smith" not in raw
    texts = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: {"):
            for choice in orjson.loads(line[6:])["choices"]:
                texts.append(choice["delta"].get("content") or "")
    assert "".join(texts) == "echo: write to [REDACTED:email] now"


def test_a_block_mid_stream_ends_it_with_an_error_event_and_charges_what_was_generated(stack: Stack) -> None:
    rule = stack.rule("block", where="answer", phrases=[PHRASE])
    received = []
    long_prompt = "word " * 80 + PROMPT  # longer than the window held back: its start is delivered
    with stack.openai() as client, pytest.raises(openai.APIError) as caught:
        with client.chat.completions.create(
            model="gpt", messages=[{"role": "user", "content": long_prompt}], stream=True
        ) as stream:
            for chunk in stream:
                received.extend(c.delta.content or "" for c in chunk.choices)
    assert rule["id"] in str(caught.value)
    delivered = "".join(received)
    assert "nightingale" not in delivered.lower() and delivered.startswith("echo: word word")
    rows = [r for r in stack.ledger_rows() if r["content_action"] == "blocked"]
    row = rows[-1] if rows else None
    assert row is not None and row["outcome"] == "blocked" and row["cost_micros"] > 0


def test_a_block_mid_stream_on_messages_is_an_anthropic_error_event(stack: Stack) -> None:
    stack.rule("block", where="answer", phrases=[PHRASE])
    with stack.anthropic() as client, pytest.raises(anthropic.APIError) as caught:
        with client.messages.stream(
            model="claude", max_tokens=50, messages=[{"role": "user", "content": PROMPT}]
        ) as stream:
            for _ in stream.text_stream:
                pass
    assert "content rule" in str(caught.value)


def test_a_native_messages_stream_is_redacted(stack: Stack) -> None:
    stack.rule("redact", where="answer", phrases=[PHRASE])
    with stack.anthropic() as client:
        with client.messages.stream(
            model="claude", max_tokens=50, messages=[{"role": "user", "content": PROMPT}]
        ) as stream:
            text = "".join(stream.text_stream)
    assert text == REDACTED


def test_a_messages_stream_translated_from_a_chat_row_is_redacted(stack: Stack) -> None:
    stack.rule("redact", where="answer", phrases=[PHRASE])
    with stack.anthropic() as client:
        with client.messages.stream(
            model="gpt", max_tokens=50, messages=[{"role": "user", "content": PROMPT}]
        ) as stream:
            text = "".join(stream.text_stream)
    assert text == REDACTED
    assert stack.oai.requests_to("/v1/chat/completions")  # it went to the chat row


def test_a_chat_stream_translated_from_a_messages_row_is_redacted(stack: Stack) -> None:
    stack.rule("redact", where="answer", phrases=[PHRASE])
    with stack.openai() as client:
        stream = _chat(client, model="claude", stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == REDACTED


def test_a_responses_stream_is_redacted_in_its_deltas_and_its_final_response(stack: Stack) -> None:
    stack.rule("redact", where="answer", phrases=[PHRASE])
    deltas, final = [], None
    with stack.openai() as client:
        for event in client.responses.create(model="gpt", input=PROMPT, stream=True):
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.completed":
                final = event.response
    assert "".join(deltas) == REDACTED
    assert final is not None and final.output_text == REDACTED


def test_a_flagged_stream_passes_unchanged_and_is_audited(stack: Stack) -> None:
    rule = stack.rule("flag", where="answer", phrases=[PHRASE])
    with stack.openai() as client:
        stream = _chat(client, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "echo: " + PROMPT
    entries = _audit_eventually(stack, rule["id"])
    assert entries and entries[0]["details"]["where"] == "answer"


def test_a_whole_messages_answer_is_redacted(stack: Stack) -> None:
    stack.rule("redact", where="answer", detectors=["email"])
    with stack.anthropic() as client:
        message = client.messages.create(
            model="claude", max_tokens=50, messages=[{"role": "user", "content": "hello bob@example.org"}]
        )
    assert message.content[0].text == "echo: hello [REDACTED:email]"
