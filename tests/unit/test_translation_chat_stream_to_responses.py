"""A chat completion stream translated into Responses events, chunk by chunk: the event sequence the openai
SDK's `responses.stream` accumulates, whatever the chunk boundaries, and a clean error when it breaks."""

from __future__ import annotations

from typing import Any

import orjson

from modelgate.domain.errors import UPSTREAM_UNAVAILABLE_MESSAGE
from modelgate.proxy.translation.chat_stream_to_responses import ResponseEventStream
from modelgate.proxy.translation.sse import SseParser

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "up"}
USAGE = {
    "prompt_tokens": 9,
    "completion_tokens": 4,
    "total_tokens": 13,
    "prompt_tokens_details": {"cached_tokens": 2},
    "completion_tokens_details": {"reasoning_tokens": 1},
}
DONE = b"data: [DONE]\n\n"


def chunk(delta: dict[str, Any] | None = None, finish_reason: str | None = None) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    return b"data: " + orjson.dumps({**HEAD, "choices": choices}) + b"\n\n"


def usage_chunk() -> bytes:
    return b"data: " + orjson.dumps({**HEAD, "choices": [], "usage": USAGE}) + b"\n\n"


def call(index: int, call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    function = {"arguments": arguments} | ({"name": name} if name else {})
    return {"index": index, "id": call_id, "type": "function", "function": function}


REASONING_AND_TEXT = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "thinking"}),
    chunk({"content": "Hello"}),
    chunk({"content": " there"}),
    chunk({}, "stop"),
    usage_chunk(),
    DONE,
]
TWO_CALLS = [
    chunk({"role": "assistant", "tool_calls": [call(0, "c1", "w", '{"city":')]}),
    chunk({"tool_calls": [call(0, None, None, '"Paris"}')]}),
    chunk({"tool_calls": [call(1, "c2", "w", '{"city":"London"}')]}),
    chunk({}, "tool_calls"),
    usage_chunk(),
    DONE,
]


def events(stream: ResponseEventStream, pieces: list[bytes]) -> list[dict[str, Any]]:
    out = b"".join(stream.feed(piece) for piece in pieces) + stream.finish()
    parser = SseParser()
    parsed = parser.feed(out) + parser.finish()
    assert all(event.name == orjson.loads(event.data).get("type") for event in parsed if event.name)
    return [orjson.loads(event.data) for event in parsed]


def byte_by_byte(chunks: list[bytes]) -> list[bytes]:
    whole = b"".join(chunks)
    return [whole[i : i + 1] for i in range(len(whole))]


def test_reasoning_then_text_is_a_reasoning_item_then_a_message_item() -> None:
    got = events(ResponseEventStream("claude", {}), REASONING_AND_TEXT)
    assert [event["type"] for event in got] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in got] == list(range(len(got)))
    final = got[-1]["response"]
    assert final["status"] == "completed" and final["model"] == "claude"
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][1]["content"][0]["text"] == "Hello there"
    assert final["usage"] == {
        "input_tokens": 9,
        "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 13,
    }


def test_the_events_are_the_same_whatever_the_chunk_boundaries() -> None:
    def shape(got: list[dict[str, Any]]) -> list[Any]:
        return [(e["type"], e.get("delta"), e.get("text"), e.get("arguments")) for e in got]

    for stream in (REASONING_AND_TEXT, TWO_CALLS):
        whole = events(ResponseEventStream("m", {}), stream)
        assert shape(events(ResponseEventStream("m", {}), byte_by_byte(stream))) == shape(whole)


def test_each_tool_call_is_a_function_call_item_with_its_arguments() -> None:
    got = events(ResponseEventStream("m", {}), TWO_CALLS)
    done = [e["arguments"] for e in got if e["type"] == "response.function_call_arguments.done"]
    assert done == ['{"city":"Paris"}', '{"city":"London"}']
    final = got[-1]["response"]
    assert [(i["call_id"], i["name"], i["status"]) for i in final["output"]] == [
        ("c1", "w", "completed"),
        ("c2", "w", "completed"),
    ]


def test_a_length_finish_is_response_incomplete() -> None:
    got = events(ResponseEventStream("m", {}), [chunk({"content": "cut"}), chunk({}, "length"), DONE])
    assert got[-1]["type"] == "response.incomplete"
    assert got[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_stream_ending_without_a_finish_reason_ends_with_an_error() -> None:
    stream = ResponseEventStream("m", {})
    got = events(stream, [chunk({"content": "half"})])
    assert got[-1] == {"error": {"message": UPSTREAM_UNAVAILABLE_MESSAGE, "type": "server_error",
                                 "code": "upstream_unavailable"}}  # fmt: skip
    assert stream.failure == "The provider ended the stream before the answer was complete."


def test_a_chunk_carrying_an_error_ends_the_stream_and_keeps_the_providers_message() -> None:
    stream = ResponseEventStream("m", {})
    broken = b'data: {"error": {"message": "overloaded"}}\n\n'
    got = events(stream, [chunk({"content": "a"}), broken, chunk({"content": "ignored"})])
    assert "error" in got[-1]
    assert stream.failure == "overloaded"


def test_the_response_echoes_what_the_client_asked_for() -> None:
    payload = {
        "instructions": "Be brief.",
        "max_output_tokens": 50,
        "text": {"format": {"type": "json_object"}},
    }
    final = events(ResponseEventStream("m", payload), REASONING_AND_TEXT)[-1]["response"]
    assert (final["instructions"], final["max_output_tokens"]) == ("Be brief.", 50)
    assert final["text"] == {"format": {"type": "json_object"}}
    assert final["store"] is False
