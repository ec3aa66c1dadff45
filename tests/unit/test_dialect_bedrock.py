"""The Bedrock dialect without a network: the event-stream decoder (frames split at every byte, checks that
fail), the chat ↔ Converse conversion (tools, images, turns, system, stop reasons, usage), the two stream
rewrites (ConverseStream → chat chunks, InvokeModel's stream → Messages SSE), the requests it signs and
the error answers it rewrites."""

from __future__ import annotations

import asyncio
import base64
import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer

from modelgate.config import load_config
from modelgate.domain.errors import InvalidRequest
from modelgate.plugins import chain_plugins
from modelgate.proxy.upstream.dialects import dialect_upstream
from modelgate.proxy.upstream.dialects.aws_eventstream import EventStreamDecoder
from modelgate.proxy.upstream.dialects.base import LocalAnswer
from modelgate.proxy.upstream.dialects.bedrock import BedrockUpstream, InvokeStreamToMessages
from modelgate.proxy.upstream.dialects.bedrock_converse import (
    ConverseStreamToChat,
    chat_to_converse,
    converse_to_chat,
)
from modelgate.proxy.upstream.http_client import UpstreamBrokeOff
from modelgate.proxy.upstream.providers import UpstreamFailure
from tests.fakes.bedrock_wire import event_frame, exception_frame, frame, signature_problem, with_bad_crc

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}},
}


def _split_everywhere(data: bytes) -> Iterator[list[bytes]]:
    """`data` in two pieces at every split point, and byte by byte."""
    for at in range(len(data) + 1):
        yield [data[:at], data[at:]]
    yield [data[i : i + 1] for i in range(len(data))]


# -- event-stream framing -----------------------------------------------------------------------------------


def test_frames_decode_the_same_wherever_the_bytes_are_split() -> None:
    data = event_frame("chunk", {"bytes": "e30="}) + exception_frame("throttlingException", "slow down")
    for pieces in _split_everywhere(data):
        decoder = EventStreamDecoder()
        frames = [found for piece in pieces for found in decoder.feed(piece)]
        assert [(f.message_type, f.event_type, f.exception_type) for f in frames] == [
            ("event", "chunk", ""),
            ("exception", "", "throttlingException"),
        ]
        assert orjson.loads(frames[1].payload) == {"message": "slow down"}
        decoder.finish()


def test_the_fakes_frames_are_what_botocore_reads() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(event_frame("messageStart", {"role": "assistant"}))
    [message] = list(buffer)
    assert message.headers[":event-type"] == "messageStart"
    assert orjson.loads(message.payload)["role"] == "assistant"


