"""The Gemini API dialect end to end: the real gateway in front of GeminiFake, driven by the official
`openai` and `anthropic` SDKs. Chat and Messages, plain and streamed, with tools over several turns (the
thought signature goes back with the call), images, usage in the ledger, failover of a throttled host, a
blocked prompt's 400, Gemini's errors in the client's envelope, a malformed answer ending cleanly."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pydantic
import pytest

from tests.fakes.gemini_host import GeminiFake
from tests.fakes.gemini_routes import USAGE
from tests.integration.dialects.google_sdks import anthropic_sdk, openai_sdk
from tests.integration.media.conftest import ledger_row
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

KEYS = ("gemini-key-one", "gemini-key-two")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a text up",
            "parameters": {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {"text": {"type": "string"}, "limit": {"type": ["integer", "null"]}},
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    }
]
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9"
    "awAAAABJRU5ErkJggg=="
)


def gemini_toml(storage_url: str, fake: GeminiFake) -> str:
    return f"""
[storage]
url = "{storage_url}"

[routing]
failure_threshold = 100

[[providers]]
name = "google"
kind = "openai"

[[providers.hosts]]
name = "first"
dialect = "gemini"
base_url = "{fake.base_url}"
api_key = "{KEYS[0]}"

[[providers.hosts]]
name = "second"
dialect = "gemini"
base_url = "{fake.base_url}"
api_key = "{KEYS[1]}"

[[models]]
name = "gem"
kinds = ["chat", "messages", "responses"]
[[models.rows]]
provider = "google"
host = "first"
upstream_model = "gemini-2.5-flash"
[[models.rows]]
provider = "google"
host = "second"
upstream_model = "gemini-2.5-flash"
priority = 1

[[models]]
name = "gem3"
kinds = ["chat", "messages"]
[[models.rows]]
provider = "google"
host = "first"
upstream_model = "gemini-3-pro-preview"

[[models]]
name = "embed"
kinds = ["embeddings"]
[[models.rows]]
provider = "google"
host = "first"
upstream_model = "text-embedding-004"

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[GeminiFake]:
    with GeminiFake(api_keys=KEYS) as server:
        yield server


@pytest.fixture(scope="module")
def running(tmp_path_factory, fake) -> Iterator[tuple[ThreadedGateway, Tenant]]:
    workdir = tmp_path_factory.mktemp("gemini")
    config = write_config(workdir / "gemini.toml", gemini_toml(f"sqlite:///{workdir / 'gw.db'}", fake))
    with ThreadedGateway(config) as gateway:
        yield gateway, register_tenant(gateway.base_url)


@pytest.fixture
def client(running, fake) -> Iterator[openai.OpenAI]:
    with openai_sdk(running, fake) as sdk:
        yield sdk


@pytest.fixture
def claude(running, fake) -> Iterator[anthropic.Anthropic]:
    with anthropic_sdk(running, fake) as sdk:
        yield sdk


def test_chat_reaches_generate_content_with_the_key_and_comes_back_as_a_chat_completion(client, fake) -> None:
    answer = client.chat.completions.create(
        model="gem",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        max_tokens=50,
        temperature=0.2,
        stop=["END"],
    )
    assert answer.choices[0].message.content == "echo: hello"  # the thought part is left out
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.prompt_tokens == USAGE["promptTokenCount"]
    assert answer.usage.completion_tokens == USAGE["candidatesTokenCount"] + USAGE["thoughtsTokenCount"]
    assert answer.usage.prompt_tokens_details.cached_tokens == USAGE["cachedContentTokenCount"]
    [sent] = fake.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == KEYS[0] and "authorization" not in sent.headers
    assert sent.json["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert sent.json["contents"] == [{"role": "user", "parts": [{"text": "hello"}]}]
    config = sent.json["generationConfig"]
    assert config == {"maxOutputTokens": 50, "temperature": 0.2, "stopSequences": ["END"]}


def test_usage_reaches_the_ledger(running, client) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gem", messages=[{"role": "user", "content": "count me"}]
    )
    row = ledger_row(running[0].storage_url, raw.headers["x-request-id"])
    assert row["input_tokens"] == USAGE["promptTokenCount"]
    assert row["output_tokens"] == USAGE["candidatesTokenCount"] + USAGE["thoughtsTokenCount"]


