"""The fake upstreams speak OpenAI and Anthropic well enough for the official SDKs, and misbehave on cue."""

from __future__ import annotations

import base64
import math
import struct
import time
from collections.abc import Iterator

import anthropic
import httpx2
import openai
import orjson
import pytest

from tests.fakes import FakeUpstream, Fault

KEY = "sk-fake-test-key"
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CLAUDE_TOOL = {"name": "get_weather", "input_schema": {"type": "object"}}


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream("primary", api_key=KEY) as server:
        yield server


@pytest.fixture
def oai(fake: FakeUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture
def claude(fake: FakeUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.base_url, api_key=KEY, max_retries=0)


@pytest.fixture
def http(fake: FakeUpstream) -> Iterator[httpx2.Client]:
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx2.Client(base_url=fake.base_url, headers=auth, timeout=5) as client:
        yield client


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def stream_chat(text: str = "one two three") -> dict:
    return {"model": "gpt-4o-mini", "stream": True, "messages": user(text)}


def data_lines(lines: Iterator[str]) -> list[str]:
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]


# -- OpenAI chat ---------------------------------------------------------------------------------------


def test_chat_echoes_last_user_message_with_word_usage(oai: openai.OpenAI) -> None:
    raw = oai.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
        ],
    )
    completion = raw.parse()
    assert raw.headers["x-fake-upstream"] == "primary"
    assert completion.choices[0].message.content == "echo: hello there"
    assert completion.model == "gpt-4o-mini"
    assert completion.choices[0].finish_reason == "stop"
    # 2 + 2 words, 3 per message; reply "echo: hello there" is 3 words.
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (10, 3)
    assert completion.usage.total_tokens == 13


def test_chat_max_tokens_truncates_with_length_finish(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model="m", max_completion_tokens=2, messages=[{"role": "user", "content": "a b c d"}]
    )
    assert completion.choices[0].message.content == "echo: a"
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 2


def test_chat_stop_sequence_cuts_before_it(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model="m", stop=["END"], messages=[{"role": "user", "content": "keep this END not this"}]
    )
    assert completion.choices[0].message.content == "echo: keep this "
    assert completion.choices[0].finish_reason == "stop"