def test_headers_of_every_type_are_read() -> None:
    headers = (
        b"\x04flag\x00"
        + b"\x05count\x04"
        + struct.pack(">i", -7)
        + b"\x03raw\x06\x00\x02ok"
        + b"\x02id\x09"
        + bytes(range(16))
    )
    prelude = struct.pack(">II", 12 + len(headers) + 4, len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers
    [decoded] = EventStreamDecoder().feed(message + struct.pack(">I", zlib.crc32(message)))
    assert decoded.headers == {"flag": True, "count": -7, "raw": b"ok", "id": bytes(range(16))}
    assert decoded.payload == b""


@pytest.mark.parametrize(
    "data",
    [
        with_bad_crc(event_frame("chunk", {"bytes": ""})),
        b"\x00\x00\x00\x30" + b"\x00" * 44,  # a prelude whose CRC is wrong
        b"\x7f\xff\xff\xff" + b"\x00" * 12,  # claims 2 GiB
        b"\x00\x00\x00\x05garbage....",  # claims less than a frame can be
    ],
    ids=["message-crc", "prelude-crc", "too-long", "too-short"],
)
def test_a_frame_that_does_not_add_up_is_a_broken_answer(data: bytes) -> None:
    with pytest.raises(UpstreamBrokeOff):
        EventStreamDecoder().feed(data)


def test_a_stream_ending_inside_a_frame_is_broken() -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(event_frame("chunk", {"bytes": ""})[:-3]) == []
    with pytest.raises(UpstreamBrokeOff):
        decoder.finish()


def test_unknown_header_type_is_broken() -> None:
    headers = b"\x01x\x0a"
    prelude = struct.pack(">II", 12 + len(headers) + 4, len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers
    with pytest.raises(UpstreamBrokeOff):
        EventStreamDecoder().feed(message + struct.pack(">I", zlib.crc32(message)))


# -- chat → Converse ----------------------------------------------------------------------------------------


def test_system_and_developer_texts_go_apart_and_sampling_to_inference_config() -> None:
    converse = chat_to_converse(
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "developer", "content": [{"type": "text", "text": "be kind"}]},
                {"role": "user", "content": "hi"},
            ],
            "max_completion_tokens": 64,
            "temperature": 0.5,
            "top_p": 0.9,
            "stop": "END",
        }
    )
    assert converse == {
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "system": [{"text": "be brief"}, {"text": "be kind"}],
        "inferenceConfig": {"maxTokens": 64, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
    }


def test_a_tool_round_trip_becomes_tool_use_and_tool_results_in_alternating_turns() -> None:
    converse = chat_to_converse(
        {
            "messages": [
                {"role": "user", "content": "weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "w", "arguments": '{"city":"Paris"}'},
                        },
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "w", "arguments": '{"city":"Rome"}'},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "rain"}]},
                {"role": "user", "content": "and so?"},
            ],
            "tools": [TOOL],
            "tool_choice": "required",
        }
    )
    assert [m["role"] for m in converse["messages"]] == ["user", "assistant", "user"]
    assert converse["messages"][1]["content"][1] == {
        "toolUse": {"toolUseId": "c2", "name": "w", "input": {"city": "Rome"}}
    }
    assert converse["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "c1", "content": [{"text": "sunny"}]}},
        {"toolResult": {"toolUseId": "c2", "content": [{"text": "rain"}]}},
        {"text": "and so?"},
    ]
    assert converse["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "get_weather",
                    "inputSchema": {"json": {"type": "object"}},
                    "description": "Weather",
                }
            }
        ],
        "toolChoice": {"any": {}},
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"auto": {}}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"tool": {"name": "get_weather"}}),
        (None, None),
    ],
)
def test_tool_choice(choice: object, expected: object) -> None:
    chat = {"messages": [{"role": "user", "content": "x"}], "tools": [TOOL], "tool_choice": choice}
    assert chat_to_converse(chat)["toolConfig"].get("toolChoice") == expected


def test_tool_choice_none_sends_no_tools_unless_the_history_uses_them() -> None:
    chat = {"messages": [{"role": "user", "content": "x"}], "tools": [TOOL], "tool_choice": "none"}
    assert "toolConfig" not in chat_to_converse(chat)
    chat["messages"] = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "w", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]
    assert "toolChoice" not in chat_to_converse(chat)["toolConfig"]


def test_an_inline_image_goes_as_bytes_with_its_format() -> None:
    content = [
        {"type": "text", "text": "what?"},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{PNG}"}},
    ]
    [message] = chat_to_converse({"messages": [{"role": "user", "content": content}]})["messages"]
    assert message["content"][1] == {"image": {"format": "jpeg", "source": {"bytes": PNG}}}


@pytest.mark.parametrize(
    "chat",
    [
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}
            ]
        },
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AA"}}],
                }
            ]
        },
        {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
        {"messages": [{"role": "function", "content": "x"}]},
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "function": {"name": "w", "arguments": "{"}}],
                }
            ]
        },
        {"messages": [{"role": "tool", "content": "no id"}]},
        {"messages": [{"role": "user", "content": "x"}], "n": 2},
        {"messages": []},
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "code_interpreter"}]},
    ],
    ids=[
        "image-url",
        "tiff",
        "audio",
        "function-role",
        "bad-arguments",
        "tool-without-id",
        "n",
        "empty",
        "not-fn",
    ],
)
def test_what_converse_cannot_carry_is_a_clear_400(chat: dict) -> None:
    with pytest.raises(InvalidRequest):
        chat_to_converse(chat)


