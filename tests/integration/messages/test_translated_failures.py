"""A provider failing behind a translation (Messages on a chat-completions row, chat on a Messages row) is
answered like any upstream failure: 502 `upstream_unavailable` with the neutral message, in the client's
envelope, and a warning line naming the row for the operator; never a 500 or the provider's own words.
"""

from __future__ import annotations

import logging

import anthropic
import openai
import pytest

from modelgate.domain.errors import UPSTREAM_UNAVAILABLE_MESSAGE
from tests.fakes import Fault

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="modelgate.forward")
    return caplog


def test_a_chat_answer_of_the_wrong_shape_behind_messages_is_a_neutral_502(claude_sdk, oai, warnings) -> None:
    oai.add_fault("/v1/chat/completions", Fault(status=200, body={"choices": "not a list"}))
    with pytest.raises(anthropic.APIStatusError) as failed:
        claude_sdk.messages.create(model="gpt-translated", max_tokens=50, messages=HELLO)

    assert failed.value.status_code == 502
    assert failed.value.body["error"] == {"type": "api_error", "message": UPSTREAM_UNAVAILABLE_MESSAGE}
    assert "openai/gpt-upstream@127.0.0.1" in warnings.text and "could not be translated" in warnings.text


def test_a_message_of_the_wrong_shape_behind_chat_is_a_neutral_502(openai_sdk, anth, warnings) -> None:
    anth.add_fault("/v1/messages", Fault(status=200, body={"type": "message", "content": 5}))
    with pytest.raises(openai.APIStatusError) as failed:
        openai_sdk.chat.completions.create(model="claude-native", messages=HELLO)

    assert failed.value.status_code == 502
    assert failed.value.body["message"] == UPSTREAM_UNAVAILABLE_MESSAGE
    assert "claude/claude-upstream@127.0.0.1" in warnings.text


def test_a_translated_stream_the_provider_breaks_off_ends_with_a_neutral_error_event(
    http, oai, warnings
) -> None:
    oai.add_fault("/v1/chat/completions", Fault(disconnect_after_chunks=2))
    payload = {"model": "gpt-translated", "max_tokens": 50, "messages": HELLO, "stream": True}
    with http.stream("POST", "/v1/messages", json=payload) as reply:
        raw = reply.read()

    assert raw.rstrip().split(b"\n")[-2] == b"event: error"
    assert UPSTREAM_UNAVAILABLE_MESSAGE.encode() in raw.rstrip().split(b"\n")[-1]
    assert b"openai" not in raw and b"gpt-upstream" not in raw
    assert "openai/gpt-upstream@127.0.0.1" in warnings.text and "broke off a stream" in warnings.text
