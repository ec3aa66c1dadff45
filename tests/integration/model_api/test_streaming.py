"""Streams are relayed chunk by chunk: early bytes arrive early, a client that leaves cancels the upstream,
and an upstream that breaks off ends the client's stream with an error event instead of a hang."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from modelgate.domain.errors import UPSTREAM_UNAVAILABLE_MESSAGE
from tests.fakes import Fault

CHAT = "/v1/chat/completions"
STREAM_BODY = {
    "model": "gpt-test",
    "stream": True,
    "messages": [{"role": "user", "content": "one two three four"}],
}


def sse_data(raw: bytes) -> list[bytes]:
    """The `data:` payloads of an SSE body, in order."""
    return [line[len(b"data: ") :] for line in raw.split(b"\n") if line.startswith(b"data: ")]


def test_first_chunk_reaches_the_client_before_the_upstream_has_finished(http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="g"))
    with http.stream("POST", CHAT, json=STREAM_BODY) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = response.iter_raw()
        first = next(chunks)
        assert first.startswith(b"data: ")
        assert alpha.wait_held("g")  # the upstream is still holding back its last frames
        assert alpha.active_streams == 1
        alpha.release("g")
        rest = b"".join(chunks)
    body = first + rest
    assert body.endswith(b"data: [DONE]\n\n")
    text = "".join(
        (orjson.loads(d)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for d in sse_data(body)
        if d != b"[DONE]"
    )
    assert text == "echo: one two three four"


def test_sdk_stream_yields_a_chunk_while_the_upstream_is_held(client, alpha) -> None:
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="g"))
    stream = client.chat.completions.create(**STREAM_BODY)
    try:
        first = next(iter(stream))
        assert first.choices[0].delta.role == "assistant"
        assert alpha.wait_held("g")
        alpha.release("g")
        text = (first.choices[0].delta.content or "") + "".join(
            chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
        )
    finally:
        stream.close()
    assert text == "echo: one two three four"


def test_client_disconnect_mid_stream_cancels_the_upstream_request(gateway, tenant, alpha) -> None:
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="g"))
    with httpx.Client(
        base_url=gateway.base_url, timeout=10, headers={"authorization": f"Bearer {tenant.api_key}"}
    ) as http:
        with http.stream("POST", CHAT, json=STREAM_BODY) as response:
            chunks = response.iter_raw()  # kept: dropping the iterator would close the response early
            assert next(chunks).startswith(b"data: ")
            assert alpha.wait_held("g")
            assert alpha.cancelled_count == 0
        # Leaving the block closed the connection mid-stream (the pool does not keep a half-read one).
    assert alpha.wait_cancelled(1)
    assert alpha.wait_active_streams(0)


# "echo: one two three four" streams as 5 content frames, then the finish frame and [DONE]; the fake holds
# at "g" before the finish frame and drops the connection right after sending it.
BREAK_AFTER_FIRST_CHUNK = Fault(hold_before_last_chunk="g", disconnect_after_chunks=6)


def test_upstream_breaking_off_mid_stream_ends_the_client_stream_with_an_error_event(http, alpha) -> None:
    alpha.add_fault(CHAT, BREAK_AFTER_FIRST_CHUNK)
    with http.stream("POST", CHAT, json=STREAM_BODY) as response:
        assert response.status_code == 200
        chunks = response.iter_raw()
        first = next(chunks)  # content reached the client: failover is no longer possible
        assert alpha.wait_held("g")
        alpha.release("g")
        body = first + b"".join(chunks)  # ends: the gateway closes the stream rather than hanging
    events = sse_data(body)
    assert b"[DONE]" not in body
    assert orjson.loads(events[0])["choices"][0]["delta"]["role"] == "assistant"
    assert orjson.loads(events[-1]) == {
        "error": {
            "message": UPSTREAM_UNAVAILABLE_MESSAGE,
            "type": "server_error",
            "code": "upstream_unavailable",
        }
    }


def test_sdk_raises_when_the_upstream_breaks_off_mid_stream(client, alpha) -> None:
    alpha.add_fault(CHAT, BREAK_AFTER_FIRST_CHUNK)
    stream = client.chat.completions.create(**STREAM_BODY)
    chunks = iter(stream)
    assert next(chunks).choices[0].delta.role == "assistant"
    assert alpha.wait_held("g")
    alpha.release("g")
    with pytest.raises(openai.APIError) as raised:
        for _ in chunks:
            pass
    assert raised.value.code == "upstream_unavailable"


def test_upstream_breaking_off_a_responses_stream_ends_it_with_an_error_event(http, alpha) -> None:
    # "echo: one two": 4 opening events and 3 deltas, held before the 4 closing events; dropped after one.
    alpha.add_fault("/v1/responses", Fault(hold_before_last_chunk="g", disconnect_after_chunks=8))
    with http.stream(
        "POST", "/v1/responses", json={"model": "gpt-test", "input": "one two", "stream": True}
    ) as response:
        assert response.status_code == 200
        chunks = response.iter_raw()
        first = next(chunks)
        assert alpha.wait_held("g")
        alpha.release("g")
        body = first + b"".join(chunks)
    assert body.startswith(b"event: response.created")
    assert b"response.completed" not in body
    assert orjson.loads(sse_data(body)[-1])["error"]["code"] == "upstream_unavailable"


def test_client_disconnect_before_the_upstream_answers_cancels_the_upstream_request(
    gateway, tenant, alpha
) -> None:
    alpha.add_fault(CHAT, Fault(hang=True))
    with pytest.raises(httpx.ReadTimeout):  # the client gives up long before the gateway's 3 s timeout
        httpx.post(
            f"{gateway.base_url}{CHAT}",
            json=STREAM_BODY,
            headers={"authorization": f"Bearer {tenant.api_key}"},
            timeout=httpx.Timeout(10, read=0.3),
        )
    assert alpha.wait_cancelled(1)


def test_streamed_completions_are_relayed(client) -> None:
    stream = client.completions.create(model="gpt-test", prompt="alpha beta", stream=True)
    assert "".join(chunk.choices[0].text for chunk in stream if chunk.choices) == "echo: alpha beta"


def test_stream_from_a_silent_upstream_ends_instead_of_hanging(gateway_with, tenant_on, alpha) -> None:
    http = tenant_on(gateway_with(timeout=0.5))
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="never-released"))
    with http.stream("POST", CHAT, json=STREAM_BODY) as response:
        assert response.status_code == 200
        body = response.read()  # the read timeout ends the relay
    assert orjson.loads(sse_data(body)[-1])["error"]["code"] == "upstream_unavailable"
    assert alpha.wait_cancelled(1)


def test_a_steady_stream_longer_in_all_than_the_read_timeout_is_relayed_whole(
    gateway_with, tenant_on, alpha
) -> None:
    """The read timeout is a wait between pieces, not a bound on the stream: pieces 0.2 s apart under a 0.5 s
    timeout, 2 s in all, all arrive (the relay pipes pieces from the connection's callback, and each one
    pushed moves the deadline on)."""
    http = tenant_on(gateway_with(timeout=0.5))
    alpha.add_fault(CHAT, Fault(chunk_delay=0.2))
    body = {**STREAM_BODY, "messages": [{"role": "user", "content": "one two three four five six"}]}
    with http.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200
        events = sse_data(response.read())
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(event) for event in events[:-1]]
    assert not [chunk for chunk in chunks if "error" in chunk]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert text == "echo: one two three four five six"