def test_chat_stream_sends_a_chunk_per_word_then_usage(oai: openai.OpenAI) -> None:
    chunks = list(
        oai.chat.completions.create(
            model="m",
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "one two three"}],
        )
    )
    words = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert [c.choices[0].delta.content for c in words] == ["echo:", " one", " two", " three"]
    assert words[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4


def test_chat_stream_ends_with_done_marker(http: httpx2.Client) -> None:
    with http.stream("POST", CHAT, json=stream_chat()) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = data_lines(response.iter_lines())
    assert frames[-1] == "[DONE]"
    assert orjson.loads(frames[-2])["choices"][0]["finish_reason"] == "stop"


def test_weather_prompt_with_tools_gets_parallel_tool_calls(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model="m", tools=[WEATHER_TOOL], messages=[{"role": "user", "content": "weather in parallel?"}]
    )
    calls = completion.choices[0].message.tool_calls
    assert completion.choices[0].finish_reason == "tool_calls"
    assert [orjson.loads(c.function.arguments) for c in calls] == [{"city": "Paris"}, {"city": "London"}]
    assert {c.function.name for c in calls} == {"get_weather"}


def test_streamed_tool_call_arguments_arrive_in_fragments(oai: openai.OpenAI) -> None:
    chunks = list(
        oai.chat.completions.create(
            model="m", stream=True, tools=[WEATHER_TOOL], messages=[{"role": "user", "content": "weather?"}]
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert deltas[0].id and deltas[0].function.name == "get_weather"
    fragments = [d.function.arguments for d in deltas[1:]]
    assert len(fragments) > 1 and orjson.loads("".join(fragments)) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_legacy_completion_plain_and_streamed(oai: openai.OpenAI) -> None:
    completion = oai.completions.create(model="m", prompt="say this")
    assert completion.choices[0].text == "echo: say this"
    assert completion.usage.prompt_tokens == 2
    chunks = oai.completions.create(model="m", prompt="x y", stream=True)
    assert "".join(c.choices[0].text for c in chunks) == "echo: x y"


# -- OpenAI embeddings, responses, models, decisions ---------------------------------------------------


def test_embeddings_are_deterministic_unit_vectors_in_both_encodings(oai: openai.OpenAI) -> None:
    decoded = oai.embeddings.create(model="e", input=["alpha beta", "gamma"])  # SDK asks for base64
    floats = oai.embeddings.create(model="e", input=["alpha beta", "gamma"], encoding_format="float")
    assert [d.embedding for d in decoded.data] == [d.embedding for d in floats.data]
    assert decoded.data[0].embedding != decoded.data[1].embedding
    assert math.isclose(math.fsum(v * v for v in floats.data[0].embedding), 1.0, rel_tol=1e-5)
    assert decoded.usage.prompt_tokens == 3
    assert len(oai.embeddings.create(model="e", input="x", dimensions=20).data[0].embedding) == 20


def test_embeddings_base64_is_little_endian_float32(http: httpx2.Client) -> None:
    body = {"model": "e", "input": "gamma", "encoding_format": "base64"}
    encoded = http.post("/v1/embeddings", json=body).json()["data"][0]["embedding"]
    plain = http.post("/v1/embeddings", json={**body, "encoding_format": "float"}).json()
    assert list(struct.unpack("<8f", base64.b64decode(encoded))) == plain["data"][0]["embedding"]


def test_responses_create_retrieve_delete(oai: openai.OpenAI, http: httpx2.Client) -> None:
    created = oai.responses.create(model="gpt-4o-mini", input="store me")
    assert created.id.startswith("resp_") and created.output_text == "echo: store me"
    assert created.usage.input_tokens == 5 and created.usage.output_tokens == 3
    raw = http.get(f"/v1/responses/{created.id}").json()
    assert "output_text" not in raw and raw["object"] == "response"
    assert oai.responses.retrieve(created.id).output_text == "echo: store me"
    deleted = http.delete(f"/v1/responses/{created.id}").json()
    assert deleted == {"id": created.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(created.id)


def test_follow_up_to_unknown_previous_response_is_rejected(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model="m", input="next", previous_response_id="resp_elsewhere")


def test_responses_stream_yields_word_deltas_then_completed(oai: openai.OpenAI) -> None:
    with oai.responses.stream(model="m", input="stream me") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas == ["echo:", " stream", " me"]
    assert final.output_text == "echo: stream me" and final.usage.total_tokens == 8


def test_models_list_in_each_vendor_shape(oai: openai.OpenAI, claude: anthropic.Anthropic) -> None:
    assert "gpt-4o-mini" in [m.id for m in oai.models.list().data]
    page = claude.models.list()
    assert page.data[0].type == "model" and "claude-sonnet-4-6" in [m.id for m in page.data]


def test_decisions_answer_each_question_type(http: httpx2.Client) -> None:
    questions = [
        {"id": "ok", "type": "boolean"},
        {"id": "pick", "type": "choice", "options": ["b", "c"]},
        {"id": "n", "type": "number"},
        {"id": "why", "type": "text"},
    ]
    body = {"model": "d", "state": {"a": 1}, "questions": questions}
    decision = http.post("/v1/decisions", json=body).json()
    assert decision["object"] == "decision" and decision["id"].startswith("dec_")
    assert [(a["question_id"], a["value"]) for a in decision["answers"]] == [
        ("ok", True),
        ("pick", "b"),
        ("n", 1),
        ("why", "ok"),
    ]
    assert decision["usage"]["total_tokens"] == decision["usage"]["input_tokens"] + 4


def test_decisions_parse_in_the_sdk(oai: openai.OpenAI) -> None:
    decision = oai.decisions.create(
        model="d",
        input="is it",
        questions=[
            {"type": "predicate", "instructions": "true?"},
            {"type": "choice", "instructions": "pick", "choices": [{"value": "x"}, {"value": "y"}]},
        ],
    )
    assert decision.answers[0].type == "predicate" and decision.answers[1].choice == "x"


# -- Anthropic -----------------------------------------------------------------------------------------


def test_messages_create_echoes_with_usage(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="claude-sonnet-4-6", max_tokens=50, system="short", messages=user("hi you")
    )
    assert message.content[0].type == "text" and message.content[0].text == "echo: hi you"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (6, 3)
    assert message.usage.cache_read_input_tokens == 0


def test_messages_stop_sequence_and_max_tokens(claude: anthropic.Anthropic) -> None:
    stopped = claude.messages.create(
        model="c", max_tokens=50, stop_sequences=["##"], messages=[{"role": "user", "content": "a ## b"}]
    )
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "##"
    assert stopped.content[0].text == "echo: a "
    cut = claude.messages.create(model="c", max_tokens=1, messages=[{"role": "user", "content": "a b"}])
    assert (cut.stop_reason, cut.content[0].text) == ("max_tokens", "echo:")


def test_messages_stream_helper_builds_the_final_message(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model="c", max_tokens=50, messages=user("x y")) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert texts == ["echo:", " x", " y"]
    assert final.content[0].text == "echo: x y" and final.usage.output_tokens == 3
    assert final.stop_reason == "end_turn"


def test_streamed_thinking_and_tool_use(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="c",
        max_tokens=500,
        thinking={"type": "enabled", "budget_tokens": 100},
        tools=[CLAUDE_TOOL],
        messages=[{"role": "user", "content": "weather please"}],
    ) as stream:
        final = stream.get_final_message()
    thinking, tool = final.content
    assert thinking.type == "thinking" and thinking.signature and "weather please" in thinking.thinking
    assert tool.type == "tool_use" and tool.input == {"city": "Paris"} and tool.name == "get_weather"
    assert final.stop_reason == "tool_use"


def test_missing_max_tokens_is_an_anthropic_400(http: httpx2.Client) -> None:
    response = http.post(
        MESSAGES,
        headers={"anthropic-version": "2023-06-01"},
        json={"model": "c", "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_count_tokens_and_prompt_cache_write_then_read(claude: anthropic.Anthropic) -> None:
    system = [{"type": "text", "text": "long shared context here", "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": "q"}]
    assert claude.messages.count_tokens(model="c", system=system, messages=messages).input_tokens == 8
    first = claude.messages.create(model="c", max_tokens=9, system=system, messages=messages).usage
    second = claude.messages.create(model="c", max_tokens=9, system=system, messages=messages).usage
    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens, first.input_tokens) == (4, 0, 4)
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (0, 4)


# -- auth, recording, routing --------------------------------------------------------------------------


def test_wrong_keys_get_401_in_each_vendor_shape(fake: FakeUpstream) -> None:
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=fake.base_url + "/v1", api_key="nope", max_retries=0).models.list()
    response = httpx2.post(
        fake.base_url + MESSAGES,
        headers={"x-api-key": "nope", "anthropic-version": "1"},
        json={"model": "c", "max_tokens": 5, "messages": []},
    )
    assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"


def test_anthropic_accepts_x_api_key_but_needs_a_version_header(fake: FakeUpstream) -> None:
    body = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    url = fake.base_url + MESSAGES
    ok = httpx2.post(url, headers={"x-api-key": KEY, "anthropic-version": "1"}, json=body)
    unversioned = httpx2.post(url, headers={"x-api-key": KEY}, json=body)
    assert ok.status_code == 200 and unversioned.status_code == 401


def test_requests_are_recorded_and_clearable(fake: FakeUpstream, http: httpx2.Client) -> None:
    http.post(
        CHAT,
        params={"trace": "1"},
        headers={"X-Custom": "v"},
        json={"model": "m", "messages": [{"role": "user", "content": "rec"}]},
    )
    http.get("/v1/models")
    (record,) = fake.requests_to(CHAT)
    assert (record.method, record.query, record.headers["x-custom"]) == ("POST", {"trace": "1"}, "v")
    assert record.json["messages"][0]["content"] == "rec" and orjson.loads(record.body) == record.json
    assert [r.path for r in fake.requests] == [CHAT, "/v1/models"]
    fake.clear()
    assert fake.requests == []


def test_unknown_route_is_an_openai_404_from_the_named_fake(http: httpx2.Client) -> None:
    response = http.post("/v1/assistants", json={})
    assert response.status_code == 404 and "error" in response.json()
    assert response.headers["x-fake-upstream"] == "primary"


def test_two_fakes_are_told_apart_by_header() -> None:
    with FakeUpstream("a") as first, FakeUpstream("b") as second:
        assert first.port != second.port
        assert httpx2.get(first.base_url + "/v1/models").headers["x-fake-upstream"] == "a"
        assert httpx2.get(second.base_url + "/v1/models").headers["x-fake-upstream"] == "b"


# -- faults --------------------------------------------------------------------------------------------


def test_status_fault_uses_the_vendor_envelope_once(fake: FakeUpstream, http: httpx2.Client) -> None:
    fake.add_fault(CHAT, Fault(status=503))
    fake.add_fault(MESSAGES, Fault(status=529, headers={"retry-after": "7"}))
    failed = http.post(CHAT, json=stream_chat())
    assert failed.status_code == 503 and failed.json()["error"]["type"] == "server_error"
    assert http.post(CHAT, json=stream_chat()).status_code == 200
    overloaded = http.post(MESSAGES, headers={"anthropic-version": "1"}, json={})
    assert overloaded.status_code == 529 and overloaded.headers["retry-after"] == "7"
    assert overloaded.json()["error"]["type"] == "overloaded_error"


def test_fault_times_and_forever_until_cleared(fake: FakeUpstream, http: httpx2.Client) -> None:
    fake.add_fault(CHAT, Fault(status=429, body={"error": {"message": "slow down"}}), times=2)
    fake.add_fault(CHAT, Fault(status=500), times=-1)
    codes = [http.post(CHAT, json=stream_chat()).status_code for _ in range(4)]
    assert codes == [429, 429, 500, 500]
    fake.clear_faults()
    assert http.post(CHAT, json=stream_chat()).status_code == 200


def test_ignore_output_cap_answers_past_max_tokens_once(fake: FakeUpstream, oai: openai.OpenAI) -> None:
    fake.add_fault(CHAT, Fault(ignore_output_cap=True))
    ask = {"model": "m", "max_tokens": 1, "messages": user("a b c d")}
    overrun = oai.chat.completions.create(**ask)
    assert overrun.choices[0].message.content == "echo: a b c d"
    assert overrun.usage.completion_tokens == 5
    assert oai.chat.completions.create(**ask).choices[0].message.content == "echo:"


def test_hold_gate_shows_first_chunk_before_upstream_ends(fake: FakeUpstream, http: httpx2.Client) -> None:
    fake.add_fault(CHAT, Fault(hold_before_last_chunk="tail"))
    with http.stream("POST", CHAT, json=stream_chat()) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert fake.wait_held("tail") and fake.active_streams == 1
        fake.release("tail")
        rest = data_lines(lines)
    assert orjson.loads(first.removeprefix("data: "))["choices"][0]["delta"]["role"] == "assistant"
    assert rest[-1] == "[DONE]" and '"finish_reason":"stop"' in rest[-2]
    assert fake.wait_active_streams(0)


def test_release_before_the_stream_reaches_the_gate(fake: FakeUpstream, http: httpx2.Client) -> None:
    fake.release("early")
    fake.add_fault(CHAT, Fault(hold_before_last_chunk="early"))
    with http.stream("POST", CHAT, json=stream_chat()) as response:
        assert data_lines(response.iter_lines())[-1] == "[DONE]"


def test_disconnect_after_chunks_cuts_the_stream(fake: FakeUpstream, http: httpx2.Client) -> None:
    fake.add_fault(CHAT, Fault(disconnect_after_chunks=2))
    received: list[str] = []
    with pytest.raises(httpx2.RemoteProtocolError):
        with http.stream("POST", CHAT, json=stream_chat()) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    received.append(line)
    assert len(received) == 2 and "[DONE]" not in received
    assert fake.cancelled_count == 0  # the server hung up, not the client


def test_client_leaving_a_held_stream_counts_as_cancelled(fake: FakeUpstream, http: httpx2.Client) -> None:
    fake.add_fault(CHAT, Fault(hold_before_last_chunk="never"))
    with http.stream("POST", CHAT, json=stream_chat()) as response:
        lines = response.iter_lines()  # kept: dropping the iterator would already close the response
        next(lines)
        assert fake.wait_held("never")
    assert fake.wait_cancelled(1)
    assert fake.wait_active_streams(0)


def test_hang_until_the_client_gives_up(fake: FakeUpstream, http: httpx2.Client) -> None:
    fake.add_fault(MESSAGES, Fault(hang=True))
    with pytest.raises(httpx2.ReadTimeout):
        http.post(MESSAGES, json={}, headers={"anthropic-version": "1"}, timeout=httpx2.Timeout(5, read=0.3))
    assert fake.wait_cancelled(1)


def test_delays_hold_back_headers_and_space_out_chunks(fake: FakeUpstream, http: httpx2.Client) -> None:
    fake.add_fault(CHAT, Fault(delay_before_headers=0.2, chunk_delay=0.05))
    started = time.monotonic()
    with http.stream("POST", CHAT, json=stream_chat("a b")) as response:
        headers_after = time.monotonic() - started
        frames = data_lines(response.iter_lines())
    total = time.monotonic() - started
    assert headers_after >= 0.2
    assert total >= 0.2 + 0.05 * (len(frames) - 1)


def test_stop_ends_a_held_stream_promptly() -> None:
    server = FakeUpstream("stopping").start()
    server.add_fault(CHAT, Fault(hold_before_last_chunk="forever"))
    with httpx2.Client(base_url=server.base_url, timeout=5) as client:
        with client.stream("POST", CHAT, json=stream_chat()) as response:
            lines = response.iter_lines()
            next(lines)
            assert server.wait_held("forever")
            started = time.monotonic()
            server.stop()
            with pytest.raises(httpx2.RemoteProtocolError):
                list(lines)
    assert time.monotonic() - started < 5
