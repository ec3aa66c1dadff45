"""Tenants see the gateway's model name, never the provider's: `gpt-test` is served upstream as
`gpt-upstream-a`, and a provider may answer with yet another name (a dated snapshot). Every answer, plain or
streamed, names the model the client asked for; only the top-level `model` field (and a stream event's
`response.model` / `message.model`) is rewritten, never text that merely looks like one.
"""

from __future__ import annotations

import orjson
import pytest

from tests.fakes import Fault

pytestmark = pytest.mark.shared_gateway

CHAT = "/v1/chat/completions"
SNAPSHOT = "gpt-upstream-a-2024-08-06"
HELLO = [{"role": "user", "content": "hello there"}]


def _events(raw: bytes) -> list[dict]:
    """The JSON payload of every `data:` line of an SSE stream, [DONE] left out."""
    return [
        orjson.loads(line[6:])
        for line in raw.split(b"\n")
        if line.startswith(b"data: {")  # every event of these streams is one JSON line
    ]


def _stream(http, path: str, payload: dict) -> bytes:
    with http.stream("POST", path, json={**payload, "stream": True}) as reply:
        assert reply.status_code == 200
        return reply.read()


def test_a_chat_answer_names_the_requested_model(client) -> None:
    reply = client.chat.completions.create(model="gpt-test", messages=HELLO)
    assert reply.model == "gpt-test"
    assert reply.choices[0].message.content == "echo: hello there"


def test_every_chunk_of_a_chat_stream_names_the_requested_model(client) -> None:
    chunks = list(client.chat.completions.create(model="gpt-test", messages=HELLO, stream=True))
    assert chunks and {chunk.model for chunk in chunks} == {"gpt-test"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: hello there"


def test_a_provider_answering_with_another_model_name_is_relayed_with_the_requested_one(http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(answer_model=SNAPSHOT), times=2)
    plain = http.post(CHAT, json={"model": "gpt-test", "messages": HELLO})
    raw = _stream(http, CHAT, {"model": "gpt-test", "messages": HELLO})

    assert plain.json()["model"] == "gpt-test"
    assert SNAPSHOT.encode() not in plain.content and SNAPSHOT.encode() not in raw
    assert {event["model"] for event in _events(raw)} == {"gpt-test"}


def test_text_that_looks_like_a_model_field_is_relayed_unchanged(http) -> None:
    text = 'config: {"model": "gpt-upstream-a"} and "model":"x"'
    messages = [{"role": "user", "content": text}]
    plain = http.post(CHAT, json={"model": "gpt-test", "messages": messages})
    raw = _stream(http, CHAT, {"model": "gpt-test", "messages": messages})

    assert plain.json()["choices"][0]["message"]["content"] == "echo: " + text
    streamed = "".join(
        choice["delta"].get("content") or "" for event in _events(raw) for choice in event["choices"]
    )
    assert streamed == "echo: " + text


def test_completions_plain_and_streamed_name_the_requested_model(client) -> None:
    plain = client.completions.create(model="gpt-test", prompt="say this")
    chunks = list(client.completions.create(model="gpt-test", prompt="say this", stream=True))
    assert plain.model == "gpt-test"
    assert chunks and {chunk.model for chunk in chunks} == {"gpt-test"}


def test_an_embeddings_answer_names_the_requested_model(client, alpha) -> None:
    alpha.add_fault("/v1/embeddings", Fault(answer_model="text-embedding-provider-v3"))
    reply = client.embeddings.create(model="embed-test", input=["one", "two"])
    assert reply.model == "embed-test"
    assert len(reply.data) == 2


def test_a_stored_response_names_the_requested_model_when_created_streamed_and_retrieved(
    client, http
) -> None:
    created = client.responses.create(model="gpt-test", input="hello there")
    retrieved = client.responses.retrieve(created.id)
    raw = _stream(http, "/v1/responses", {"model": "gpt-test", "input": "hello there"})

    assert (created.model, retrieved.model) == ("gpt-test", "gpt-test")
    carrying = [event["response"] for event in _events(raw) if "response" in event]
    assert carrying and {response["model"] for response in carrying} == {"gpt-test"}
    assert b"gpt-upstream" not in raw


def test_a_native_message_names_the_requested_model_plain_and_streamed(http) -> None:
    payload = {"model": "claude-test", "max_tokens": 50, "messages": HELLO}
    headers = {"anthropic-version": "2023-06-01"}
    plain = http.post("/v1/messages", json=payload, headers=headers)
    with http.stream("POST", "/v1/messages", json={**payload, "stream": True}, headers=headers) as reply:
        raw = reply.read()

    assert plain.status_code == 200, plain.text
    assert plain.json()["model"] == "claude-test"
    [start] = [event for event in _events(raw) if event["type"] == "message_start"]
    assert start["message"]["model"] == "claude-test"
    assert b"claude-upstream" not in raw