# -- Converse → chat ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("content_filtered", "content_filter"),
        ("guardrail_intervened", "content_filter"),
    ],
)
def test_stop_reasons(stop_reason: str, finish_reason: str) -> None:
    answer = {
        "output": {"message": {"role": "assistant", "content": [{"text": "x"}]}},
        "stopReason": stop_reason,
    }
    assert converse_to_chat(answer, "m", "id")["choices"][0]["finish_reason"] == finish_reason


def test_an_answer_with_text_and_a_tool_use_and_its_usage() -> None:
    answer = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"text": "let me look"},
                    {"toolUse": {"toolUseId": "t1", "name": "w", "input": {"a": 1}}},
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 10, "outputTokens": 4, "totalTokens": 14},
    }
    chat = converse_to_chat(answer, "meta.llama", "chatcmpl-1")
    message = chat["choices"][0]["message"]
    assert message["content"] == "let me look"
    assert message["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"a":1}'}}
    ]
    assert chat["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    assert (chat["model"], chat["id"], chat["object"]) == ("meta.llama", "chatcmpl-1", "chat.completion")


def test_an_answer_without_a_message_is_broken() -> None:
    with pytest.raises(UpstreamBrokeOff):
        converse_to_chat({"output": {}}, "m", "id")


# -- ConverseStream → chat chunks ---------------------------------------------------------------------------


CONVERSE_STREAM = b"".join(
    [
        event_frame("messageStart", {"role": "assistant"}),
        event_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi "}}),
        event_frame("contentBlockStop", {"contentBlockIndex": 0}),
        event_frame(
            "contentBlockStart",
            {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "w"}}},
        ),
        event_frame("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"a":'}}}),
        event_frame("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": "1}"}}}),
        event_frame("contentBlockStop", {"contentBlockIndex": 1}),
        event_frame("messageStop", {"stopReason": "tool_use"}),
        event_frame(
            "metadata", {"usage": {"inputTokens": 9, "outputTokens": 3, "totalTokens": 12}, "metrics": {}}
        ),
    ]
)


def _run(transform: ConverseStreamToChat | InvokeStreamToMessages, pieces: list[bytes]) -> bytes:
    """The rewritten stream (its `created` times made equal: the runs may straddle a second)."""
    out = b"".join(transform.feed(piece) for piece in pieces) + transform.finish()
    return re.sub(rb'"created":\d+', b'"created":0', out)


def _events(sse: bytes) -> list[dict]:
    return [orjson.loads(line[6:]) for line in sse.split(b"\n") if line.startswith(b"data: {")]


def test_converse_stream_is_the_same_chat_stream_wherever_it_is_split() -> None:
    whole = _run(ConverseStreamToChat("m", "id", want_usage=True), [CONVERSE_STREAM])
    for pieces in _split_everywhere(CONVERSE_STREAM):
        assert _run(ConverseStreamToChat("m", "id", want_usage=True), pieces) == whole
    chunks = _events(whole)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"][0]["delta"] == {"content": "Hi "}
    assert chunks[2]["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "id": "t1", "type": "function", "function": {"name": "w", "arguments": ""}}
    ]
    arguments = "".join(
        c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in chunks[2:5]
    )
    assert arguments == '{"a":1}'
    assert chunks[5]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[6] == {
        **chunks[6],
        "choices": [],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }
    assert whole.endswith(b"data: [DONE]\n\n")


def test_converse_stream_has_no_usage_chunk_unless_asked() -> None:
    chunks = _events(_run(ConverseStreamToChat("m", "id", want_usage=False), [CONVERSE_STREAM]))
    assert all(chunk["choices"] for chunk in chunks)


