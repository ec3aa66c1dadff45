"""The chat <-> Gemini conversion: requests (system, roles, images, tools and their schema, tool choice,
generation config, multi-turn tool calls with thought signatures), answers (choices, tool calls, finish
reasons, usage), the stream (split at every byte), errors and a blocked prompt."""

from __future__ import annotations

import base64

import orjson
import pytest

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.upstream.dialects.gemini_answers import (
    ChatChunks,
    blocked_prompt,
    chat_completion,
    error_answer,
    finish_reason_of,
    usage_of,
)
from modelgate.proxy.upstream.dialects.gemini_format import (
    call_id_with_signature,
    gemini_request,
    signature_of,
)
from modelgate.proxy.upstream.dialects.gemini_schema import gemini_schema
from modelgate.proxy.upstream.http_client import UpstreamBrokeOff

SIGNATURE = base64.b64encode(bytes(range(40))).decode()
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
METADATA = {
    "promptTokenCount": 20,
    "candidatesTokenCount": 7,
    "thoughtsTokenCount": 5,
    "cachedContentTokenCount": 12,
    "totalTokenCount": 32,
}


def _request(**payload: object) -> dict:
    return gemini_request({"model": "gemini-2.5-flash", **payload})


# -- requests ----------------------------------------------------------------------------------------


def test_system_and_developer_messages_become_the_system_instruction() -> None:
    body = _request(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
            {"role": "user", "content": "hello"},
        ]
    )
    assert body["systemInstruction"]["parts"] == [{"text": "Be brief."}, {"text": "Use French."}]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hello"}]}]


def test_multi_turn_roles_are_user_and_model_and_consecutive_turns_merge() -> None:
    body = _request(
        messages=[
            {"role": "user", "content": "one"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "three"},
            {"role": "user", "content": "four"},
        ]
    )
    assert [(c["role"], c["parts"]) for c in body["contents"]] == [
        ("user", [{"text": "one"}, {"text": "two"}]),
        ("model", [{"text": "three"}]),
        ("user", [{"text": "four"}]),
    ]


def test_images_go_inline_or_by_uri_with_a_guessed_type() -> None:
    content = [
        {"type": "text", "text": "compare"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png?size=2"}},
    ]
    parts = _request(messages=[{"role": "user", "content": content}])["contents"][0]["parts"]
    assert parts[1] == {"inlineData": {"mimeType": "image/jpeg", "data": "AAAA"}}
    assert parts[2] == {
        "fileData": {"mimeType": "image/png", "fileUri": "https://example.com/cat.png?size=2"}
    }


@pytest.mark.parametrize(
    "url", ["https://example.com/picture", "data:image/png,notbase64", "ftp://example.com/a.png", ""]
)
def test_an_image_gemini_cannot_take_is_refused_clearly(url: str) -> None:
    content = [{"type": "image_url", "image_url": {"url": url}}]
    with pytest.raises(InvalidRequest):
        _request(messages=[{"role": "user", "content": content}])


def test_tools_become_function_declarations_and_tool_choice_the_calling_config() -> None:
    empty = {
        "type": "function",
        "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
    }
    body = _request(
        messages=[{"role": "user", "content": "x"}], tools=[WEATHER, empty], tool_choice="required"
    )
    declarations = body["tools"][0]["functionDeclarations"]
    assert declarations[0] == {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    assert declarations[1] == {"name": "now"}  # Gemini refuses an object schema without properties
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["weather"]},
        ),
    ],
)
def test_each_tool_choice(choice: object, config: dict) -> None:
    body = _request(messages=[{"role": "user", "content": "x"}], tools=[WEATHER], tool_choice=choice)
    assert body["toolConfig"]["functionCallingConfig"] == config


def test_a_tool_call_and_its_result_go_back_as_function_call_and_response_with_the_signature() -> None:
    call_id = call_id_with_signature("call_abc", SIGNATURE)
    body = _request(
        messages=[
            {"role": "user", "content": "weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": '{"temp": 21}'},
            {"role": "tool", "tool_call_id": "call_2", "content": "sunny"},
        ],
        tools=[WEATHER],
    )
    model, answers = body["contents"][1:]
    assert model == {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE},
            {"functionCall": {"name": "weather", "args": {"city": "Rome"}}},
        ],
    }
    assert answers == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "weather", "response": {"temp": 21}}},
            {"functionResponse": {"name": "weather", "response": {"result": "sunny"}}},
        ],
    }


