"""Golden tests: a Messages event stream translated into chat completion chunks, event by event."""

from __future__ import annotations

import orjson

from modelgate.domain.errors import UPSTREAM_UNAVAILABLE_MESSAGE
from modelgate.proxy.translation.messages_stream_to_chat import ChatChunkStream
from modelgate.proxy.translation.sse import SseParser


def event(name: str, payload: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def message_start(input_tokens: int = 10, **usage) -> bytes:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-upstream",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1, **usage},
    }
    return event("message_start", {"type": "message_start", "message": message})


def block_start(index: int, block: dict) -> bytes:
    return event(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
    )


def delta(index: int, payload: dict) -> bytes:
    return event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload})


def block_stop(index: int) -> bytes:
    return event("content_block_stop", {"type": "content_block_stop", "index": index})


def message_delta(stop_reason: str, output_tokens: int) -> bytes:
    return event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
    )


PING = event("ping", {"type": "ping"})
MESSAGE_STOP = event("message_stop", {"type": "message_stop"})

TEXT_EVENTS = [
    message_start(),
    block_start(0, {"type": "text", "text": ""}),
    PING,
    delta(0, {"type": "text_delta", "text": "Hello"}),
    delta(0, {"type": "text_delta", "text": " there"}),
    block_stop(0),
    message_delta("end_turn", 2),
    MESSAGE_STOP,
]

# A thinking block first, then two tool calls whose input arrives in fragments.
TOOL_EVENTS = [
    message_start(),
    block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
    delta(0, {"type": "thinking_delta", "thinking": "Two cities."}),
    delta(0, {"type": "signature_delta", "signature": "c2ln"}),
    block_stop(0),
    block_start(1, {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}),
    delta(1, {"type": "input_json_delta", "partial_json": '{"ci'}),
    delta(1, {"type": "input_json_delta", "partial_json": 'ty":"Paris"}'}),
    block_stop(1),
    block_start(2, {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {}}),
    delta(2, {"type": "input_json_delta", "partial_json": '{"city":"London"}'}),
    block_stop(2),
    message_delta("tool_use", 12),
    MESSAGE_STOP,
]


def chunks_of(raw: bytes) -> list:
    parser = SseParser()
    return [event.data if event.data == b"[DONE]" else orjson.loads(event.data) for event in parser.feed(raw)]


def translate(events: list[bytes], include_usage: bool = False, model: str = "client-model") -> list:
    stream = ChatChunkStream(model, include_usage)
    chunks = chunks_of(b"".join(stream.feed(e) for e in events) + stream.finish())
    for chunk in chunks:
        if isinstance(chunk, dict) and "id" in chunk:
            assert chunk.pop("id").startswith("chatcmpl-")
            assert isinstance(chunk.pop("created"), int)
    return chunks


def choice_chunk(delta: dict, finish_reason: str | None = None) -> dict:
    return {
        "object": "chat.completion.chunk",
        "model": "client-model",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def test_a_text_stream_becomes_content_deltas_a_finish_chunk_and_done() -> None:
    assert translate(TEXT_EVENTS) == [
        choice_chunk({"role": "assistant", "content": ""}),
        choice_chunk({"content": "Hello"}),
        choice_chunk({"content": " there"}),
        choice_chunk({}, "stop"),
        b"[DONE]",
    ]


def test_usage_is_sent_in_its_own_chunk_only_when_the_client_asked_for_it() -> None:
    chunks = translate(TEXT_EVENTS, include_usage=True)
    assert chunks[-2] == {
        "object": "chat.completion.chunk",
        "model": "client-model",
        "choices": [],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "total_tokens": 12,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
    assert all("usage" not in chunk for chunk in translate(TEXT_EVENTS) if isinstance(chunk, dict))


def test_tool_use_blocks_become_indexed_tool_calls_and_thinking_is_reasoning_content() -> None:
    assert translate(TOOL_EVENTS) == [
        choice_chunk({"role": "assistant", "content": ""}),
        choice_chunk({"reasoning_content": "Two cities."}),
        choice_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "toolu_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        choice_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
        choice_chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty":"Paris"}'}}]}),
        choice_chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "toolu_b",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        choice_chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"city":"London"}'}}]}),
        choice_chunk({}, "tool_calls"),
        b"[DONE]",
    ]


def test_the_same_chunks_come_out_when_the_upstream_bytes_arrive_one_at_a_time() -> None:
    raw = b"".join(TOOL_EVENTS)
    stream = ChatChunkStream("client-model", True)
    out = b"".join(stream.feed(raw[i : i + 1]) for i in range(len(raw))) + stream.finish()
    chunks = chunks_of(out)
    for chunk in chunks:
        if isinstance(chunk, dict):
            chunk.pop("id")
            chunk.pop("created")
    assert chunks == translate(TOOL_EVENTS, include_usage=True)


def test_the_first_content_delta_is_sent_before_the_upstream_stream_ends() -> None:
    stream = ChatChunkStream("client-model", False)
    early = stream.feed(b"".join(TEXT_EVENTS[:4]))
    assert b'"content":"Hello"' in early
    assert b"[DONE]" not in early


def test_a_max_tokens_stop_finishes_with_length() -> None:
    events = [*TEXT_EVENTS[:6], message_delta("max_tokens", 2), MESSAGE_STOP]
    assert translate(events)[-2] == choice_chunk({}, "length")


def test_cache_reads_count_as_cached_prompt_tokens_in_the_usage_chunk() -> None:
    events = [message_start(4, cache_read_input_tokens=50, cache_creation_input_tokens=6), *TEXT_EVENTS[1:]]
    usage = translate(events, include_usage=True)[-2]["usage"]
    assert usage == {
        "prompt_tokens": 60,
        "completion_tokens": 2,
        "total_tokens": 62,
        "prompt_tokens_details": {"cached_tokens": 50},
    }


def test_an_upstream_error_event_becomes_an_error_chunk_and_ends_the_translation() -> None:
    error = event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    chunks = translate([*TEXT_EVENTS[:4], error, *TEXT_EVENTS[4:]])
    assert chunks[-1] == {
        "error": {
            "message": UPSTREAM_UNAVAILABLE_MESSAGE,
            "type": "server_error",
            "code": "upstream_unavailable",
        }
    }
    assert b"[DONE]" not in chunks


def test_a_stream_that_ends_before_message_stop_ends_with_an_error_chunk() -> None:
    chunks = translate(TEXT_EVENTS[:4])
    assert chunks[-1]["error"]["code"] == "upstream_unavailable"
    assert b"[DONE]" not in chunks
