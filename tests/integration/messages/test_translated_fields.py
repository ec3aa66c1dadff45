"""Request fields across the two families through the real gateway (docs/translation-fields.md): each
translated field reaches the fake provider as the matrix says, each refused one is the client's 400 naming
the field and the row's provider (envelope A on chat, B on /v1/messages), and nothing is sent upstream."""

from __future__ import annotations

import anthropic
import openai
import pydantic
import pytest

MESSAGES_PATH = "/v1/messages"
CHAT_PATH = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello there"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def sent_messages(anth) -> dict:
    return anth.requests_to(MESSAGES_PATH)[-1].json


def sent_chat(oai) -> dict:
    return oai.requests_to(CHAT_PATH)[-1].json


# -- chat on Anthropic-kind rows: refusals ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seed", 7),
        ("n", 2),
        ("logprobs", True),
        ("top_logprobs", 3),
        ("store", True),
        ("metadata", {"team": "a"}),
        ("modalities", ["text", "audio"]),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("prediction", {"type": "content", "content": "hello"}),
        ("frequency_penalty", 0.5),
        ("presence_penalty", 0.5),
        ("logit_bias", {"1": 5}),
        ("verbosity", "low"),
        ("prompt_cache_key", "k"),
    ],
)
def test_a_field_messages_cannot_carry_is_refused_naming_it_and_the_provider(
    openai_sdk, anth, field: str, value
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, extra_body={field: value})
    assert refused.value.status_code == 400
    assert refused.value.body["type"] == "invalid_request_error"
    assert refused.value.body["message"].startswith(f"'{field}' cannot be sent to provider 'claude'")
    assert anth.requests_to(MESSAGES_PATH) == []


def test_a_flex_service_tier_is_refused_before_it_reaches_messages(openai_sdk, anth) -> None:
    # Messages has no flex tier; the price sheet of this model prices none either, so the service_tiers step
    # refuses it first (before anything is reserved), naming the field.
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, service_tier="flex")
    assert refused.value.status_code == 400
    assert "'service_tier'" in refused.value.body["message"]
    assert anth.requests_to(MESSAGES_PATH) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("n", 1), ("logprobs", False), ("store", False), ("modalities", ["text"]), ("frequency_penalty", 0)],
)
def test_the_values_that_change_nothing_are_accepted(openai_sdk, anth, field: str, value) -> None:
    reply = openai_sdk.chat.completions.create(
        model="claude-native", messages=HELLO, extra_body={field: value}
    )
    assert reply.choices[0].message.content == "echo: hello there"
    assert field not in sent_messages(anth)


def test_an_unknown_field_is_refused_rather_than_dropped(openai_sdk, anth) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, extra_body={"top_kk": 3})
    assert refused.value.body["message"] == "'top_kk' cannot be sent to provider 'claude': unknown field"


def test_an_audio_input_part_is_refused(openai_sdk, anth) -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.chat.completions.create(
            model="claude-native", messages=[{"role": "user", "content": [audio]}]
        )
    assert "input_audio" in refused.value.body["message"]
    assert anth.requests_to(MESSAGES_PATH) == []


# -- chat on Anthropic-kind rows: translations --------------------------------------------------------------


def test_safety_identifier_becomes_the_user_id(openai_sdk, anth) -> None:
    openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, safety_identifier="hash-1")
    assert sent_messages(anth)["metadata"] == {"user_id": "hash-1"}


@pytest.mark.parametrize(("tier", "sent"), [("auto", "auto"), ("default", "standard_only")])
def test_service_tier_becomes_the_messages_tier(openai_sdk, anth, tier: str, sent: str) -> None:
    openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, service_tier=tier)
    assert sent_messages(anth)["service_tier"] == sent


@pytest.mark.parametrize(
    ("choice", "parallel", "sent"),
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            None,
            {"type": "tool", "name": "get_weather"},
        ),
        ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
def test_each_tool_choice_variant_reaches_messages(openai_sdk, anth, choice, parallel, sent) -> None:
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    if choice is not None:
        extra["tool_choice"] = choice
    openai_sdk.chat.completions.create(
        model="claude-native", messages=HELLO, tools=[WEATHER], extra_body=extra
    )
    assert sent_messages(anth)["tool_choice"] == sent