def test_converse_stream_ending_before_message_stop_is_broken() -> None:
    transform = ConverseStreamToChat("m", "id", want_usage=False)
    transform.feed(
        CONVERSE_STREAM[: CONVERSE_STREAM.index(event_frame("messageStop", {"stopReason": "tool_use"}))]
    )
    with pytest.raises(UpstreamBrokeOff):
        transform.finish()


def test_an_exception_frame_mid_stream_breaks_it_off_with_its_message() -> None:
    transform = ConverseStreamToChat("m", "id", want_usage=False)
    transform.feed(event_frame("messageStart", {"role": "assistant"}))
    with pytest.raises(UpstreamBrokeOff, match="modelStreamErrorException: model fell over"):
        transform.feed(exception_frame("modelStreamErrorException", "model fell over"))


# -- InvokeModel's stream → Messages SSE --------------------------------------------------------------------


def _chunk(event: dict) -> bytes:
    return event_frame("chunk", {"bytes": base64.b64encode(orjson.dumps(event)).decode()})


def _claude_stream(delta_usage: dict | None) -> bytes:
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    if delta_usage is not None:
        delta["usage"] = delta_usage
    metrics = {"inputTokenCount": 12, "outputTokenCount": 6, "invocationLatency": 9, "firstByteLatency": 3}
    return b"".join(
        [
            _chunk(
                {
                    "type": "message_start",
                    "message": {
                        "id": "m",
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "usage": {"input_tokens": 12},
                    },
                }
            ),
            _chunk(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            ),
            _chunk(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "yo"}}
            ),
            _chunk({"type": "content_block_stop", "index": 0}),
            _chunk(delta),
            _chunk({"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics}),
        ]
    )


def test_invoke_stream_is_messages_sse_wherever_it_is_split_with_metrics_taken_off() -> None:
    stream = _claude_stream({"output_tokens": 6})
    whole = _run(InvokeStreamToMessages("claude-x"), [stream])
    for pieces in _split_everywhere(stream):
        assert _run(InvokeStreamToMessages("claude-x"), pieces) == whole
    assert b"invocationMetrics" not in whole
    names = [line[7:] for line in whole.split(b"\n") if line.startswith(b"event: ")]
    assert names == [
        b"message_start",
        b"content_block_start",
        b"content_block_delta",
        b"content_block_stop",
        b"message_delta",
        b"message_stop",
    ]
    assert _events(whole)[0]["message"]["model"] == "claude-x"


def test_invocation_metrics_fill_the_usage_the_events_lack() -> None:
    [delta] = [
        e
        for e in _events(_run(InvokeStreamToMessages("m"), [_claude_stream(None)]))
        if e["type"] == "message_delta"
    ]
    assert delta["usage"] == {"output_tokens": 6}  # input came with message_start
    [kept] = [
        e
        for e in _events(_run(InvokeStreamToMessages("m"), [_claude_stream({"output_tokens": 2})]))
        if e["type"] == "message_delta"
    ]
    assert kept["usage"] == {"output_tokens": 2}  # the model's own count stands


@pytest.mark.parametrize(
    "data",
    [
        event_frame("chunk", {"bytes": "not base64!"}),
        event_frame("chunk", {"bytes": base64.b64encode(b"[1, 2]").decode()}),
        frame({":message-type": "event", ":event-type": "chunk"}, b"not json"),
    ],
    ids=["base64", "not-an-event", "payload"],
)
def test_an_unreadable_chunk_is_broken(data: bytes) -> None:
    with pytest.raises(UpstreamBrokeOff):
        InvokeStreamToMessages("m").feed(data)


def test_invoke_stream_ending_without_message_stop_is_broken() -> None:
    transform = InvokeStreamToMessages("m")
    transform.feed(_chunk({"type": "message_start", "message": {"usage": {}}}))
    with pytest.raises(UpstreamBrokeOff):
        transform.finish()


# -- the client: requests signed, errors rewritten ----------------------------------------------------------

