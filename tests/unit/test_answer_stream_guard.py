"""The answer stream guard: content rules over an answer's SSE as it streams, in every client wire format."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from modelgate.proxy.content.answer_stream import AnswerBlocked, AnswerStreamGuard
from modelgate.proxy.content.redaction import Hit
from modelgate.proxy.translation.sse import SseParser
from tests.fakes.sse import DONE_FRAME, data_frame, event_frame

RULES = {"secret": "redact", "boom": "block", "hello": "flag"}
WINDOW = max(len(literal) for literal in RULES)
SECRET = "[REDACTED:phrase]"


def scan(text: str) -> list[Hit]:
    """The test's matcher: fixed literals, each a rule of its own."""
    return [
        Hit(m.start(), m.end(), action, literal, "phrase")
        for literal, action in RULES.items()
        for m in re.finditer(literal, text)
    ]


def guard(wire: str, seen: Callable[[Hit], None] | None = None, hold: bool = True) -> AnswerStreamGuard:
    return AnswerStreamGuard(wire, scan, WINDOW, hold, seen or (lambda hit: None))


def run(guarded: AnswerStreamGuard, pieces: list[bytes]) -> bytes:
    return b"".join(guarded.feed(piece) for piece in pieces) + guarded.finish()


def split(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def events(out: bytes) -> list[tuple[str | None, Any]]:
    """Every event of `out`, its data parsed (so every event must be valid JSON, or [DONE])."""
    parser = SseParser()
    parsed = parser.feed(out) + parser.finish()
    return [(e.name, e.data.decode() if e.data == b"[DONE]" else orjson.loads(e.data)) for e in parsed]


def delivered(wire: str, out: bytes) -> dict[tuple, str]:
    """The text each channel's deltas add up to, as a client accumulates it."""
    texts: dict[tuple, str] = {}

    def add(key: tuple, text: str | None) -> None:
        texts[key] = texts.get(key, "") + (text or "")

    for _, data in events(out):
        if not isinstance(data, dict):
            continue
        for choice in data.get("choices", ()):
            if wire == "completions":
                add(("text", choice["index"]), choice.get("text"))
                continue
            delta = choice.get("delta") or {}
            add(("content", choice["index"]), delta.get("content"))
            for call in delta.get("tool_calls") or ():
                add(("tool", choice["index"], call["index"]), call["function"].get("arguments"))
        if data.get("type") in ("response.output_text.delta", "response.function_call_arguments.delta"):
            add((data["type"], data["output_index"]), data["delta"])
        if data.get("type") == "content_block_delta":
            delta = data["delta"]
            add(("block", data["index"]), delta.get("text", delta.get("partial_json")))
    return {key: text for key, text in texts.items() if text}


# -- streams in each wire format, shaped as the fakes in tests/fakes send them ------------------------


def chat_chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> bytes:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test"}
    return data_frame({**head, "choices": [choice]})


def chat_stream(*pieces: str) -> list[bytes]:
    return [
        chat_chunk({"role": "assistant", "content": ""}),
        *(chat_chunk({"content": piece}) for piece in pieces),
        chat_chunk({}, "stop"),
        DONE_FRAME,
    ]


def completion_chunk(text: str, finish: str | None = None, index: int = 0) -> bytes:
    choice = {"text": text, "index": index, "logprobs": None, "finish_reason": finish}
    return data_frame({"id": "cmpl-1", "object": "text_completion", "model": "gpt-test", "choices": [choice]})


def responses_stream(*pieces: str) -> list[bytes]:
    text = "".join(pieces)
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [part]}
    response = {"id": "resp_1", "object": "response", "status": "completed", "output": [item]}

    def event(kind: str, **fields: Any) -> bytes:
        return event_frame(kind, {"type": kind, "sequence_number": 0, **fields})

    return [
        event("response.created", response={**response, "status": "in_progress", "output": []}),
        event("response.content_part.added", **where, part={**part, "text": ""}),
        *(event("response.output_text.delta", **where, delta=piece, logprobs=[]) for piece in pieces),
        event("response.output_text.done", **where, text=text, logprobs=[]),
        event("response.content_part.done", **where, part=part),
        event("response.output_item.done", output_index=0, item=item),
        event("response.completed", response=response),
    ]


