"""The streaming multipart scanner: the same answer however the body is split into chunks, limits counted
exactly, and only a delimiter's length carried between chunks."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest, RequestTooLarge
from modelgate.proxy.http.multipart import MultipartLimits, MultipartScanner, boundary_of

BOUNDARY = b"XyZ-boundary"
LIMITS = MultipartLimits(total=10_000, part=1_000)


def body(*parts: tuple[str, str | None, bytes], preamble: bytes = b"") -> bytes:
    out = preamble
    for name, filename, content in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += b"--" + BOUNDARY + b"\r\nContent-Disposition: " + disposition.encode() + b"\r\n\r\n"
        out += content + b"\r\n"
    return out + b"--" + BOUNDARY + b"--\r\n"


def scan(data: bytes, step: int, limits: MultipartLimits = LIMITS) -> MultipartScanner:
    scanner = MultipartScanner(BOUNDARY, limits)
    for start in range(0, len(data), step):
        scanner.feed(data[start : start + step])
    scanner.finish()
    return scanner


SAMPLE = body(
    ("prompt", None, b"a cat\r\n--not-the-boundary"),
    ("model", None, b"image-test"),
    ("image", "a.png", bytes(range(256)) * 3),
    ("n", None, b"2"),
)


@pytest.mark.parametrize("step", [1, 2, 3, 7, 13, 64, 1000, len(SAMPLE)])
def test_any_chunking_gives_the_same_fields_and_spans(step: int) -> None:
    scanner = scan(SAMPLE, step)
    assert scanner.fields == {"prompt": "a cat\r\n--not-the-boundary", "model": "image-test", "n": "2"}
    start, end = scanner.spans["model"]
    assert SAMPLE[start:end] == b"image-test"
    assert scanner.complete and not scanner.file_before_model
    assert scanner.total == len(SAMPLE)


def test_a_file_before_the_model_is_noticed() -> None:
    scanner = scan(body(("image", "a.png", b"xx"), ("model", None, b"m")), 5)
    assert scanner.file_before_model


@pytest.mark.parametrize("step", [1, 9, 4096])
def test_a_part_of_exactly_the_limit_passes_and_one_byte_more_is_413(step: int) -> None:
    scan(body(("model", None, b"m"), ("image", "a.png", b"x" * 1000)), step)
    with pytest.raises(RequestTooLarge, match="part 'image'"):
        scan(body(("model", None, b"m"), ("image", "a.png", b"x" * 1001)), step)


def test_the_whole_body_limit_is_counted_on_raw_bytes() -> None:
    data = body(*[(f"f{i}", "f.bin", b"x" * 900) for i in range(12)])
    with pytest.raises(RequestTooLarge, match="request body"):
        scan(data, 512)


def test_a_preamble_and_an_epilogue_are_ignored() -> None:
    scanner = scan(body(("model", None, b"m"), preamble=b"this is a preamble\r\n") + b"epilogue", 3)
    assert scanner.fields == {"model": "m"}


@pytest.mark.parametrize(
    "data",
    [b"no boundary here at all" * 1000, body(("model", None, b"m"))[:-6], b"--" + BOUNDARY + b"garbage\r\n"],
    ids=["no-boundary", "no-closing", "text-after-boundary"],
)
def test_malformed_bodies_are_400(data: bytes) -> None:
    with pytest.raises(InvalidRequest):
        scan(data, 100, MultipartLimits(total=10**6, part=10**6))


def test_memory_stays_flat_inside_a_large_part() -> None:
    scanner = MultipartScanner(BOUNDARY, MultipartLimits(total=10**9, part=10**9))
    scanner.feed(b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="f"; filename="f"\r\n\r\n')
    for _ in range(100):
        scanner.feed(b"y" * 65536)
        assert len(scanner._buffer) < len(BOUNDARY) + 4


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("multipart/form-data; boundary=abc", b"abc"),
        ('multipart/form-data; charset=utf-8; boundary="a b"', b"a b"),
    ],
)
def test_the_boundary_is_read_from_the_content_type(content_type: str, expected: bytes) -> None:
    assert boundary_of(content_type) == expected


def test_a_content_type_without_a_boundary_is_400() -> None:
    with pytest.raises(InvalidRequest):
        boundary_of("multipart/form-data")
