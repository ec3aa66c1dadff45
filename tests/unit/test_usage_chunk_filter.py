"""UsageChunkFilter on raw SSE bytes: events pass as they complete, whatever their line endings; only the
usage the client did not ask for and the provider's price are taken out."""

from __future__ import annotations

import orjson
import pytest

from modelgate.domain import answer_filters
from modelgate.domain.answer_filters import UsageChunkFilter
from modelgate.domain.usage import OPENAI_DONE, StreamUsageScanner, usage_objects_at
from modelgate.proxy.translation.model_name import ModelNameStream

USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8, "cost": 0.01}


def _event(payload: dict, newline: bytes) -> bytes:
    return b"data: " + orjson.dumps(payload) + newline + newline


def _content(text: str, **extra) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}], **extra}


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_each_event_passes_unchanged_as_soon_as_it_is_complete(newline) -> None:
    stream = UsageChunkFilter(strip_usage=False)
    first, second = _event(_content("a"), newline), _event(_content("b"), newline)
    assert stream.feed(first) == first
    assert stream.feed(second[:10]) == b""  # unfinished: held only until its blank line
    assert stream.feed(second[10:]) == second
    assert stream.finish() == b""


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_a_usage_only_event_not_asked_for_is_dropped_with_its_blank_line(newline) -> None:
    stream = UsageChunkFilter(strip_usage=True)
    content = _event(_content("a", usage=None), newline)
    usage_only = _event({"object": "chat.completion.chunk", "choices": [], "usage": USAGE}, newline)
    done = b"data: [DONE]" + newline + newline
    assert stream.feed(content + usage_only + done) == content + done


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_usage_on_the_last_content_event_is_taken_out_and_the_content_kept(newline) -> None:
    stream = UsageChunkFilter(strip_usage=True)
    out = stream.feed(_event(_content("end", usage=USAGE, cost=0.01), newline))
    assert out.endswith(newline + newline) and out.count(newline) == 2
    assert orjson.loads(out[6:]) == _content("end")


def test_a_client_that_asked_for_usage_gets_it_without_the_price() -> None:
    stream = UsageChunkFilter(strip_usage=False)
    out = stream.feed(_event({"choices": [], "usage": USAGE, "cost": 0.01}, b"\n"))
    assert orjson.loads(out[6:]) == {"choices": [], "usage": {k: v for k, v in USAGE.items() if k != "cost"}}


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_only_the_events_carrying_a_price_or_usage_change_in_a_chunk_of_many(newline) -> None:
    stream = UsageChunkFilter(strip_usage=True)
    plain = [_event(_content(text, usage=None), newline) for text in ("a", "b", "c")]
    priced = _event(_content("d", cost=0.5), newline)
    usage_only = _event({"object": "chat.completion.chunk", "choices": [], "usage": USAGE}, newline)
    done = b"data: [DONE]" + newline + newline

    out = stream.feed(plain[0] + priced + plain[1] + usage_only + plain[2] + done)

    unpriced = _event(_content("d"), newline)
    assert out == plain[0] + unpriced + plain[1] + plain[2] + done


@pytest.mark.parametrize("choices", [1.5, "text", {"index": 0, "delta": {"content": "x"}}, True])
def test_usage_next_to_choices_that_are_not_a_list_is_taken_out_and_the_event_kept(choices) -> None:
    # A provider's odd `choices` is relayed as it is: the filter does not fail on it (it raised TypeError).
    stream = UsageChunkFilter(strip_usage=True)
    out = stream.feed(_event({"object": "chat.completion.chunk", "choices": choices, "usage": USAGE}, b"\n"))
    assert orjson.loads(out[6:]) == {"object": "chat.completion.chunk", "choices": choices}


def _metered_stream(newline: bytes, model: str) -> bytes:
    plain = [_event({**_content(text, usage=None), "model": model}, newline) for text in ("a", "b")]
    unpriced = {name: value for name, value in USAGE.items() if name != "cost"}  # found as usage alone
    usage_only = _event(
        {"object": "chat.completion.chunk", "model": model, "choices": [], "usage": unpriced}, newline
    )
    priced = _event({**_content("c", usage=None), "model": model, "cost": 0.5}, newline)
    return b"".join([plain[0], usage_only, plain[1], priced]) + b"data: [DONE]" + newline + newline


def _relay(stream: bytes, step: int, *, shared: bool, client_model: str) -> bytes:
    """The stream through the chain's steps in order: metering scanner, model rename, usage filter."""
    scanner = StreamUsageScanner(OPENAI_DONE)
    renamer = ModelNameStream(client_model)
    chunk_filter = UsageChunkFilter(strip_usage=True, scanner=scanner if shared else None)
    out = []
    for start in range(0, len(stream), step):
        piece = stream[start : start + step]
        scanner.feed(piece)
        out.append(chunk_filter.feed(renamer.feed(piece)))
    out.append(chunk_filter.feed(renamer.finish()) + chunk_filter.finish())
    assert scanner.usage is not None and scanner.usage.input_tokens == USAGE["prompt_tokens"]
    return b"".join(out)


# A long name moves every later byte of a renamed chunk by more than an event's length.
RENAMED = "renamed-by-the-row-" * 20


@pytest.mark.parametrize("client_model", ["m", RENAMED])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("step", [1, 9, 80, 10_000])
def test_a_filter_taking_the_scanners_search_answers_exactly_as_one_searching_itself(
    step: int, newline: bytes, client_model: str
) -> None:
    stream = _metered_stream(newline, "m")
    expected = _relay(stream, step, shared=False, client_model=client_model)
    assert _relay(stream, step, shared=True, client_model=client_model) == expected
    assert b'"usage":{' not in expected and b'"cost"' not in expected and expected.count(b"data:") == 4


@pytest.mark.parametrize(("client_model", "searches"), [("m", 0), (RENAMED, 1)])
def test_the_filter_searches_a_chunk_again_only_when_it_is_not_the_one_the_scanner_searched(
    monkeypatch: pytest.MonkeyPatch, client_model: str, searches: int
) -> None:
    calls = []

    def counted(data: bytes, end: int) -> list[tuple[int, int]]:
        calls.append(end)
        return usage_objects_at(data, end)

    monkeypatch.setattr(answer_filters, "usage_objects_at", counted)
    stream = _metered_stream(b"\n", "m")
    # One chunk, as the provider's whole answer arrives: renamed (a new bytes object) or passed as it came.
    assert _relay(stream, len(stream), shared=True, client_model=client_model) == _relay(
        stream, len(stream), shared=False, client_model=client_model
    )
    assert len(calls) == searches + 1  # the unshared filter's own search, then the shared one's if any