def message_delta(index: int, kind: str, text: str) -> bytes:
    field = "text" if kind == "text_delta" else "partial_json"
    delta = {"type": kind, field: text}
    return event_frame("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def messages_stream(*pieces: str) -> list[bytes]:
    start = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant"}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    stop_reason = {"stop_reason": "end_turn", "stop_sequence": None}
    return [
        event_frame("message_start", start),
        event_frame("content_block_start", block),
        event_frame("ping", {"type": "ping"}),
        *(message_delta(0, "text_delta", piece) for piece in pieces),
        event_frame("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event_frame("message_delta", {"type": "message_delta", "delta": stop_reason, "usage": {}}),
        event_frame("message_stop", {"type": "message_stop"}),
    ]


# -- finding and redacting ----------------------------------------------------------------------------


def test_chat_a_match_split_across_two_events_is_redacted() -> None:
    out = run(guard("chat"), chat_stream("my sec", "ret is out"))
    assert delivered("chat", out) == {("content", 0): f"my {SECRET} is out"}


def test_chat_a_match_split_inside_one_event_across_two_chunks_is_redacted() -> None:
    frame = chat_chunk({"content": "the secret word"})
    cut = frame.index(b"cret")
    out = run(guard("chat"), [frame[:cut], frame[cut:], chat_chunk({}, "stop")])
    assert delivered("chat", out) == {("content", 0): f"the {SECRET} word"}


def test_with_hold_the_last_window_less_one_characters_are_held_back() -> None:
    guarded = guard("chat")
    out = guarded.feed(chat_chunk({"content": "abcdefghij"}))
    assert delivered("chat", out) == {("content", 0): "abcdefghij"[: 10 - (WINDOW - 1)]}


def test_a_redaction_ending_inside_the_held_window_goes_out_whole() -> None:
    guarded = guard("chat")
    out = guarded.feed(chat_chunk({"content": "a secret"}))
    out += guarded.feed(chat_chunk({"content": " and more text"}))
    assert delivered("chat", out)[("content", 0)].startswith(f"a {SECRET}")


def test_adjacent_matches_released_at_different_times_merge_into_one_redaction() -> None:
    out = run(guard("chat"), chat_stream("secret", "secret!"))
    assert delivered("chat", out) == {("content", 0): f"{SECRET}!"}


def test_the_same_match_seen_in_several_rescans_reaches_seen_once() -> None:
    seen: list[Hit] = []
    run(guard("chat", seen.append), chat_stream("hello", "", "x", "y", " world"))
    assert [(hit.rule_id, hit.action, hit.start) for hit in seen] == [("hello", "flag", 0)]


def test_seen_hits_carry_offsets_into_the_channels_whole_text() -> None:
    seen: list[Hit] = []
    run(guard("chat", seen.append), chat_stream("0123456789", "abc secret"))
    assert [(hit.start, hit.end) for hit in seen] == [(14, 20)]


def test_non_ascii_text_is_windowed_in_characters_and_emitted_as_valid_json() -> None:
    out = run(guard("chat"), chat_stream("héllo ✓ 🙂 sec", "ret 🙂"))
    assert delivered("chat", out) == {("content", 0): f"héllo ✓ 🙂 {SECRET} 🙂"}


# -- block --------------------------------------------------------------------------------------------


def test_a_block_match_raises_with_the_hit() -> None:
    guarded = guard("chat")
    guarded.feed(chat_chunk({"content": "it goes bo"}))
    with pytest.raises(AnswerBlocked) as blocked:
        guarded.feed(chat_chunk({"content": "om now"}))
    assert (blocked.value.hit.rule_id, blocked.value.hit.start) == ("boom", 8)


def test_no_character_of_a_block_match_is_released_before_it_raises() -> None:
    guarded = guard("chat")
    released = b""
    with pytest.raises(AnswerBlocked) as blocked:
        for piece in [chat_chunk({"content": c}) for c in "it goes boom now"]:
            released += guarded.feed(piece)
    released += blocked.value.tail
    assert "it goes ".startswith(delivered("chat", released)[("content", 0)])


def test_the_block_hit_reaches_seen_before_the_guard_raises() -> None:
    seen: list[Hit] = []
    with pytest.raises(AnswerBlocked):
        run(guard("chat", seen.append), chat_stream("boom"))
    assert [hit.action for hit in seen] == ["block"]


def test_what_a_chunk_released_before_a_block_is_kept_in_the_exception() -> None:
    guarded = guard("chat")
    with pytest.raises(AnswerBlocked) as blocked:
        guarded.feed(chat_chunk({"content": "safe text here, "}) + chat_chunk({"content": "boom"}))
    assert delivered("chat", blocked.value.tail) == {("content", 0): "safe text h"}


def test_text_of_the_blocked_event_is_neither_sent_nor_counted_as_released() -> None:
    guarded = guard("chat")
    choices = [
        {"index": 0, "delta": {"content": "plenty of safe text"}, "finish_reason": None},
        {"index": 1, "delta": {"content": "boom"}, "finish_reason": None},
    ]
    with pytest.raises(AnswerBlocked) as blocked:
        guarded.feed(data_frame({"id": "chatcmpl-1", "choices": choices}))
    assert (blocked.value.tail, guarded.released_chars) == (b"", 0)


# -- flag only: nothing held --------------------------------------------------------------------------


def test_without_hold_every_chunk_passes_as_it_came() -> None:
    stream = b"".join(chat_stream("say hel", "lo to all"))
    guarded = guard("chat", hold=False)
    for piece in split(stream, 5):
        assert guarded.feed(piece) is piece
    assert guarded.finish() == b""


def test_without_hold_a_match_across_chunks_is_still_seen() -> None:
    seen: list[Hit] = []
    run(guard("chat", seen.append, hold=False), split(b"".join(chat_stream("say hel", "lo to all")), 5))
    assert [(hit.rule_id, hit.start, hit.end) for hit in seen] == [("hello", 4, 9)]


def test_without_hold_every_match_of_a_long_answer_is_seen_once_with_its_offset() -> None:
    seen: list[Hit] = []
    words = ["filler "] * 100 + ["hel", "lo "] + ["filler "] * 100 + ["hello"]
    run(guard("chat", seen.append, hold=False), chat_stream(*words))
    assert [(hit.rule_id, hit.start) for hit in seen] == [("hello", 700), ("hello", 1406)]


# -- wire shapes --------------------------------------------------------------------------------------


def test_chat_choices_of_n_answers_are_kept_apart() -> None:
    stream = [
        chat_chunk({"content": "sec"}, index=0),
        chat_chunk({"content": "ret"}, index=1),
        chat_chunk({"content": "ret"}, index=0),
        chat_chunk({"content": "sec"}, index=1),
        chat_chunk({}, "stop", index=0),
        chat_chunk({}, "stop", index=1),
        DONE_FRAME,
    ]
    out = run(guard("chat"), stream)
    assert delivered("chat", out) == {("content", 0): SECRET, ("content", 1): "retsec"}


def test_chat_tool_call_arguments_are_guarded_per_call() -> None:
    def call(index: int, arguments: str) -> bytes:
        return chat_chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})

    stream = [call(0, '{"q": "sec'), call(1, '{"q": "ret'), call(0, 'ret"}'), call(1, '"}'), DONE_FRAME]
    out = run(guard("chat"), stream)
    assert delivered("chat", out) == {("tool", 0, 0): f'{{"q": "{SECRET}"}}', ("tool", 0, 1): '{"q": "ret"}'}


