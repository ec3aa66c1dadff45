"""The streamed model rename: whatever the chunking and whichever shortcut a chunk takes, the stream comes
out as the answer-field rules say, event by event (the answer's own `model` renamed, nothing else)."""

from __future__ import annotations

import orjson
import pytest

from modelgate.proxy.translation.model_name import ModelNameStream


def _chunk(**fields: object) -> bytes:
    document = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, **fields}
    return b"data: " + orjson.dumps(document) + b"\n\n"


def _delta(content: str, model: str = "upstream-2024") -> bytes:
    return _chunk(model=model, choices=[{"index": 0, "delta": {"content": content}}])


def _relay(stream: bytes, step: int, name: str = "client-model") -> bytes:
    renamer = ModelNameStream(name)
    out = [renamer.feed(stream[start : start + step]) for start in range(0, len(stream), step)]
    return b"".join(out) + renamer.finish()


STEPS = [1, 5, 64, 200, 10_000]

CHAT = b"".join(_delta(word) for word in ("It ", "is ", "sunny")) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("step", STEPS)
def test_every_chat_chunk_names_the_clients_model(step: int) -> None:
    assert _relay(CHAT, step) == CHAT.replace(b'"upstream-2024"', b'"client-model"')


@pytest.mark.parametrize("step", STEPS)
def test_a_stream_already_naming_the_clients_model_passes_unchanged(step: int) -> None:
    assert _relay(CHAT, step, "upstream-2024") == CHAT


@pytest.mark.parametrize("step", STEPS)
def test_a_model_key_inside_a_nested_object_is_left_alone_after_the_same_start(step: int) -> None:
    # The later event starts like the earlier ones but also names a model in a nested object.
    odd = _chunk(model="upstream-2024", choices=[], extra={"model": "inner"})
    stream = _delta("Hi") + odd + _delta("there")

    expected = (
        _delta("Hi", "client-model")
        + _chunk(model="client-model", choices=[], extra={"model": "inner"})
        + _delta("there", "client-model")
    )
    assert _relay(stream, step) == expected


@pytest.mark.parametrize("step", STEPS)
def test_a_nested_model_before_the_answers_own_is_not_taken_for_it(step: int) -> None:
    event = b'data: {"id":"x","meta":{"model":"inner"},"model":"upstream-2024","choices":[]}\n\n'
    stream = _delta("Hi") + event

    expected = _delta("Hi", "client-model") + event.replace(b'"upstream-2024"', b'"client-model"')
    assert _relay(stream, step) == expected


@pytest.mark.parametrize("step", STEPS)
def test_text_that_reads_model_is_not_a_model(step: int) -> None:
    event = _chunk(object="model", model="upstream-2024", choices=[])
    stream = _delta("model") + event

    assert _relay(stream, step) == _delta("model", "client-model") + _chunk(
        object="model", model="client-model", choices=[]
    )


@pytest.mark.parametrize("step", STEPS)
def test_a_model_that_is_not_a_string_is_left_alone(step: int) -> None:
    stream = _delta("Hi") + _chunk(model=None, choices=[])

    assert _relay(stream, step) == _delta("Hi", "client-model") + _chunk(model=None, choices=[])


@pytest.mark.parametrize("step", STEPS)
def test_anthropic_streams_name_the_model_in_message_start_only(step: int) -> None:
    start = {"type": "message_start", "message": {"id": "msg_1", "model": "claude-up", "content": []}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "model"}}
    stream = (
        b"event: message_start\ndata: " + orjson.dumps(start) + b"\n\n"
        b"event: content_block_delta\ndata: " + orjson.dumps(delta) + b"\n\n"
    )

    assert _relay(stream, step) == stream.replace(b'"claude-up"', b'"client-model"')


@pytest.mark.parametrize("step", STEPS)
def test_crlf_events_are_renamed_too(step: int) -> None:
    stream = CHAT.replace(b"\n", b"\r\n")

    assert _relay(stream, step) == stream.replace(b'"upstream-2024"', b'"client-model"')


def test_a_chunk_of_many_events_is_renamed_in_one_replace_once_the_start_is_known() -> None:
    renamer = ModelNameStream("client-model")
    renamer.feed(_delta("first"))

    many = b"".join(_delta(word) for word in ("a", "b", "c"))
    assert renamer.feed(many) == many.replace(b'"upstream-2024"', b'"client-model"')
    assert renamer._head.endswith(b'"model":"upstream-2024"')


@pytest.mark.parametrize("name", ["client-model", "upstream-2024"])
@pytest.mark.parametrize("step", STEPS)
def test_a_last_line_without_its_newline_is_renamed_at_the_end(step: int, name: str) -> None:
    unfinished = CHAT + _delta("!").rstrip(b"\n")  # the stream ends mid-line: held back until the end
    assert _relay(unfinished, step, name) == unfinished.replace(b'"upstream-2024"', orjson.dumps(name))
