"""Golden tests: a chat completion stream translated into Messages stream events, chunk by chunk."""

from __future__ import annotations

import orjson

from modelgate.domain.errors import UPSTREAM_UNAVAILABLE_MESSAGE
from modelgate.proxy.translation.chat_stream_to_messages import MessagesEventStream
from modelgate.proxy.translation.sse import SseParser

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream"}
USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}


def chunk(delta: dict | None = None, finish_reason: str | None = None, **extra) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason, **extra}]
    return b"data: " + orjson.dumps({**HEAD, "choices": choices}) + b"\n\n"


def usage_chunk(usage: dict = USAGE) -> bytes:
    return b"data: " + orjson.dumps({**HEAD, "choices": [], "usage": usage}) + b"\n\n"


DONE = b"data: [DONE]\n\n"

TEXT_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello"}),
    chunk({"content": " there"}),
    chunk({}, "stop"),
    usage_chunk(),
    DONE,
]

# Two parallel calls, their arguments cut into fragments, as OpenAI streams them.
TOOL_STREAM = [
    chunk(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ],
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty":"Paris"}'}}]}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"city":'}}]}),
    chunk({"tool_calls": [{"index": 1, "function": {"arguments": '"London"}'}}]}),
    chunk({}, "tool_calls"),
    usage_chunk(),
    DONE,
]


def events_of(raw: bytes) -> list[tuple[str | None, dict]]:
    parser = SseParser()
    return [(event.name, orjson.loads(event.data)) for event in [*parser.feed(raw), *parser.finish()]]


def translate(chunks: list[bytes], model: str = "client-model") -> list[tuple[str | None, dict]]:
    stream = MessagesEventStream(model)
    raw = b"".join(stream.feed(c) for c in chunks) + stream.finish()
    events = events_of(raw)
    if events and events[0][0] == "message_start":
        message_id = events[0][1]["message"].pop("id")
        assert message_id.startswith("msg_")
    return events


def block_start(index: int, block: dict) -> tuple[str, dict]:
    return "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, payload: dict) -> tuple[str, dict]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload}


def block_stop(index: int) -> tuple[str, dict]:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


MESSAGE_START = (
    "message_start",
    {
        "type": "message_start",
        "message": {
            "type": "message",
            "role": "assistant",
            "model": "client-model",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        },
    },
)
PING = ("ping", {"type": "ping"})
FINAL_USAGE = {
    "input_tokens": 9,
    "output_tokens": 4,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
MESSAGE_STOP = ("message_stop", {"type": "message_stop"})


def message_delta(
    stop_reason: str, stop_sequence: str | None = None, usage: dict = FINAL_USAGE
) -> tuple[str, dict]:
    return "message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
        "usage": usage,
    }


def test_a_text_stream_becomes_one_text_block_between_message_start_and_message_stop() -> None:
    assert translate(TEXT_STREAM) == [
        MESSAGE_START,
        PING,
        block_start(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "Hello"}),
        delta(0, {"type": "text_delta", "text": " there"}),
        block_stop(0),
        message_delta("end_turn"),
        MESSAGE_STOP,
    ]


def test_parallel_tool_calls_become_tool_use_blocks_with_input_json_deltas() -> None:
    assert translate(TOOL_STREAM) == [
        MESSAGE_START,
        PING,
        block_start(0, {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {}}),
        delta(0, {"type": "input_json_delta", "partial_json": '{"ci'}),
        delta(0, {"type": "input_json_delta", "partial_json": 'ty":"Paris"}'}),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "call_b", "name": "get_weather", "input": {}}),
        delta(1, {"type": "input_json_delta", "partial_json": '{"city":'}),
        delta(1, {"type": "input_json_delta", "partial_json": '"London"}'}),
        block_stop(1),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]