def test_an_image_by_url_and_inline_reach_messages_as_sources(openai_sdk, anth) -> None:
    parts = [
        {"type": "text", "text": "two images"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    openai_sdk.chat.completions.create(model="claude-native", messages=[{"role": "user", "content": parts}])
    blocks = sent_messages(anth)["messages"][0]["content"]
    assert blocks[1] == {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    assert blocks[2] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }


def test_a_stop_sequence_ends_the_chat_answer_with_stop(openai_sdk, anth) -> None:
    reply = openai_sdk.chat.completions.create(
        model="claude-native", messages=[{"role": "user", "content": "one two STOP three"}], stop="STOP"
    )
    assert reply.choices[0].message.content == "echo: one two "
    assert reply.choices[0].finish_reason == "stop"
    assert sent_messages(anth)["stop_sequences"] == ["STOP"]


def test_reasoning_effort_is_a_thinking_budget_and_the_thinking_comes_back(openai_sdk, anth) -> None:
    reply = openai_sdk.chat.completions.create(
        model="claude-native", messages=HELLO, reasoning_effort="medium", max_completion_tokens=9000
    )
    assert sent_messages(anth)["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    message = reply.choices[0].message
    assert message.content == "echo: hello there"
    assert message.model_extra["reasoning_content"] == "Thinking about: hello there"


def test_streamed_reasoning_arrives_as_reasoning_content_deltas(openai_sdk) -> None:
    chunks = list(
        openai_sdk.chat.completions.create(
            model="claude-native", messages=HELLO, reasoning_effort="low", stream=True
        )
    )
    reasoning = "".join(
        c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert reasoning == "Thinking about: hello there"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: hello there"


def test_the_thinking_budget_fits_in_the_limit_and_a_limit_too_small_is_refused(openai_sdk, anth) -> None:
    openai_sdk.chat.completions.create(
        model="claude-native", messages=HELLO, reasoning_effort="high", max_completion_tokens=2000
    )
    assert sent_messages(anth)["thinking"] == {"type": "enabled", "budget_tokens": 1999}
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.chat.completions.create(
            model="claude-native", messages=HELLO, reasoning_effort="low", max_completion_tokens=800
        )
    assert refused.value.body["message"].startswith("'reasoning_effort' cannot be sent to provider 'claude'")


def test_reasoning_effort_none_sends_no_thinking(openai_sdk, anth) -> None:
    openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, reasoning_effort="none")
    assert "thinking" not in sent_messages(anth)


def test_a_temperature_while_thinking_is_refused(openai_sdk, anth) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.chat.completions.create(
            model="claude-native", messages=HELLO, reasoning_effort="low", temperature=0.3
        )
    assert refused.value.body["message"].startswith("'temperature' cannot be sent to provider 'claude'")
    assert anth.requests_to(MESSAGES_PATH) == []


class City(pydantic.BaseModel):
    name: str


def test_structured_output_while_thinking_is_claudes_own_output_format(openai_sdk, anth) -> None:
    reply = openai_sdk.chat.completions.parse(
        model="claude-native", messages=HELLO, response_format=City, reasoning_effort="low"
    )
    assert reply.choices[0].message.parsed == City(name="hello there")
    sent = sent_messages(anth)
    assert sent["output_config"]["format"]["schema"]["properties"] == {
        "name": {"title": "Name", "type": "string"}
    }
    assert "tool_choice" not in sent


# -- Messages on OpenAI-kind rows ----------------------------------------------------------------------------


def test_top_k_is_refused_in_envelope_b_naming_the_provider(http, oai) -> None:
    answer = http.post(
        MESSAGES_PATH, json={"model": "gpt-translated", "max_tokens": 10, "messages": HELLO, "top_k": 5}
    )
    assert answer.status_code == 400
    assert answer.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "'top_k' cannot be sent to provider 'openai': chat has no top_k (refused when set)",
        },
    }
    assert oai.requests_to(CHAT_PATH) == []


def test_metadata_user_id_becomes_user_and_effort_becomes_reasoning_effort(claude_sdk, oai) -> None:
    claude_sdk.messages.create(
        model="gpt-translated",
        max_tokens=50,
        messages=HELLO,
        metadata={"user_id": "u-7"},
        output_config={"effort": "high"},
        service_tier="standard_only",
    )
    sent = sent_chat(oai)
    assert (sent["user"], sent["reasoning_effort"], sent["service_tier"]) == ("u-7", "high", "default")


def test_a_native_only_field_on_openai_rows_is_refused(claude_sdk, oai) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude_sdk.messages.create(model="gpt-translated", max_tokens=50, messages=HELLO, inference_geo="us")
    assert refused.value.body["error"]["message"].startswith(
        "'inference_geo' cannot be sent to provider 'openai'"
    )
    assert oai.requests_to(CHAT_PATH) == []