TEMPLATE = """
[[providers]]
name = "p"
kind = "{kind}"

[[providers.hosts]]
name = "h"
dialect = "bedrock"
region = "eu-west-3"
{credentials}

[[models]]
name = "m"
kinds = ["chat", "messages"]
[[models.rows]]
provider = "p"

[[plans]]
code = "free"
"""
STATIC = (
    'aws_access_key_id = "AKIDUNIT"\naws_secret_access_key = "unit-secret"\naws_session_token = "unit-token"'
)


def _upstream(tmp_path: Path, kind: str, credentials: str) -> BedrockUpstream:
    path = tmp_path / "bedrock.toml"
    path.write_text(TEMPLATE.format(kind=kind, credentials=credentials), encoding="utf-8")
    client = dialect_upstream(load_config(path, env={}, chain=chain_plugins()).provider("p").served_from("h"))
    assert isinstance(client, BedrockUpstream)
    return client


@pytest.fixture
def upstream(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BedrockUpstream]:
    client = _upstream(tmp_path, request.param, STATIC)
    yield client
    asyncio.run(client.close())


@pytest.mark.parametrize("upstream", ["anthropic"], indirect=True)
def test_a_messages_request_is_a_signed_invoke_on_the_regions_default_host(upstream: BedrockUpstream) -> None:
    body = orjson.dumps(
        {
            "model": "anthropic.claude:1",
            "max_tokens": 5,
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        }
    )
    call = asyncio.run(upstream.prepare("POST", "/v1/messages", body, {"anthropic-beta": "b1,b2"}))
    assert call.target == "/model/anthropic.claude%3A1/invoke-with-response-stream" and call.stream
    assert orjson.loads(call.body) == {
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "anthropic_version": "bedrock-2023-05-31",
        "anthropic_beta": ["b1", "b2"],
    }
    headers = dict(call.headers)
    assert upstream.http.authority == "bedrock-runtime.eu-west-3.amazonaws.com"
    assert headers["x-amz-security-token"] == "unit-token"
    keys = {"AKIDUNIT": ("unit-secret", "unit-token")}
    sent = {**headers, "host": upstream.http.authority, "content-type": "application/json"}
    url_path = call.target
    assert (
        signature_problem("POST", url_path, sent, call.body, "eu-west-3", keys) is None
    )  # fake checks http://
    assert signature_problem("POST", url_path, sent, call.body + b" ", "eu-west-3", keys) is not None


@pytest.mark.parametrize("upstream", ["anthropic"], indirect=True)
def test_count_tokens_wraps_the_invoke_body(upstream: BedrockUpstream) -> None:
    body = orjson.dumps({"model": "c", "messages": [{"role": "user", "content": "x"}]})
    call = asyncio.run(upstream.prepare("POST", "/v1/messages/count_tokens?beta=true", body, {}))
    inner = orjson.loads(base64.b64decode(orjson.loads(call.body)["input"]["invokeModel"]["body"]))
    assert call.target == "/model/c/count-tokens" and inner["max_tokens"] == 1 and "model" not in inner


@pytest.mark.parametrize(
    ("upstream", "path"),
    [("anthropic", "/v1/chat/completions"), ("openai", "/v1/messages"), ("openai", "/v1/embeddings")],
    indirect=["upstream"],
)
def test_routes_the_family_has_no_call_for_are_refused(upstream: BedrockUpstream, path: str) -> None:
    with pytest.raises(InvalidRequest):
        asyncio.run(upstream.prepare("POST", path, b'{"model": "m"}', {}))


def _error_answer(status: int, error_type: str, message: str) -> LocalAnswer:
    answer = LocalAnswer(status, orjson.dumps({"message": message}))
    answer.headers["x-amzn-errortype"] = f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    return answer