def test_a_gemini_3_call_without_a_signature_gets_googles_stand_in() -> None:
    call = {"id": "call_x", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    body = gemini_request(
        {
            "model": "gemini-3-pro-preview",
            "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}],
        }
    )
    assert body["contents"][1]["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"


def test_a_signature_survives_the_round_trip_through_an_id() -> None:
    call_id = call_id_with_signature("call_1", SIGNATURE)
    assert call_id.startswith("call_1__ts_") and all(c.isalnum() or c in "_-" for c in call_id)
    assert signature_of(call_id) == SIGNATURE
    assert signature_of("call_1") is None
    assert call_id_with_signature("call_1", None) == "call_1"


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "tool", "tool_call_id": "nobody", "content": "x"}],
        [{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{oops"}}]}],
        [{"role": "user", "content": [{"type": "video", "video": "x"}]}],
        [{"role": "wizard", "content": "x"}],
        [],
    ],
)
def test_a_request_gemini_cannot_carry_is_the_clients_400(messages: list) -> None:
    with pytest.raises(InvalidRequest):
        _request(messages=messages)


def test_sampling_options_go_to_the_generation_config() -> None:
    body = _request(
        messages=[{"role": "user", "content": "x"}],
        max_completion_tokens=100,
        temperature=0.5,
        top_p=0.9,
        stop="END",
        n=2,
        seed=7,
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "r",
                "schema": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}},
                    "additionalProperties": False,
                },
            },
        },
    )
    assert body["generationConfig"] == {
        "maxOutputTokens": 100,
        "temperature": 0.5,
        "topP": 0.9,
        "candidateCount": 2,
        "seed": 7,
        "stopSequences": ["END"],
        "responseMimeType": "application/json",
        "responseSchema": {"type": "object", "properties": {"a": {"type": "integer"}}},
    }
    assert _request(messages=[{"role": "user", "content": "x"}], max_tokens=9)["generationConfig"] == {
        "maxOutputTokens": 9
    }


def test_the_schema_is_cut_to_what_gemini_accepts() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "title": "Query",
        "additionalProperties": False,
        "$defs": {"Unit": {"type": "string", "enum": ["c", "f"]}},
        "properties": {
            "unit": {"$ref": "#/$defs/Unit"},
            "when": {"type": "string", "format": "date-time"},
            "email": {"type": "string", "format": "email"},
            "count": {"type": ["integer", "null"], "default": 1},
            "kind": {"const": "fixed"},
            "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "level": {"enum": [1, 2, None]},
        },
        "required": ["unit", "missing"],
    }
    assert gemini_schema(schema) == {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["c", "f"]},
            "when": {"type": "string", "format": "date-time"},
            "email": {"type": "string"},
            "count": {"type": "integer", "nullable": True},
            "kind": {"type": "string", "enum": ["fixed"]},
            "either": {"anyOf": [{"type": "string"}, {"type": "number"}]},
            "maybe": {"type": "string", "nullable": True},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "level": {"type": "string", "enum": ["1", "2"], "nullable": True},
        },
        "required": ["unit"],
    }


def test_a_recursive_reference_ends_in_a_bare_object() -> None:
    schema = {
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        "$ref": "#/$defs/Node",
    }
    assert gemini_schema(schema) == {"type": "object", "properties": {"next": {"type": "object"}}}


# -- answers -----------------------------------------------------------------------------------------


def _answer(parts: list, finish: str = "STOP", **extra: object) -> bytes:
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
    return orjson.dumps({"candidates": [candidate], "usageMetadata": METADATA, "responseId": "r1", **extra})


def test_an_answer_becomes_a_chat_completion_with_its_thoughts_apart() -> None:
    completion = chat_completion(
        _answer([{"text": "hmm", "thought": True}, {"text": "Hel"}, {"text": "lo"}]), "m"
    )
    assert completion["object"] == "chat.completion" and completion["model"] == "m"
    assert completion["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Hello",
        "refusal": None,
        "reasoning_content": "hmm",
    }
    assert completion["choices"][0]["finish_reason"] == "stop"


def test_function_calls_become_tool_calls_with_stable_ids_carrying_the_signature() -> None:
    parts = [
        {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE},
        {"functionCall": {"name": "weather", "args": {"city": "Rome"}}},
    ]
    first = chat_completion(_answer(parts), "m")["choices"][0]
    again = chat_completion(_answer(parts), "m")["choices"][0]
    calls = first["message"]["tool_calls"]
    assert first["finish_reason"] == "tool_calls"
    assert [c["function"] for c in calls] == [
        {"name": "weather", "arguments": '{"city":"Paris"}'},
        {"name": "weather", "arguments": '{"city":"Rome"}'},
    ]
    assert [c["id"] for c in calls] == [c["id"] for c in again["message"]["tool_calls"]]  # stable
    assert len({c["id"] for c in calls}) == 2
    assert signature_of(calls[0]["id"]) == SIGNATURE and signature_of(calls[1]["id"]) is None


@pytest.mark.parametrize(
    ("reason", "called", "expected"),
    [
        ("STOP", False, "stop"),
        ("STOP", True, "tool_calls"),
        ("MAX_TOKENS", False, "length"),
        ("SAFETY", False, "content_filter"),
        ("RECITATION", False, "content_filter"),
        ("BLOCKLIST", False, "content_filter"),
        ("PROHIBITED_CONTENT", False, "content_filter"),
        ("SPII", False, "content_filter"),
        ("OTHER", False, "stop"),
    ],
)
def test_finish_reasons(reason: str, called: bool, expected: str) -> None:
    assert finish_reason_of(reason, called) == expected


