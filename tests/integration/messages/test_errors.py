"""Every error of /v1/messages is in envelope B, as the anthropic SDK's own exception classes expect."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.fakes import Fault

HELLO = [{"role": "user", "content": "hello there"}]
CHAT_PATH = "/v1/chat/completions"
MESSAGES_PATH = "/v1/messages"


def envelope_b(error_type: str, message: str) -> dict:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def assert_envelope_b(body: object, error_type: str) -> None:
    assert isinstance(body, dict) and set(body) == {"type", "error"}, body
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


# -- the gateway's own checks --------------------------------------------------------------------------


def test_a_missing_max_tokens_is_a_400_in_envelope_b(http, oai, anth) -> None:
    reply = http.post(MESSAGES_PATH, json={"model": "gpt-translated", "messages": HELLO})
    assert reply.status_code == 400
    assert reply.json() == envelope_b("invalid_request_error", "max_tokens: Field required")
    assert oai.requests == [] and anth.requests == []


def test_a_zero_max_tokens_is_a_bad_request_for_the_sdk(claude_sdk) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude_sdk.messages.create(model="claude-native", max_tokens=0, messages=HELLO)
    assert caught.value.body == envelope_b(
        "invalid_request_error", "max_tokens: must be an integer of at least 1"
    )


def test_empty_messages_are_a_bad_request_for_the_sdk(claude_sdk) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude_sdk.messages.create(model="gpt-translated", max_tokens=10, messages=[])
    assert_envelope_b(caught.value.body, "invalid_request_error")
    assert "messages" in caught.value.body["error"]["message"]


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "system", "content": "no system role here"}],
        [{"role": "user"}],
        [{"role": "user", "content": 42}],
        ["hello"],
    ],
)
def test_a_malformed_turn_is_a_400_in_envelope_b(http, messages: list) -> None:
    reply = http.post(MESSAGES_PATH, json={"model": "claude-native", "max_tokens": 10, "messages": messages})
    assert reply.status_code == 400
    assert_envelope_b(reply.json(), "invalid_request_error")


def test_a_wrong_key_is_an_authentication_error(gateway) -> None:
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key="sk-wrong", max_retries=0, timeout=10)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(model="claude-native", max_tokens=10, messages=HELLO)
    assert_envelope_b(caught.value.body, "authentication_error")


def test_a_missing_key_is_a_401_in_envelope_b(gateway) -> None:
    reply = httpx.post(
        f"{gateway.base_url}{MESSAGES_PATH}",
        timeout=10,
        json={"model": "claude-native", "max_tokens": 10, "messages": HELLO},
    )
    assert reply.status_code == 401
    assert_envelope_b(reply.json(), "authentication_error")


def test_an_unknown_model_is_not_found(claude_sdk) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude_sdk.messages.create(model="no-such-model", max_tokens=10, messages=HELLO)
    assert_envelope_b(caught.value.body, "not_found_error")


def test_a_model_that_does_not_serve_messages_is_not_found(claude_sdk, oai) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude_sdk.messages.create(model="chat-only", max_tokens=10, messages=HELLO)
    assert_envelope_b(caught.value.body, "not_found_error")
    assert oai.requests == []


def test_a_body_over_4_mib_is_a_413_in_envelope_b(claude_sdk) -> None:
    huge = "x" * (4 * 1024 * 1024 + 1)
    with pytest.raises(anthropic.ContentTooLargeError) as caught:
        claude_sdk.messages.create(
            model="claude-native", max_tokens=10, messages=[{"role": "user", "content": huge}]
        )
    assert caught.value.status_code == 413
    assert_envelope_b(caught.value.body, "request_too_large")


# -- upstream failures ---------------------------------------------------------------------------------


def test_a_failing_openai_row_is_a_502_api_error(claude_sdk, oai) -> None:
    oai.add_fault(CHAT_PATH, Fault(status=500))
    with pytest.raises(anthropic.InternalServerError) as caught:
        claude_sdk.messages.create(model="gpt-translated", max_tokens=10, messages=HELLO)
    assert caught.value.status_code == 502
    assert_envelope_b(caught.value.body, "api_error")


def test_a_model_whose_rows_all_cool_down_is_a_503_api_error(claude_sdk, oai) -> None:
    oai.add_fault(CHAT_PATH, Fault(status=503), times=2)
    for _ in range(2):  # failure_threshold = 2 puts the only row into cool-down
        with pytest.raises(anthropic.InternalServerError):
            claude_sdk.messages.create(model="gpt-translated", max_tokens=10, messages=HELLO)
    with pytest.raises(anthropic.ServiceUnavailableError) as caught:
        claude_sdk.messages.create(model="gpt-translated", max_tokens=10, messages=HELLO)
    assert_envelope_b(caught.value.body, "api_error")


def test_a_failing_openai_row_fails_over_to_the_native_row_of_a_mixed_model(claude_sdk, oai, anth) -> None:
    oai.add_fault(CHAT_PATH, Fault(status=500))
    message = claude_sdk.messages.create(model="mixed", max_tokens=10, messages=HELLO)
    assert message.content[0].text == "echo: hello there"
    assert len(anth.requests_to(MESSAGES_PATH)) == 1


def test_an_openai_style_400_from_a_translated_row_is_normalised_into_envelope_b(claude_sdk, oai) -> None:
    upstream_error = {
        "error": {
            "message": "Invalid 'messages[0].content': string too long.",
            "type": "invalid_request_error",
            "param": "messages[0].content",
            "code": "string_above_max_length",
        }
    }
    oai.add_fault(CHAT_PATH, Fault(status=400, body=upstream_error))
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude_sdk.messages.create(model="gpt-translated", max_tokens=10, messages=HELLO)
    assert caught.value.body == envelope_b(
        "invalid_request_error", "Invalid 'messages[0].content': string too long."
    )


def test_an_openai_style_422_keeps_its_status_and_message_in_envelope_b(http, oai) -> None:
    oai.add_fault(
        CHAT_PATH,
        Fault(status=422, body={"error": {"message": "bad schema", "type": "invalid_request_error"}}),
    )
    reply = http.post(MESSAGES_PATH, json={"model": "gpt-translated", "max_tokens": 10, "messages": HELLO})
    assert reply.status_code == 422
    assert reply.json() == envelope_b("invalid_request_error", "bad schema")


def test_an_anthropic_style_400_from_a_native_row_keeps_its_message(claude_sdk, anth) -> None:
    body = envelope_b("invalid_request_error", "messages.0.content: text content blocks must be non-empty")
    anth.add_fault(MESSAGES_PATH, Fault(status=400, body=body))
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude_sdk.messages.create(model="claude-native", max_tokens=10, messages=HELLO)
    assert caught.value.body == body


# -- errors in the middle of a stream ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "fake", "path"),
    [
        ("gpt-translated", "oai", CHAT_PATH),
        ("claude-native", "anth", MESSAGES_PATH),
    ],
)
def test_a_stream_broken_by_the_provider_ends_with_an_error_event(
    request, claude_sdk, model: str, fake: str, path: str
) -> None:
    request.getfixturevalue(fake).add_fault(path, Fault(disconnect_after_chunks=4))
    received = []
    # Raised from the `error` event: a broken socket would be an APIConnectionError instead.
    with pytest.raises(anthropic.APIStatusError) as caught:
        with claude_sdk.messages.stream(model=model, max_tokens=50, messages=HELLO) as stream:
            received.extend(stream.text_stream)
    assert received  # the text before the break still reached the client
    assert_envelope_b(caught.value.body, "api_error")


def test_a_translated_stream_broken_mid_way_carries_the_error_event_on_the_wire(http, oai) -> None:
    oai.add_fault(CHAT_PATH, Fault(disconnect_after_chunks=3))
    payload = {"model": "gpt-translated", "max_tokens": 50, "messages": HELLO, "stream": True}
    with http.stream("POST", MESSAGES_PATH, json=payload) as reply:
        raw = reply.read().decode()
    assert reply.status_code == 200
    assert "event: content_block_delta" in raw
    assert raw.rstrip().splitlines()[-2] == "event: error"
    assert '"type":"api_error"' in raw.rstrip().splitlines()[-1]