def test_text_then_a_tool_call_gives_a_text_block_then_a_tool_use_block() -> None:
    chunks = [
        chunk({"role": "assistant", "content": "Checking"}),
        chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        DONE,
    ]
    events = translate(chunks)
    assert [name for name, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[5] == block_start(1, {"type": "tool_use", "id": "c", "name": "f", "input": {}})


def test_the_same_events_come_out_when_the_upstream_bytes_arrive_one_at_a_time() -> None:
    raw = b"".join(TOOL_STREAM)
    stream = MessagesEventStream("client-model")
    out = b"".join(stream.feed(raw[i : i + 1]) for i in range(len(raw))) + stream.finish()
    events = events_of(out)
    events[0][1]["message"].pop("id")
    assert events == translate(TOOL_STREAM)


def test_the_first_text_delta_is_sent_before_the_upstream_stream_ends() -> None:
    stream = MessagesEventStream("client-model")
    early = stream.feed(TEXT_STREAM[0] + TEXT_STREAM[1])
    assert b'"text_delta","text":"Hello"' in early
    assert b"message_stop" not in early


def test_an_event_cut_in_half_is_sent_once_its_second_half_arrives() -> None:
    stream = MessagesEventStream("client-model")
    head = stream.feed(TEXT_STREAM[0])
    first_half, second_half = TEXT_STREAM[1][:20], TEXT_STREAM[1][20:]
    assert b"text_delta" not in head + stream.feed(first_half)
    assert b'"text":"Hello"' in stream.feed(second_half)


def test_a_length_finish_reports_max_tokens() -> None:
    events = translate([chunk({"content": "a b"}), chunk({}, "length"), usage_chunk(), DONE])
    assert events[-2] == message_delta("max_tokens")


def test_a_matched_stop_string_named_by_the_server_is_reported_as_stop_sequence() -> None:
    events = translate([chunk({"content": "a"}), chunk({}, "stop", stop_reason="END"), usage_chunk(), DONE])
    assert events[-2] == message_delta("stop_sequence", "END")


def test_cached_prompt_tokens_are_reported_in_message_delta() -> None:
    usage = {**USAGE, "prompt_tokens_details": {"cached_tokens": 6}}
    events = translate([chunk({"content": "a"}), chunk({}, "stop"), usage_chunk(usage), DONE])
    assert events[-2][1]["usage"] == {
        "input_tokens": 3,
        "output_tokens": 4,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 6,
    }


def test_a_stream_without_usage_reports_zero_output_tokens() -> None:
    events = translate([chunk({"content": "a"}), chunk({}, "stop"), DONE])
    assert events[-2] == message_delta("end_turn", usage={"output_tokens": 0})


def test_a_stream_that_ends_after_its_finish_reason_without_done_is_closed() -> None:
    events = translate([chunk({"content": "a"}), chunk({}, "stop"), usage_chunk()])
    assert events[-2:] == [message_delta("end_turn"), MESSAGE_STOP]


def test_a_stream_that_ends_before_its_finish_reason_ends_with_an_error_event() -> None:
    events = translate([chunk({"content": "partial"})])
    assert events[-1][0] == "error"
    assert events[-1][1]["type"] == "error"
    assert events[-1][1]["error"]["type"] == "api_error"
    assert "message_stop" not in [name for name, _ in events]


def test_an_upstream_error_in_the_stream_becomes_an_error_event_and_ends_the_translation() -> None:
    error = b'data: {"error":{"message":"The server had an error","type":"server_error"}}\n\n'
    events = translate([chunk({"content": "a"}), error, chunk({"content": "ignored"}), DONE])
    assert events[-1] == (
        "error",
        {"type": "error", "error": {"type": "api_error", "message": UPSTREAM_UNAVAILABLE_MESSAGE}},
    )
    assert all(payload.get("delta", {}).get("text") != "ignored" for _, payload in events)


def test_an_error_before_any_content_is_the_only_event() -> None:
    error = b'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n'
    assert translate([error]) == [
        ("error", {"type": "error", "error": {"type": "api_error", "message": UPSTREAM_UNAVAILABLE_MESSAGE}})
    ]


def test_the_providers_own_error_message_is_kept_for_the_log_not_the_client() -> None:
    stream = MessagesEventStream("client-model")
    sent = stream.feed(b'data: {"error":{"message":"overloaded at acme-east","type":"server_error"}}\n\n')
    assert b"acme" not in sent
    assert stream.failure == "overloaded at acme-east"
