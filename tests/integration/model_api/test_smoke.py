"""The happy path through the official openai SDK."""

from __future__ import annotations

import openai


def test_chat_completion_round_trips_through_the_gateway(gateway, tenant, alpha) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hello there"}]
    )
    assert reply.choices[0].message.content == "echo: hello there"
    sent = alpha.requests_to("/v1/chat/completions")[-1]
    assert sent.json["model"] == "gpt-upstream-a"
    assert sent.headers["authorization"] == "Bearer upstream-secret-key"


def test_streamed_chat_completion_arrives_word_by_word(gateway, tenant) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "one two three"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "echo: one two three"