def test_usage_counts_thoughts_as_completion_and_cached_prompt_tokens() -> None:
    assert usage_of(METADATA) == {
        "prompt_tokens": 20,
        "completion_tokens": 12,
        "total_tokens": 32,
        "prompt_tokens_details": {"cached_tokens": 12},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    assert usage_of(None)["total_tokens"] == 0


def test_a_blocked_prompt_is_recognised() -> None:
    assert blocked_prompt({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}) == "PROHIBITED_CONTENT"
    assert blocked_prompt(orjson.loads(_answer([{"text": "ok"}]))) is None


@pytest.mark.parametrize(
    "body", [b"{oops", b"[]", b'{"candidates": "x"}', b'{"candidates": [{"content": {"parts": [1]}}]}']
)
def test_an_unreadable_answer_is_broken(body: bytes) -> None:
    with pytest.raises(UpstreamBrokeOff):
        chat_completion(body, "m")


@pytest.mark.parametrize(
    ("status", "google", "expected"),
    [
        (429, "RESOURCE_EXHAUSTED", 429),
        (400, "INVALID_ARGUMENT", 400),
        (400, "FAILED_PRECONDITION", 400),
        (503, "UNAVAILABLE", 503),
        (403, "PERMISSION_DENIED", 403),
    ],
)
def test_googles_errors_in_the_openai_shape(status: int, google: str, expected: int) -> None:
    body = orjson.dumps({"error": {"code": status, "message": "why it failed", "status": google}})
    mapped, error = error_answer(status, body)
    assert mapped == expected
    assert orjson.loads(error)["error"]["message"] == "why it failed"
    assert orjson.loads(error)["error"]["code"] == google.lower()


def test_a_refused_key_is_a_401_so_the_row_fails_over() -> None:
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]
    body = orjson.dumps(
        {
            "error": {
                "code": 400,
                "message": "API key not valid.",
                "status": "INVALID_ARGUMENT",
                "details": details,
            }
        }
    )
    assert error_answer(400, body)[0] == 401
    assert error_answer(502, b"<html>bad gateway</html>")[0] == 502


# -- the stream --------------------------------------------------------------------------------------


def _event(payload: dict) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\r\n\r\n"


STREAM = (
    _event(
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}],
            "responseId": "s1",
        }
    )
    + _event({"candidates": [{"content": {"role": "model", "parts": [{"text": "lo é"}]}, "index": 0}]})
    + _event(
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}],
                    },
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": METADATA,
        }
    )
)


def _frames(out: bytes) -> list:
    data = [line[6:] for line in out.split(b"\n") if line.startswith(b"data: ")]
    return [b"[DONE]" if d == b"[DONE]" else orjson.loads(d) for d in data]


def _run(pieces: list[bytes], want_usage: bool = True) -> list:
    chunks = ChatChunks("m", want_usage)
    return _frames(b"".join(chunks.feed(p) for p in pieces) + chunks.finish())


def test_the_stream_becomes_chat_chunks_with_role_content_tool_calls_usage_and_done() -> None:
    frames = _run([STREAM])
    assert frames[-1] == b"[DONE]"
    chunks = frames[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-s1" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello é"
    calls = [t for c in chunks if c["choices"] for t in c["choices"][0]["delta"].get("tool_calls") or ()]
    assert [(t["index"], t["function"]["name"], t["function"]["arguments"]) for t in calls] == [
        (0, "weather", '{"city":"Paris"}')
    ]
    finishes = [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]
    ]
    assert finishes == ["tool_calls"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12


def test_the_stream_split_at_every_byte_gives_the_same_chunks() -> None:
    whole = _run([STREAM])
    for cut in range(1, len(STREAM)):
        split = _run([STREAM[:cut], STREAM[cut:]])
        assert [_without_created(f) for f in split] == [_without_created(f) for f in whole], cut


def _without_created(frame: object) -> object:
    return {k: v for k, v in frame.items() if k != "created"} if isinstance(frame, dict) else frame


def test_no_usage_chunk_unless_asked() -> None:
    frames = _run([STREAM], want_usage=False)
    assert frames[-1] == b"[DONE]" and all(f["choices"] for f in frames[:-1])


def test_a_stream_ending_before_a_finish_reason_is_broken() -> None:
    chunks = ChatChunks("m", True)
    chunks.feed(STREAM[: STREAM.index(b"data:", 10)])
    with pytest.raises(UpstreamBrokeOff):
        chunks.finish()


@pytest.mark.parametrize(
    "event", [b"data: {nope\r\n\r\n", b'data: {"error": {"message": "overloaded"}}\r\n\r\n']
)
def test_an_unreadable_or_failed_event_is_broken(event: bytes) -> None:
    with pytest.raises(UpstreamBrokeOff):
        ChatChunks("m", True).feed(event)