@pytest.mark.parametrize("upstream", ["openai"], indirect=True)
@pytest.mark.parametrize(
    ("status", "error_type", "expected"),
    [
        (429, "ThrottlingException", 429),
        (400, "ServiceQuotaExceededException", 429),
        (429, "ModelNotReadyException", 429),
        (400, "ValidationException", 400),
        (403, "AccessDeniedException", 403),
        (404, "ResourceNotFoundException", 404),
        (408, "ModelTimeoutException", 408),
        (500, "InternalServerException", 500),
        (503, "ServiceUnavailableException", 503),
    ],
)
def test_bedrock_errors_become_the_familys_error_with_a_status_to_act_on(
    upstream: BedrockUpstream, status: int, error_type: str, expected: int
) -> None:
    call = asyncio.run(
        upstream.prepare(
            "POST", "/v1/chat/completions", b'{"model":"m","messages":[{"role":"user","content":"x"}]}', {}
        )
    )
    answer = asyncio.run(upstream.adapt(call, _error_answer(status, error_type, "it went wrong")))
    body = orjson.loads(asyncio.run(answer.read()))
    assert answer.status == expected
    assert (
        body["error"]["message"] == f"Bedrock {error_type}: it went wrong"
        and body["error"]["code"] == error_type
    )


@pytest.mark.parametrize("upstream", ["anthropic"], indirect=True)
def test_an_exception_frame_opening_a_stream_is_the_whole_answer(upstream: BedrockUpstream) -> None:
    body = orjson.dumps(
        {"model": "c", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    call = asyncio.run(upstream.prepare("POST", "/v1/messages", body, {}))
    stream = LocalAnswer(
        200, exception_frame("throttlingException", "Too many tokens"), "application/vnd.amazon.eventstream"
    )
    answer = asyncio.run(upstream.adapt(call, stream))
    assert answer.status == 429
    assert orjson.loads(asyncio.run(answer.read()))["error"] == {
        "type": "rate_limit_error",
        "message": "Bedrock throttlingException: Too many tokens",
    }


# -- credentials ---------------------------------------------------------------------------------------------

# A credential_process that hands out credentials expiring in five minutes (inside botocore's refresh
# window), numbered by how often it ran.
CREDENTIAL_PROCESS = """
import datetime, json, pathlib, sys
runs = pathlib.Path(sys.argv[1])
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=5)
print(json.dumps({"Version": 1, "AccessKeyId": f"ASIAPROC{n}", "SecretAccessKey": "s", "SessionToken": "t",
                  "Expiration": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}))
"""
CHAT_BODY = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'


def _key_id(call_headers: list[tuple[str, str]]) -> str:
    return dict(call_headers)["authorization"].split("Credential=")[1].split("/")[0]


def test_credentials_near_expiry_from_the_chain_are_refreshed_for_the_next_request(
    tmp_path, monkeypatch
) -> None:
    script = tmp_path / "creds.py"
    script.write_text(CREDENTIAL_PROCESS, encoding="utf-8")
    config = tmp_path / "aws_config"
    config.write_text(f"[profile proc]\ncredential_process = {sys.executable} {script} {tmp_path / 'runs'}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    upstream = _upstream(tmp_path, "openai", 'aws_profile = "proc"')

    async def two_requests() -> list[str]:
        calls = [await upstream.prepare("POST", "/v1/chat/completions", CHAT_BODY, {}) for _ in range(2)]
        return [_key_id(call.headers) for call in calls]

    first, second = asyncio.run(two_requests())
    assert first.startswith("ASIAPROC") and second.startswith("ASIAPROC") and first != second


def test_no_credentials_is_a_failure_of_the_request_naming_where_they_were_looked_for(tmp_path) -> None:
    upstream = _upstream(tmp_path, "openai", 'aws_profile = "no-such-profile-here"')
    with pytest.raises(
        UpstreamFailure, match="no AWS credentials for Bedrock from profile 'no-such-profile-here'"
    ):
        asyncio.run(upstream.prepare("POST", "/v1/chat/completions", CHAT_BODY, {}))


def test_without_botocore_the_error_says_which_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['botocore'] = None\n"
        "from modelgate.proxy.upstream.dialects.bedrock_auth import require_botocore\n"
        "require_botocore()\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.returncode != 0
    assert "RuntimeError: the bedrock dialect needs botocore: pip install modelgate[bedrock]" in ran.stderr
