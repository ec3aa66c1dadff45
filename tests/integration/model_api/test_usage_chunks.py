"""Usage the client did not ask for, and a provider's own price, never reach the client.

The gateway asks every streamed chat for usage (`stream_options.include_usage`) to meter it. Providers put
that usage in different chunks: its own chunk with no choices, a chunk whose one choice carries nothing,
or the chunk with the last piece of content. Whatever the shape, a client that did not ask gets the content
and no usage; the request is still metered; and a provider's `cost` is relayed to nobody.
"""

from __future__ import annotations

import orjson
import pytest

from tests.fakes import Fault
from tests.integration.media.conftest import ledger_row

pytestmark = pytest.mark.shared_gateway

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello there"}]
STREAM = {"model": "gpt-test", "messages": HELLO, "stream": True}
ASKED = {**STREAM, "stream_options": {"include_usage": True}}


def _stream(http, payload: dict) -> tuple[list[dict], bytes, str]:
    """(the JSON events, the raw bytes, the request id) of a streamed chat."""
    with http.stream("POST", CHAT, json=payload) as reply:
        assert reply.status_code == 200
        raw = reply.read()
        request_id = reply.headers["x-request-id"]
    events = [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: {")]
    return events, raw, request_id


def _content(events: list[dict]) -> str:
    return "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])


@pytest.mark.parametrize("shape", ["empty_choice", "last_content"])
def test_a_client_that_did_not_ask_for_usage_gets_none_whatever_chunk_carries_it(
    http, alpha, gateway, shape
) -> None:
    alpha.add_fault(CHAT, Fault(usage_chunk=shape))
    events, raw, request_id = _stream(http, STREAM)

    assert [e for e in events if e.get("usage") is not None] == []
    assert b'"cost"' not in raw
    assert _content(events) == "echo: hello there"
    assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["stop"]
    assert ledger_row(gateway.storage_url, request_id)["output_tokens"] == 3  # metered all the same


def test_a_usage_chunk_whose_choice_carries_nothing_is_dropped_whole(http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(usage_chunk="empty_choice"))
    events, _, _ = _stream(http, STREAM)
    # Each chunk the client gets carries something: the role, a piece of content or the finish reason.
    assert all(
        c["delta"].get("role") or c["delta"].get("content") or c["finish_reason"]
        for e in events
        for c in e["choices"]
    )


def test_the_sdk_sees_no_usage_it_did_not_ask_for(client, alpha) -> None:
    alpha.add_fault(CHAT, Fault(usage_chunk="last_content"))
    chunks = list(client.chat.completions.create(model="gpt-test", messages=HELLO, stream=True))
    assert [chunk.usage for chunk in chunks] == [None] * len(chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: hello there"


@pytest.mark.parametrize("shape", ["empty_choice", "last_content"])
def test_a_client_that_asked_for_usage_gets_it_without_the_providers_cost(http, alpha, shape) -> None:
    alpha.add_fault(CHAT, Fault(usage_chunk=shape))
    events, raw, _ = _stream(http, ASKED)

    [usage] = [e["usage"] for e in events if e.get("usage") is not None]
    assert usage["completion_tokens"] == 3 and "cost" not in usage
    assert b'"cost"' not in raw
    assert _content(events) == "echo: hello there"


def test_a_plain_answer_carries_no_provider_cost(http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(provider_cost=True))
    reply = http.post(CHAT, json={"model": "gpt-test", "messages": HELLO})

    body = reply.json()
    assert "cost" not in body and "cost" not in body["usage"]
    assert body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["message"]["content"] == "echo: hello there"