def test_chat_held_text_is_flushed_just_before_the_finish_reason_chunk() -> None:
    out = run(guard("chat"), chat_stream("the end"))
    flushed, finish = events(out)[-3:-1]
    assert flushed[1]["choices"][0]["delta"] == {"content": "the end"[-(WINDOW - 1) :]}
    assert finish[1]["choices"][0]["finish_reason"] == "stop"


def test_a_flushed_chunk_copies_the_shape_of_the_channels_last_delta() -> None:
    out = run(guard("chat"), chat_stream("the end"))
    flushed = events(out)[-3][1]
    assert {k: flushed[k] for k in ("id", "object", "created", "model")} == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test",
    }


def test_chat_held_text_is_flushed_before_done_when_no_finish_reason_came() -> None:
    out = run(guard("chat"), [chat_chunk({"content": "the end"}), DONE_FRAME])
    assert events(out)[-1] == (None, "[DONE]")
    assert delivered("chat", out) == {("content", 0): "the end"}


def test_held_text_is_flushed_at_finish_when_the_stream_just_stops() -> None:
    out = run(guard("chat"), [chat_chunk({"content": "cut short"})])
    assert delivered("chat", out) == {("content", 0): "cut short"}


def test_completions_text_is_redacted_and_flushed_with_its_finish_reason() -> None:
    stream = [completion_chunk("a sec"), completion_chunk("ret b"), completion_chunk("", "stop"), DONE_FRAME]
    out = run(guard("completions"), stream)
    assert delivered("completions", out) == {("text", 0): f"a {SECRET} b"}


