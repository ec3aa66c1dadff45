"""StreamedMultipart's text guard: every text field is checked whole before any of its bytes are relayed,
its answer is what goes upstream, a refusal aborts the upload, and file parts still stream; whatever the
chunks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from modelgate.domain.errors import InvalidRequest, PolicyBlocked
from modelgate.proxy.http.multipart import FIELD_MAX, MultipartLimits, StreamedMultipart
from tests.unit.test_multipart import BOUNDARY, body

CONTENT_TYPE = "multipart/form-data; boundary=" + BOUNDARY.decode()
LIMITS = MultipartLimits(total=10**8, part=10**8)

BODY = body(
    ("model", None, b"image-test"),
    ("prompt", None, b"my secret cat"),
    ("image", "a.png", bytes(range(40))),
    ("n", None, b"2"),
)
REDACTED = BODY.replace(b"my secret cat", b"my [REDACTED:word] cat")


class Chunks:
    """A client's body arriving in the given chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    async def readany(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


def splits(data: bytes) -> Iterator[list[bytes]]:
    """The body whole, cut in two at every point, and byte by byte."""
    yield [data]
    for cut in range(1, len(data)):
        yield [data[:cut], data[cut:]]
    yield [data[i : i + 1] for i in range(len(data))]


class Recorder:
    """A guard that lets every value through, recording each call and how many bytes had been sent by then."""

    def __init__(self, sent: list[bytes] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.sent_before: dict[str, int] = {}
        self._sent = sent if sent is not None else []

    def __call__(self, name: str, value: str) -> str:
        self.calls.append((name, value))
        self.sent_before[name] = len(b"".join(self._sent))
        return value


def redact(name: str, value: str) -> str:
    return value.replace("secret", "[REDACTED:word]")


async def opened(chunks: list[bytes], declared: int | None = None) -> StreamedMultipart:
    stream = StreamedMultipart(Chunks(chunks), CONTENT_TYPE, LIMITS, declared)
    await stream.read_head()
    return stream


async def relayed(stream: StreamedMultipart) -> bytes:
    return b"".join([chunk async for chunk in stream])


async def test_without_a_guard_the_body_is_relayed_unchanged_whatever_the_chunks() -> None:
    for chunks in splits(BODY):
        stream = await opened(chunks, len(BODY))
        assert await relayed(stream) == BODY
        assert stream.length == len(BODY)


async def test_the_guard_s_answer_replaces_the_field_whatever_the_chunks() -> None:
    for chunks in splits(BODY):
        stream = await opened(chunks)
        stream.set_text_guard(redact)
        assert await relayed(stream) == REDACTED, chunks


async def test_the_guard_sees_every_text_field_but_the_model_once_in_body_order() -> None:
    for chunks in splits(BODY):
        guard = Recorder()
        stream = await opened(chunks)
        stream.set_text_guard(guard)
        await relayed(stream)
        assert guard.calls == [("prompt", "my secret cat"), ("n", "2")], chunks


async def test_no_byte_of_a_text_field_is_relayed_before_the_guard_has_seen_it() -> None:
    for chunks in splits(BODY):
        sent: list[bytes] = []
        guard = Recorder(sent)
        stream = await opened(chunks)
        stream.set_text_guard(guard)
        async for chunk in stream:
            sent.append(chunk)
        assert guard.sent_before["prompt"] <= BODY.index(b"my secret cat"), chunks
        assert guard.sent_before["n"] <= BODY.rindex(b"\r\n2\r\n") + 2, chunks


async def test_a_refusal_after_the_head_aborts_the_upload_before_the_field_leaves() -> None:
    def block(name: str, value: str) -> str:
        if name == "n":
            raise PolicyBlocked("blocked by a content rule")
        return value

    for chunks in splits(BODY):
        stream = await opened(chunks)
        if "n" in stream.fields:
            continue  # the field is in the head: checked when the guard is installed (next test)
        stream.set_text_guard(block)
        sent: list[bytes] = []
        with pytest.raises(PolicyBlocked):
            async for chunk in stream:
                sent.append(chunk)
        assert isinstance(stream.error, PolicyBlocked)
        assert len(b"".join(sent)) <= BODY.rindex(b"\r\n2\r\n") + 2, chunks


async def test_a_refusal_of_a_field_in_the_head_is_raised_when_the_guard_is_installed() -> None:
    stream = await opened([BODY])

    def block(name: str, value: str) -> str:
        raise PolicyBlocked(f"blocked: {name}")

    with pytest.raises(PolicyBlocked, match="blocked: prompt"):
        stream.set_text_guard(block)


async def test_fields_in_the_head_are_checked_when_the_guard_is_installed() -> None:
    guard = Recorder()
    stream = await opened([BODY])
    stream.set_text_guard(guard)
    assert [name for name, _ in guard.calls] == ["prompt", "n"]


async def test_a_body_whole_in_the_head_keeps_an_exact_content_length_after_edits() -> None:
    stream = await opened([BODY], len(BODY))
    stream.rewrite_model("gpt-image-upstream")
    stream.set_text_guard(redact)
    sent = await relayed(stream)
    assert sent == REDACTED.replace(b"image-test", b"gpt-image-upstream")
    assert stream.length == len(sent)


async def test_a_guarded_body_still_arriving_is_sent_without_a_content_length() -> None:
    cut = BODY.index(b"my secret")
    stream = await opened([BODY[:cut], BODY[cut:]], len(BODY))
    stream.set_text_guard(redact)
    assert stream.length is None
    assert await relayed(stream) == REDACTED


async def test_the_model_rewrite_and_redactions_apply_together_whatever_the_chunks() -> None:
    expected = REDACTED.replace(b"image-test", b"up")
    for chunks in splits(BODY):
        stream = await opened(chunks)
        stream.set_text_guard(redact)
        stream.rewrite_model("up")
        assert await relayed(stream) == expected, chunks


async def test_every_field_of_a_repeated_name_is_checked() -> None:
    data = body(("model", None, b"m"), ("prompt", None, b"secret one"), ("prompt", None, b"secret two"))
    for chunks in splits(data):
        stream = await opened(chunks)
        stream.set_text_guard(redact)
        assert await relayed(stream) == data.replace(b"secret", b"[REDACTED:word]"), chunks


async def test_a_replacement_is_sent_as_utf_8() -> None:
    stream = await opened([BODY])
    stream.set_text_guard(lambda name, value: "caf\u00e9 \u2603" if name == "prompt" else value)
    assert await relayed(stream) == BODY.replace(b"my secret cat", "caf\u00e9 \u2603".encode())


async def test_a_field_the_guard_leaves_alone_keeps_its_bytes_even_when_not_utf_8() -> None:
    data = body(("model", None, b"m"), ("prompt", None, b"caf\xe9"))
    stream = await opened([data])
    stream.set_text_guard(Recorder())
    assert await relayed(stream) == data


async def test_the_guarded_fields_are_what_the_stream_reports() -> None:
    stream = await opened([BODY])
    stream.set_text_guard(redact)
    await relayed(stream)
    assert stream.fields["prompt"] == "my [REDACTED:word] cat"


LARGE = body(("model", None, b"m"), ("prompt", None, b"x" * (FIELD_MAX + 1)))


async def test_a_text_field_too_large_to_check_is_400_naming_it_and_the_limit() -> None:
    cut = LARGE.index(b"xxx")
    stream = await opened([LARGE[:cut], LARGE[cut:]])
    stream.set_text_guard(redact)
    with pytest.raises(InvalidRequest, match=r"'prompt' is larger than the 64 KiB"):
        await relayed(stream)
    assert isinstance(stream.error, InvalidRequest)


async def test_a_text_field_too_large_to_check_in_the_head_is_400_when_the_guard_is_installed() -> None:
    stream = await opened([LARGE])
    with pytest.raises(InvalidRequest, match=r"'prompt' is larger than the 64 KiB"):
        stream.set_text_guard(redact)


async def test_a_text_field_of_exactly_the_limit_is_checked() -> None:
    data = body(("model", None, b"m"), ("prompt", None, b"x" * FIELD_MAX))
    guard = Recorder()
    stream = await opened([data[:100], data[100:]])
    stream.set_text_guard(guard)
    assert await relayed(stream) == data
    assert [len(value) for _, value in guard.calls] == [FIELD_MAX]


async def test_without_a_guard_a_large_text_field_passes_through_unread() -> None:
    stream = await opened([LARGE[:100], LARGE[100:]])
    assert await relayed(stream) == LARGE


async def test_a_file_part_streams_chunk_by_chunk_while_a_guard_is_installed() -> None:
    head = body(("model", None, b"m"))[: -len(BOUNDARY) - 6]  # without the closing delimiter
    head += b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="image"; filename="a"\r\n\r\n'
    blocks = [bytes([i]) * 65536 for i in range(64)]
    tail = b"\r\n--" + BOUNDARY + b"--\r\n"
    stream = await opened([head, *blocks, tail])
    stream.set_text_guard(redact)
    relay = aiter(stream)
    assert await anext(relay) == head
    for block in blocks:
        assert await anext(relay) == block  # each block goes on as it comes: nothing of a file is held
    assert await anext(relay) == tail
