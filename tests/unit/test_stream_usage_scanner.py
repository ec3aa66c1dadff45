"""The stream usage scanner: the provider's usage and the generated text relayed, however the stream is cut
into chunks and whichever line ending the provider uses; the final event noticed per wire format."""

from __future__ import annotations

import orjson
import pytest

from modelgate.domain.usage import StreamUsageScanner, complete_events_end, usage_objects_at
from modelgate.proxy.pipeline.route_table import ROUTES


def _chat_stream(newline: bytes) -> bytes:
    events = [
        {"model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"model": "m", "choices": [{"index": 0, "delta": {"content": "Hello there"}}], "usage": None},
        {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None},
        {"model": "m", "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 3}},
    ]
    frames = [b"data: " + orjson.dumps(event) + newline + newline for event in events]
    return b"".join(frames) + b"data: [DONE]" + newline + newline


_ROUTES = {route.name: route for route in ROUTES}


def _scan(stream: bytes, step: int, route: str = "chat_completions") -> StreamUsageScanner:
    scanner = StreamUsageScanner(_ROUTES[route].final_events)
    for start in range(0, len(stream), step):
        scanner.feed(stream[start : start + step])
    return scanner


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("step", [1, 7, 64, 10_000])
def test_usage_is_found_however_the_stream_is_cut_and_whatever_its_line_ending(
    newline: bytes, step: int
) -> None:
    scanner = _scan(_chat_stream(newline), step)

    assert scanner.usage is not None
    assert (scanner.usage.input_tokens, scanner.usage.output_tokens) == (11, 3)
    assert scanner.final


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_nothing_is_held_back_once_every_event_is_complete(newline: bytes) -> None:
    scanner = _scan(_chat_stream(newline), 10_000)

    assert scanner._carry == b""


def test_usage_null_in_every_chunk_is_no_usage() -> None:
    usage = b'"usage":{"prompt_tokens":11,"completion_tokens":3}'
    stream = _chat_stream(b"\n").replace(usage, b'"usage":null')

    assert _scan(stream, 10_000).usage is None


def test_generated_text_is_measured_in_whole_chunks() -> None:
    scanner = _scan(_chat_stream(b"\n"), 10_000)

    assert scanner.generated == (1, len("Hello there"))
    assert scanner.content_tokens == 3


@pytest.mark.parametrize(
    ("route", "final_event", "other_format_final"),
    [
        ("chat_completions", b"data: [DONE]\n\n", b'event: message_stop\ndata: {"type":"message_stop"}\n\n'),
        ("completions", b"data: [DONE]\n\n", b'event: message_stop\ndata: {"type":"message_stop"}\n\n'),
        ("messages", b'event: message_stop\ndata: {"type":"message_stop"}\n\n', b"data: [DONE]\n\n"),
        (
            "responses",
            b'event: response.completed\ndata: {"type":"response.completed","response":{}}\n\n',
            b"data: [DONE]\n\n",
        ),
        (
            "responses",
            b'event: response.incomplete\ndata: {"type":"response.incomplete","response":{}}\n\n',
            b"data: [DONE]\n\n",
        ),
    ],
)
def test_the_final_event_is_the_one_of_the_routes_wire_format(
    route: str, final_event: bytes, other_format_final: bytes
) -> None:
    assert _scan(final_event, 10_000, route).final
    assert not _scan(other_format_final, 10_000, route).final


def test_a_route_of_another_format_knows_every_final_event() -> None:
    assert _scan(b"data: [DONE]\n\n", 10_000, "audio_speech").final
    assert _scan(b'data: {"type":"message_stop"}\n\n', 10_000, "audio_speech").final


def test_generated_text_of_a_long_stream_is_measured_as_it_passes_and_when_asked() -> None:
    scanner = StreamUsageScanner(_ROUTES["chat_completions"].final_events)
    event = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 100 + b'"}}]}\n\n'
    for _ in range(400):  # about 40 KiB: measured in batches on the way, the rest when asked
        scanner.feed(event)

    assert len(scanner._unmeasured) < 400
    assert scanner.generated == (400, 40_000)
    assert scanner.content_tokens == 10_000


def _last_blank_line_end(data: bytes, start: int, end: int) -> int:
    """complete_events_end written the obvious way: every position of data[start:end] tried."""
    best = 0
    for position in range(start, end):
        for blank in (b"\n\n", b"\n\r\n"):
            if data.startswith(blank, position) and position + len(blank) <= end:
                best = max(best, position + len(blank))
    return best


def test_complete_events_end_finds_the_last_blank_line_of_either_ending_within_its_bounds() -> None:
    # Every string of up to 7 bytes over LF, CR and one other byte, at every (start, end): mixed endings,
    # a CR LF blank line just after, overlapping and just before an LF one, and bounds cutting through them.
    alphabet = (b"\n", b"\r", b"a")
    strings = [b""]
    for _ in range(7):
        strings = [text + letter for text in strings for letter in alphabet] + [b""]
    checked = 0
    for data in set(strings):
        for start in range(len(data) + 1):
            for end in range(start, len(data) + 1):
                expected = _last_blank_line_end(data, start, end)
                assert complete_events_end(data, start, end) == expected, (data, start, end)
                checked += 1
        assert complete_events_end(data) == _last_blank_line_end(data, 0, len(data))
    assert checked > 30_000


def test_usage_objects_are_found_alike_in_a_whole_chunk_and_within_bounds() -> None:
    """The whole-chunk search (no bounds given to the counts) and the bounded one agree, and neither finds
    a usage object past `end` or a `"usage":null`."""
    stream = _chat_stream(b"\n") + b'data: {"usage":{"prompt_tokens":1}}'  # an unfinished event after
    for end in range(len(stream) + 1):
        data = stream[:end]
        whole = list(usage_objects_at(data, len(data)))
        assert whole == list(usage_objects_at(stream, end)), end
        assert all(data[start:stop].startswith(b'"usage":{') for start, stop in whole)
    assert usage_objects_at(stream, stream.index(b"data: [DONE]")) == [
        (stream.index(b'"usage":{'), stream.index(b'"usage":{') + 9)
    ]