def test_responses_text_deltas_are_redacted() -> None:
    out = run(guard("responses"), responses_stream("a sec", "ret b"))
    assert delivered("responses", out) == {("response.output_text.delta", 0): f"a {SECRET} b"}


def test_responses_events_carrying_the_whole_text_are_redacted_whole() -> None:
    out = run(guard("responses"), responses_stream("a sec", "ret b"))
    whole = {name: data for name, data in events(out)}
    assert whole["response.output_text.done"]["text"] == f"a {SECRET} b"
    assert whole["response.content_part.done"]["part"]["text"] == f"a {SECRET} b"
    assert whole["response.output_item.done"]["item"]["content"][0]["text"] == f"a {SECRET} b"
    assert whole["response.completed"]["response"]["output"][0]["content"][0]["text"] == f"a {SECRET} b"


def test_responses_held_text_is_flushed_just_before_output_text_done() -> None:
    out = run(guard("responses"), responses_stream("the end"))
    names = [name for name, _ in events(out)]
    done = names.index("response.output_text.done")
    assert names[done - 1] == "response.output_text.delta"
    assert events(out)[done - 1][1]["delta"] == "the end"[-(WINDOW - 1) :]


def test_responses_function_call_arguments_are_redacted_in_deltas_and_done() -> None:
    def event(kind: str, **fields: Any) -> bytes:
        return event_frame(kind, {"type": kind, "output_index": 1, **fields})

    stream = [
        event("response.function_call_arguments.delta", delta='{"a":"sec'),
        event("response.function_call_arguments.delta", delta='ret"}'),
        event("response.function_call_arguments.done", arguments='{"a":"secret"}'),
    ]
    out = run(guard("responses"), stream)
    expected = f'{{"a":"{SECRET}"}}'
    assert delivered("responses", out) == {("response.function_call_arguments.delta", 1): expected}
    assert events(out)[-1][1]["arguments"] == expected


def test_messages_text_deltas_are_redacted() -> None:
    out = run(guard("messages"), messages_stream("a sec", "ret b"))
    assert delivered("messages", out) == {("block", 0): f"a {SECRET} b"}


def test_messages_held_text_is_flushed_just_before_content_block_stop() -> None:
    out = run(guard("messages"), messages_stream("the end"))
    names = [name for name, _ in events(out)]
    stop = names.index("content_block_stop")
    assert events(out)[stop - 1][1]["delta"] == {"type": "text_delta", "text": "the end"[-(WINDOW - 1) :]}


def test_messages_tool_input_json_is_guarded_per_block() -> None:
    stream = [
        message_delta(1, "input_json_delta", '{"q":"se'),
        message_delta(2, "input_json_delta", '{"q":"cr'),
        message_delta(1, "input_json_delta", 'cret"}'),
        message_delta(2, "input_json_delta", 'et"}'),
        event_frame("content_block_stop", {"type": "content_block_stop", "index": 1}),
        event_frame("content_block_stop", {"type": "content_block_stop", "index": 2}),
    ]
    out = run(guard("messages"), stream)
    assert delivered("messages", out) == {("block", 1): f'{{"q":"{SECRET}"}}', ("block", 2): '{"q":"cret"}'}


def test_a_messages_delta_whose_text_is_all_held_is_left_out() -> None:
    assert guard("messages").feed(message_delta(0, "text_delta", "abc")) == b""


