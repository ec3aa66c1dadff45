"""The incremental SSE parser: whole events out, however the bytes were cut on the way in."""

from __future__ import annotations

from modelgate.proxy.translation.sse import SseEvent, SseParser

STREAM = (
    b'event: message_start\ndata: {"type":"message_start"}\n\n'
    b": keep-alive comment\n\n"
    b'data: {"n":1}\n\n'
    b"event: ping\ndata: {}\n\n"
    b"data: [DONE]\n\n"
)
EVENTS = [
    SseEvent("message_start", b'{"type":"message_start"}'),
    SseEvent(None, b'{"n":1}'),
    SseEvent("ping", b"{}"),
    SseEvent(None, b"[DONE]"),
]


def feed_in_pieces(raw: bytes, size: int) -> list[SseEvent]:
    parser = SseParser()
    events: list[SseEvent] = []
    for start in range(0, len(raw), size):
        events += parser.feed(raw[start : start + size])
    return events + parser.finish()


def test_a_whole_stream_in_one_chunk_gives_every_event_in_order() -> None:
    assert feed_in_pieces(STREAM, len(STREAM)) == EVENTS


def test_events_split_at_every_byte_come_out_whole() -> None:
    assert feed_in_pieces(STREAM, 1) == EVENTS


def test_events_split_at_odd_boundaries_come_out_whole() -> None:
    for size in (2, 3, 7, 13, 29):
        assert feed_in_pieces(STREAM, size) == EVENTS, size


def test_an_event_is_held_back_until_its_blank_line_arrives() -> None:
    parser = SseParser()
    assert parser.feed(b'data: {"a":') == []
    assert parser.feed(b"1}\n") == []
    assert parser.feed(b"\n") == [SseEvent(None, b'{"a":1}')]


def test_crlf_line_endings_are_understood_even_when_cut_between_cr_and_lf() -> None:
    raw = b"event: x\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n"
    assert feed_in_pieces(raw, 1) == [SseEvent("x", b"1"), SseEvent(None, b"2")]


def test_several_data_lines_are_joined_with_a_line_feed() -> None:
    assert feed_in_pieces(b"data: first\ndata: second\n\n", 4) == [SseEvent(None, b"first\nsecond")]


def test_a_field_without_a_space_after_the_colon_keeps_its_whole_value() -> None:
    assert feed_in_pieces(b"data:{}\n\n", 64) == [SseEvent(None, b"{}")]


def test_the_last_event_without_its_blank_line_is_returned_by_finish() -> None:
    parser = SseParser()
    assert parser.feed(b"data: [DONE]") == []
    assert parser.finish() == [SseEvent(None, b"[DONE]")]


def test_an_event_name_without_data_dispatches_nothing() -> None:
    assert feed_in_pieces(b"event: lonely\n\ndata: 1\n\n", 64) == [SseEvent(None, b"1")]
