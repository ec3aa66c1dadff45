"""The official anthropic SDK on native rows: the request goes as is, the answer comes back untouched."""

from __future__ import annotations

import anthropic
import httpx
import orjson

from tests.integration.messages.conftest import UPSTREAM_KEY

HELLO = [{"role": "user", "content": "hello there"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_a_message_is_answered_by_the_anthropic_kind_row(claude_sdk, anth, oai) -> None:
    message = claude_sdk.messages.create(model="claude-native", max_tokens=50, messages=HELLO)
    assert message.content[0].text == "echo: hello there"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 5
    assert oai.requests == []


def test_the_request_reaches_the_provider_as_sent_with_only_the_model_renamed(claude_sdk, anth) -> None:
    claude_sdk.messages.create(
        model="claude-native",
        max_tokens=50,
        messages=HELLO,
        system="Be brief.",
        extra_body={"top_k": 3},
        metadata={"user_id": "u-1"},
        stop_sequences=["END"],
    )
    sent = anth.requests_to("/v1/messages")[-1].json
    assert sent == {
        "model": "claude-upstream",
        "max_tokens": 50,
        "messages": HELLO,
        "system": "Be brief.",
        "top_k": 3,
        "metadata": {"user_id": "u-1"},
        "stop_sequences": ["END"],
    }


def test_the_provider_gets_its_own_key_and_the_clients_version_and_beta_headers(
    claude_sdk, anth, tenant
) -> None:
    claude_sdk.messages.create(
        model="claude-native",
        max_tokens=50,
        messages=HELLO,
        extra_headers={
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "token-efficient-tools-2025-02-19",
        },
    )
    headers = anth.requests_to("/v1/messages")[-1].headers
    assert headers["x-api-key"] == UPSTREAM_KEY
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["anthropic-beta"] == "token-efficient-tools-2025-02-19"
    assert tenant.api_key not in orjson.dumps(headers).decode()


def test_the_answer_is_relayed_untouched_but_for_the_model_name(http, anth) -> None:
    reply = http.post("/v1/messages", json={"model": "claude-native", "max_tokens": 50, "messages": HELLO})
    assert reply.status_code == 200
    body = reply.json()
    assert body["model"] == "claude-native"  # the gateway's name; the row's upstream name stays inside
    assert body["id"].startswith("msg_")
    assert body["usage"] == {
        "input_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 3,
    }


def test_a_stream_is_relayed_event_by_event_for_the_sdk_helpers(claude_sdk) -> None:
    with claude_sdk.messages.stream(model="claude-native", max_tokens=50, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo: hello there"
    assert final.content[0].text == "echo: hello there"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3
    assert final.model == "claude-native"


def test_the_raw_stream_carries_the_providers_events_unchanged_but_for_the_model_name(http) -> None:
    payload = {"model": "claude-native", "max_tokens": 50, "messages": HELLO, "stream": True}
    with http.stream("POST", "/v1/messages", json=payload) as reply:
        raw = reply.read()
    names = [line[7:] for line in raw.decode().splitlines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert b'"model":"claude-native"' in raw and b"claude-upstream" not in raw


def test_tool_use_and_the_tool_result_round_trip(claude_sdk, anth) -> None:
    first = claude_sdk.messages.create(
        model="claude-native",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "weather in Paris?"}],
    )
    assert first.stop_reason == "tool_use"
    call = first.content[0]
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather", {"city": "Paris"})
    second = claude_sdk.messages.create(
        model="claude-native",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            {
                "role": "assistant",
                "content": [block.model_dump(exclude_none=True) for block in first.content],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18 C"}]},
        ],
    )
    assert second.stop_reason == "end_turn"
    sent = anth.requests_to("/v1/messages")[-1].json
    assert sent["messages"][2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": "18 C",
    }


def test_extended_thinking_is_served(claude_sdk) -> None:
    message = claude_sdk.messages.create(
        model="claude-native",
        max_tokens=2048,
        messages=HELLO,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].signature


def test_prompt_caching_is_served(claude_sdk) -> None:
    system = [{"type": "text", "text": "a long shared preamble", "cache_control": {"type": "ephemeral"}}]
    first = claude_sdk.messages.create(model="claude-native", max_tokens=50, system=system, messages=HELLO)
    second = claude_sdk.messages.create(model="claude-native", max_tokens=50, system=system, messages=HELLO)
    assert first.usage.cache_creation_input_tokens == 4
    assert second.usage.cache_read_input_tokens == 4


def test_tokens_are_counted_by_the_native_row(claude_sdk, anth) -> None:
    counted = claude_sdk.messages.count_tokens(model="claude-native", messages=HELLO)
    assert counted.input_tokens == 5
    assert anth.requests_to("/v1/messages/count_tokens")[-1].json["model"] == "claude-upstream"


def test_an_openai_kind_provider_flagged_native_gets_messages_untranslated(claude_sdk, compat) -> None:
    message = claude_sdk.messages.create(
        model="compat-native",
        max_tokens=2048,
        messages=HELLO,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.model == "compat-native"
    sent = compat.requests_to("/v1/messages")[-1]
    assert sent.json["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert compat.requests_to("/v1/chat/completions") == []


def test_a_native_openai_kind_provider_gets_the_configured_version_when_the_client_sends_none(
    gateway, tenant, compat
) -> None:
    reply = httpx.post(
        f"{gateway.base_url}/v1/messages",
        headers={"x-api-key": tenant.api_key},
        timeout=10,
        json={"model": "compat-native", "max_tokens": 50, "messages": HELLO},
    )
    assert reply.status_code == 200, reply.text
    assert compat.requests_to("/v1/messages")[-1].headers["anthropic-version"] == "2023-06-01"


def test_the_anthropic_sdk_streams_a_native_tool_call(claude_sdk) -> None:
    with claude_sdk.messages.stream(
        model="claude-native",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "weather in parallel please"}],
    ) as stream:
        final = stream.get_final_message()
    assert [(b.name, b.input) for b in final.content] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "London"}),
    ]
    assert isinstance(final, anthropic.types.Message)