def test_a_chat_chunk_whose_text_is_all_held_goes_out_with_empty_content() -> None:
    out = guard("chat").feed(chat_chunk({"content": "abc"}))
    assert events(out)[0][1]["choices"][0]["delta"] == {"content": ""}


def test_events_without_text_pass_byte_identical() -> None:
    stream = messages_stream("a secret")
    out = run(guard("messages"), stream)
    for frame in (stream[0], stream[1], stream[2], *stream[-3:]):
        assert frame in out


def test_a_chunk_without_text_passes_untouched_when_nothing_is_held() -> None:
    chunk = b": ping\n\n" + event_frame("ping", {"type": "ping"})
    assert guard("messages").feed(chunk) is chunk


def test_crlf_line_endings_are_understood() -> None:
    stream = b"".join(chat_stream("a sec", "ret")).replace(b"\n", b"\r\n")
    out = run(guard("chat"), split(stream, 3))
    assert delivered("chat", out) == {("content", 0): f"a {SECRET}"}


# -- whatever the cuts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "stream"),
    [
        ("chat", chat_stream("hé sec", "ret ✓ and ", "secret", "!")),
        ("responses", responses_stream("hé sec", "ret ✓ and ", "secret", "!")),
        ("messages", messages_stream("hé sec", "ret ✓ and ", "secret", "!")),
    ],
)
def test_a_stream_cut_at_every_byte_offset_gives_the_same_text(wire: str, stream: list[bytes]) -> None:
    whole = b"".join(stream)
    expected = delivered(wire, run(guard(wire), [whole]))
    assert next(iter(expected.values())) == f"hé {SECRET} ✓ and {SECRET}!"
    for cut in range(1, len(whole)):
        assert delivered(wire, run(guard(wire), [whole[:cut], whole[cut:]])) == expected, cut


def test_released_chars_counts_the_text_characters_passed_on() -> None:
    guarded = guard("chat")
    guarded.feed(chat_chunk({"content": "abcdefghij"}))
    assert guarded.released_chars == 10 - (WINDOW - 1)
    guarded.feed(chat_chunk({}, "stop"))
    assert guarded.released_chars == 10


def test_released_chars_without_hold_counts_every_text_character() -> None:
    guarded = guard("chat", hold=False)
    run(guarded, chat_stream("abc", "de"))
    assert guarded.released_chars == 5


def test_an_unknown_wire_format_is_refused() -> None:
    with pytest.raises(ValueError, match="wire"):
        guard("grpc")


# -- the SDKs read what the guard emits -------------------------------------------------------------


def sse_response(body: bytes, path: str) -> httpx.Response:
    request = httpx.Request("POST", "http://gateway.test" + path)
    return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"}, request=request)


def test_the_openai_sdk_reads_the_redacted_chat_stream() -> None:
    body = run(guard("chat"), split(b"".join(chat_stream("a sec", "ret ", "b")), 4))
    client = openai.OpenAI(api_key="test", base_url="http://gateway.test/v1")
    chunks = openai.Stream(
        cast_to=ChatCompletionChunk, response=sse_response(body, "/v1/chat/completions"), client=client
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == f"a {SECRET} b"


def test_the_openai_sdk_reads_the_redacted_responses_stream() -> None:
    body = run(guard("responses"), split(b"".join(responses_stream("a sec", "ret ", "b")), 4))
    client = openai.OpenAI(api_key="test", base_url="http://gateway.test/v1")
    stream = openai.Stream(
        cast_to=ResponseStreamEvent, response=sse_response(body, "/v1/responses"), client=client
    )
    parsed = list(stream)
    text = "".join(e.delta for e in parsed if e.type == "response.output_text.delta")
    assert text == parsed[-1].response.output_text == f"a {SECRET} b"


def test_the_anthropic_sdk_reads_the_redacted_messages_stream() -> None:
    body = run(guard("messages"), split(b"".join(messages_stream("a sec", "ret ", "b")), 4))
    client = anthropic.Anthropic(api_key="test", base_url="http://gateway.test")
    stream = anthropic.Stream(
        cast_to=RawMessageStreamEvent, response=sse_response(body, "/v1/messages"), client=client
    )
    text = "".join(e.delta.text for e in stream if e.type == "content_block_delta")
    assert text == f"a {SECRET} b"