def test_a_streamed_chat_arrives_as_chunks_with_usage_and_done(running, client, fake) -> None:
    stream = client.chat.completions.create(
        model="gem",
        messages=[{"role": "user", "content": "stream this please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: stream this please"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == USAGE["promptTokenCount"]
    [sent] = fake.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent" and sent.query == {
        "alt": "sse"
    }


def test_a_stream_without_include_usage_has_no_usage_chunk(running, client) -> None:
    gateway, tenant = running
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/v1/chat/completions",
        json={"model": "gem", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    ) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        frames = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    assert all(json.loads(f)["choices"] for f in frames[:-1])
    row = ledger_row(gateway.storage_url, reply.headers["x-request-id"])
    assert row["input_tokens"] == USAGE["promptTokenCount"]  # metered all the same


def test_tool_calls_go_round_trip_with_the_thought_signature(client, fake) -> None:
    messages: list = [{"role": "user", "content": "find cats"}]
    first = client.chat.completions.create(model="gem3", messages=messages, tools=TOOLS, tool_choice="auto")
    assert first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "lookup" and json.loads(call.function.arguments) == {"text": "find cats"}
    messages += [first.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "tool", "tool_call_id": call.id, "content": "42 cats"}]
    second = client.chat.completions.create(model="gem3", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "tool said: 42 cats"
    sent = fake.requests
    declaration = sent[0].json["tools"][0]["functionDeclarations"][0]
    assert (
        "additionalProperties" not in declaration["parameters"] and "$schema" not in declaration["parameters"]
    )
    assert declaration["parameters"]["properties"]["limit"] == {"type": "integer", "nullable": True}
    assert sent[0].json["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
    model_turn, answer_turn = sent[1].json["contents"][1:]
    assert model_turn["parts"][0]["thoughtSignature"] in fake.state.signatures  # the fake checked it too
    assert answer_turn["parts"] == [
        {"functionResponse": {"name": "lookup", "response": {"result": "42 cats"}}}
    ]


def test_a_named_tool_choice_is_any_with_that_function(client, fake) -> None:
    client.chat.completions.create(
        model="gem",
        messages=[{"role": "user", "content": "x"}],
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
    )
    config = fake.requests[0].json["toolConfig"]["functionCallingConfig"]
    assert config == {"mode": "ANY", "allowedFunctionNames": ["lookup"]}


def test_streamed_tool_calls_come_as_deltas_with_an_index(client) -> None:
    stream = client.chat.completions.create(
        model="gem", messages=[{"role": "user", "content": "find dogs"}], tools=TOOLS, stream=True
    )
    calls = [t for c in stream if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert [(t.index, t.function.name) for t in calls] == [(0, "lookup")]
    assert calls[0].id.startswith("call_") and json.loads(calls[0].function.arguments) == {
        "text": "find dogs"
    }


def test_an_image_goes_inline(client, fake) -> None:
    content = [{"type": "text", "text": "what is it"}, {"type": "image_url", "image_url": {"url": PNG}}]
    answer = client.chat.completions.create(model="gem", messages=[{"role": "user", "content": content}])
    assert answer.choices[0].message.content == "echo: what is it"
    parts = fake.requests[0].json["contents"][0]["parts"]
    assert parts[1] == {"inlineData": {"mimeType": "image/png", "data": PNG.split(",", 1)[1]}}


def test_an_image_url_of_unknown_type_is_the_clients_400(client, fake) -> None:
    content = [{"type": "image_url", "image_url": {"url": "https://example.com/picture"}}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gem", messages=[{"role": "user", "content": content}])
    assert "media type" in caught.value.message
    assert fake.requests == []


def test_messages_through_the_anthropic_sdk_plain_and_with_tools(claude) -> None:
    message = claude.messages.create(model="gem", max_tokens=30, messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].text == "echo: hi" and message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    tools = [
        {"name": "lookup", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}
    ]
    asked = [{"role": "user", "content": "look up owls"}]
    called = claude.messages.create(model="gem3", max_tokens=30, messages=asked, tools=tools)
    [use] = [b for b in called.content if b.type == "tool_use"]
    assert called.stop_reason == "tool_use" and use.input == {"text": "look up owls"}
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "owls found"}
    asked += [{"role": "assistant", "content": called.content}, {"role": "user", "content": [result]}]
    final = claude.messages.create(model="gem3", max_tokens=30, messages=asked, tools=tools)
    assert final.content[0].text == "tool said: owls found"


def test_messages_streamed_through_the_anthropic_sdk(claude) -> None:
    with claude.messages.stream(
        model="gem", max_tokens=30, messages=[{"role": "user", "content": "hi there"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo: hi there" and final.usage.output_tokens > 0
    tools = [
        {"name": "lookup", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}
    ]
    with claude.messages.stream(
        model="gem", max_tokens=30, messages=[{"role": "user", "content": "owls"}], tools=tools
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == {"text": "owls"}


def test_a_throttled_host_fails_over_to_the_second(client, fake) -> None:
    quota = {"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}}
    fake.add_fault(429, quota)
    answer = client.chat.completions.create(model="gem", messages=[{"role": "user", "content": "again"}])
    assert answer.choices[0].message.content == "echo: again"
    assert [r.headers["x-goog-api-key"] for r in fake.requests] == list(KEYS)


def test_a_blocked_prompt_is_a_clear_400(client) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gem", messages=[{"role": "user", "content": "blocked words"}])
    assert "content filter" in caught.value.message and "SAFETY" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        list(
            client.chat.completions.create(
                model="gem", messages=[{"role": "user", "content": "blocked words"}], stream=True
            )
        )
    assert "content filter" in caught.value.message


def test_a_filtered_answer_finishes_with_content_filter(client) -> None:
    answer = client.chat.completions.create(model="gem", messages=[{"role": "user", "content": "forbidden"}])
    assert answer.choices[0].finish_reason == "content_filter" and answer.choices[0].message.content is None


def test_an_invalid_argument_reaches_the_client_with_geminis_message(client, fake) -> None:
    bad = {"error": {"code": 400, "message": "Invalid value at 'temperature'", "status": "INVALID_ARGUMENT"}}
    fake.add_fault(400, bad)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gem", messages=[{"role": "user", "content": "x"}])
    assert "Invalid value at 'temperature'" in caught.value.message
    assert len(fake.requests) == 1  # the client's fault: no failover


def test_a_malformed_answer_ends_cleanly(client, fake) -> None:
    fake.state.malformed = True
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="gem", messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code in (502, 503)
    with pytest.raises((openai.APIStatusError, openai.APIError)):
        list(
            client.chat.completions.create(
                model="gem", messages=[{"role": "user", "content": "x"}], stream=True
            )
        )


def test_embeddings_go_to_batch_embed_contents(client, fake) -> None:
    answer = client.embeddings.create(model="embed", input=["ab", "abcd"])
    assert [d.embedding[0] for d in answer.data] == [2.0, 4.0]
    assert answer.usage.prompt_tokens == 2  # estimated: Gemini reports none
    assert fake.requests[0].path == "/v1beta/models/text-embedding-004:batchEmbedContents"


def test_a_route_gemini_has_no_call_for_is_a_400(running) -> None:
    gateway, tenant = running
    reply = httpx.post(
        f"{gateway.base_url}/v1/completions",
        json={"model": "gem", "prompt": "hi"},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    )
    assert 400 <= reply.status_code < 500 and reply.status_code != 500


# -- structured output ---------------------------------------------------------------------------------------


class Person(pydantic.BaseModel):
    name: str
    words: int


def test_chat_parse_goes_as_a_response_schema_and_comes_back_parsed(client, fake) -> None:
    reply = client.chat.completions.parse(
        model="gem", messages=[{"role": "user", "content": "Ada wrote programs"}], response_format=Person
    )
    assert reply.choices[0].message.parsed == Person(name="Ada wrote programs", words=3)
    config = fake.requests[-1].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseSchema"]["properties"].keys() == {"name", "words"}
    assert "additionalProperties" not in config["responseSchema"]  # cut to what Gemini accepts


def test_chat_parse_streamed_on_gemini(client) -> None:
    with client.chat.completions.stream(
        model="gem", messages=[{"role": "user", "content": "Ada wrote programs"}], response_format=Person
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.parsed == Person(name="Ada wrote programs", words=3)


def test_json_object_on_gemini_is_json_mime_type_without_a_schema(client, fake) -> None:
    reply = client.chat.completions.create(
        model="gem", messages=[{"role": "user", "content": "hi"}], response_format={"type": "json_object"}
    )
    assert json.loads(reply.choices[0].message.content) == {"text": "hi"}
    config = fake.requests[-1].json["generationConfig"]
    assert config["responseMimeType"] == "application/json" and "responseSchema" not in config


def test_messages_parse_on_gemini_goes_as_a_response_schema(claude, fake) -> None:
    reply = claude.messages.parse(
        model="gem",
        max_tokens=100,
        messages=[{"role": "user", "content": "Ada wrote programs"}],
        output_format=Person,
    )
    assert reply.parsed_output == Person(name="Ada wrote programs", words=3)
    assert fake.requests[-1].json["generationConfig"]["responseSchema"]["required"] == ["name", "words"]


# -- fields (docs/translation-fields.md) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("effort", "config"),
    [
        ("low", {"thinkingBudget": 1024, "includeThoughts": True}),
        ("high", {"thinkingBudget": 24576, "includeThoughts": True}),
        ("none", {"thinkingBudget": 0, "includeThoughts": False}),
    ],
)
def test_reasoning_effort_is_a_thinking_budget_and_thoughts_come_back(client, fake, effort, config) -> None:
    reply = client.chat.completions.create(
        model="gem", messages=[{"role": "user", "content": "hi"}], reasoning_effort=effort
    )
    assert fake.requests[-1].json["generationConfig"]["thinkingConfig"] == config
    assert reply.choices[0].message.content == "echo: hi"
    thoughts = "thinking it over" if config["includeThoughts"] else None
    assert reply.choices[0].message.model_extra.get("reasoning_content") == thoughts
    assert reply.usage.completion_tokens_details.reasoning_tokens == USAGE["thoughtsTokenCount"]


def test_reasoning_effort_on_gemini_3_is_a_thinking_level_streamed_as_reasoning(client, fake) -> None:
    chunks = list(
        client.chat.completions.create(
            model="gem3", messages=[{"role": "user", "content": "hi"}], reasoning_effort="medium", stream=True
        )
    )
    assert fake.requests[-1].json["generationConfig"]["thinkingConfig"] == {
        "thinkingLevel": "high",
        "includeThoughts": True,
    }
    reasoning = "".join(
        c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert reasoning == "thinking it over"


@pytest.mark.parametrize(
    ("field", "value"),
    [("store", True), ("parallel_tool_calls", False), ("metadata", {"a": "b"})],
)
def test_a_field_gemini_cannot_carry_is_refused_naming_the_provider(client, fake, field, value) -> None:
    before = len(fake.requests)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gem", messages=[{"role": "user", "content": "hi"}], extra_body={field: value}
        )
    assert refused.value.body["message"].startswith(f"'{field}' cannot be sent to provider 'google'")
    assert len(fake.requests) == before


def test_the_end_user_hints_are_not_sent_to_gemini(client, fake, claude) -> None:
    client.chat.completions.create(
        model="gem", messages=[{"role": "user", "content": "hi"}], user="u-1", safety_identifier="s-1"
    )
    assert b"u-1" not in fake.requests[-1].body and b"s-1" not in fake.requests[-1].body
    # Claude Code and others always send metadata.user_id: it must not make a Gemini row refuse them.
    message = claude.messages.create(
        model="gem", max_tokens=20, messages=[{"role": "user", "content": "hi"}], metadata={"user_id": "u-2"}
    )
    assert message.content[0].text == "echo: hi"


def test_seed_n_and_penalties_are_generation_config(client, fake) -> None:
    client.chat.completions.create(
        model="gem",
        messages=[{"role": "user", "content": "hi"}],
        seed=5,
        n=2,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        stop=["END"],
    )
    config = fake.requests[-1].json["generationConfig"]
    assert (config["seed"], config["candidateCount"], config["stopSequences"]) == (5, 2, ["END"])
    assert (config["presencePenalty"], config["frequencyPenalty"]) == (0.1, 0.2)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_messages_effort_reaches_gemini_and_its_thoughts_come_back_as_a_thinking_block(
    claude, fake, stream
) -> None:
    asked = {
        "model": "gem",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "output_config": {"effort": "medium"},
    }
    if stream:
        with claude.messages.stream(**asked) as events:
            message = events.get_final_message()
    else:
        message = claude.messages.create(**asked)
    assert fake.requests[-1].json["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 8192
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert (message.content[0].thinking, message.content[1].text) == ("thinking it over", "echo: hi")


# -- the Responses API, translated to chat, then to generateContent -----------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_responses_parse_goes_as_a_response_schema(client, fake, stream: bool) -> None:
    if stream:
        with client.responses.stream(model="gem", input="Ada wrote programs", text_format=Person) as events:
            kinds = [event.type for event in events]
            response = events.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    else:
        response = client.responses.parse(model="gem", input="Ada wrote programs", text_format=Person)
    assert response.output_parsed == Person(name="Ada wrote programs", words=3)
    config = fake.requests[-1].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseSchema"]["properties"].keys() == {"name", "words"}
    assert response.usage.input_tokens == USAGE["promptTokenCount"]


def test_responses_reasoning_is_a_thinking_budget_and_comes_back_as_a_reasoning_item(client, fake) -> None:
    response = client.responses.create(model="gem", input="hi", reasoning={"effort": "low"})
    assert fake.requests[-1].json["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 1024
    assert [item.type for item in response.output] == ["reasoning", "message"]


LOGPROBS = ["message.output_text.logprobs"]


def test_responses_logprobs_are_gemini_logprobs_on_the_output_text(client, fake) -> None:
    response = client.responses.create(model="gem", input="one two", include=LOGPROBS, top_logprobs=2)
    config = fake.requests[-1].json["generationConfig"]
    assert (config["responseLogprobs"], config["logprobs"]) == (True, 2)
    [part] = response.output[0].content
    assert [(t.token, t.logprob) for t in part.logprobs] == [("echo:", 0.0), (" one", -0.5), (" two", -1.0)]
    assert [alt.token for alt in part.logprobs[2].top_logprobs] == [" two", "alt1"]


def test_streamed_responses_logprobs_come_with_the_deltas_and_the_done_text(client) -> None:
    with client.responses.stream(model="gem", input="one two", include=LOGPROBS) as stream:
        deltas = [t.token for e in stream if e.type == "response.output_text.delta" for t in e.logprobs]
        final = stream.get_final_response()
    assert "".join(deltas) == "echo: one two"
    assert [t.token for t in final.output[0].content[0].logprobs] == deltas


def test_other_responses_include_values_are_refused_naming_the_provider(client, fake) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gem", input="hi", include=["reasoning.encrypted_content"])
    assert refused.value.body["message"].startswith("'include' cannot be sent to provider 'google'")
    assert fake.requests == []


# -- log probabilities ---------------------------------------------------------------------------------------


def test_logprobs_are_response_logprobs_and_come_back_per_token(client, fake) -> None:
    reply = client.chat.completions.create(
        model="gem", messages=[{"role": "user", "content": "one two"}], logprobs=True, top_logprobs=2
    )
    config = fake.requests[-1].json["generationConfig"]
    assert (config["responseLogprobs"], config["logprobs"]) == (True, 2)
    content = reply.choices[0].logprobs.content
    assert "".join(token.token for token in content) == reply.choices[0].message.content == "echo: one two"
    assert [token.logprob for token in content] == [0.0, -0.5, -1.0]
    assert content[1].bytes == list(content[1].token.encode())
    assert [(alt.token, alt.logprob) for alt in content[1].top_logprobs] == [(" one", -0.5), ("alt1", -1.5)]


def test_logprobs_without_alternatives_send_no_logprobs_count(client, fake) -> None:
    reply = client.chat.completions.create(
        model="gem", messages=[{"role": "user", "content": "hi"}], logprobs=True
    )
    assert "logprobs" not in fake.requests[-1].json["generationConfig"]
    assert [token.top_logprobs for token in reply.choices[0].logprobs.content] == [[], []]


def test_streamed_logprobs_arrive_with_the_chunks(client) -> None:
    chunks = list(
        client.chat.completions.create(
            model="gem", messages=[{"role": "user", "content": "one two"}], logprobs=True, stream=True
        )
    )
    tokens = [
        t.token for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content
    ]
    assert "".join(tokens) == "echo: one two"


def test_top_logprobs_without_logprobs_is_a_400_and_nothing_is_sent(client, fake) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gem", messages=[{"role": "user", "content": "hi"}], top_logprobs=2
        )
    assert "'top_logprobs' requires 'logprobs'" in refused.value.body["message"]
    assert fake.requests == []


def test_a_responses_input_file_goes_inline_and_a_file_by_id_is_refused(client, fake) -> None:
    pdf = "data:application/pdf;base64,JVBERi0xLjQK"
    part = {"type": "input_file", "file_data": pdf, "filename": "a.pdf"}
    client.responses.create(
        model="gem", input=[{"role": "user", "content": [{"type": "input_text", "text": "read"}, part]}]
    )
    parts = fake.requests[-1].json["contents"][0]["parts"]
    assert parts[1] == {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0xLjQK"}}
    sent_before = len(fake.requests)
    by_id = {"type": "input_file", "file_id": "file-123"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gem", input=[{"role": "user", "content": [by_id]}])
    assert refused.value.body["message"].startswith("'input' cannot be sent to provider 'google'")
    assert len(fake.requests) == sent_before
