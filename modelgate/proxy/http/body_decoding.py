"""Request bodies sent with a `Content-Encoding` (gzip, deflate, br, zstd), decoded as they are read.

aiohttp's own request decompression is off (modelgate/server.py): it hands over decoded bytes while
`Content-Length` still counts the compressed ones, and its failures surface outside any envelope. Here a
body is decoded step by step, each step giving at most about `STEP` bytes, so a small body that expands to
gigabytes (a zip bomb) is stopped by the reader's limit as soon as the decoded bytes pass it, never held.
The compressed bytes are bounded too, by `compressed_allowance`.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import brotli
from aiohttp import web

if TYPE_CHECKING:
    from modelgate.proxy.http.front_request import FrontRequest

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # pragma: no cover - depends on the Python version
    from backports import zstd

STEP = 64 * 1024  # decoded bytes produced per step at most (brotli may pass it by a block)


class BodySource(Protocol):
    """What body readers read from: aiohttp's StreamReader, or a `DecodedContent` over one."""

    async def readany(self) -> bytes:
        """The next bytes of the body; b"" once it has ended."""
        ...


class BodyDecodingError(Exception):
    """A body that cannot be read as its `Content-Encoding` says; `status` is the HTTP answer it gets."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnsupportedEncoding(BodyDecodingError):
    """415: a content coding the gateway does not decode."""

    status = 415


class UndecodableBody(BodyDecodingError):
    """400: garbage or truncated compressed data."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"request body could not be decoded: {reason}")


class CompressedBodyTooLarge(BodyDecodingError):
    """413: more compressed bytes than any body within the limit needs."""

    status = 413


def compressed_allowance(limit: int) -> int:
    """The most compressed bytes a body of at most `limit` decoded bytes can take: data that does not
    compress grows by a few bytes per block in every coding here (well under 1/256), plus its headers."""
    return limit + limit // 256 + 1024


class _Inflater:
    """gzip (members may follow each other, RFC 1952) or deflate (zlib, or raw as some clients send it)."""

    __slots__ = ("_gzip", "_input", "_obj", "_out")

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._obj: zlib._Decompress | None = zlib.decompressobj(wbits=31) if gzip else None
        self._input = b""
        self._out = 0  # size of the last output

    def step(self, data: bytes) -> bytes:
        data = self._input + data if self._input else data
        if self._obj is None:
            # RFC 9110 says zlib format; a first byte that is not a zlib header means raw deflate.
            self._obj = zlib.decompressobj(wbits=15 if data[0] & 0x0F == 8 else -15)
        obj = self._obj
        out = obj.decompress(data, STEP)
        self._input = obj.unconsumed_tail
        if obj.eof and obj.unused_data:
            if not self._gzip:
                raise UndecodableBody("data after the end of the deflate stream")
            # Another gzip member follows (all input after the end is in unused_data; some Pythons
            # leave a copy of it in unconsumed_tail too).
            self._input = obj.unused_data
            self._obj = zlib.decompressobj(wbits=31)
        self._out = len(out)
        return out

    def more(self) -> bool:
        return bool(self._input) or self._out >= STEP

    def ended(self) -> bool:
        return self._obj is not None and self._obj.eof and not self._input


class _Unbrotli:
    __slots__ = ("_obj", "_out")

    def __init__(self) -> None:
        self._obj = brotli.Decompressor()
        self._out = 0  # size of the last output

    def step(self, data: bytes) -> bytes:
        out = self._obj.process(data, output_buffer_limit=STEP)
        self._out = len(out)
        return out

    def more(self) -> bool:
        # A full output may have more behind it even when the decoder would take more input.
        return self._out >= STEP or not self._obj.can_accept_more_data()

    def ended(self) -> bool:
        return self._obj.is_finished()


class _Unzstd:
    """zstd frames, one after the other (RFC 8878 allows several)."""

    __slots__ = ("_input", "_obj")

    def __init__(self) -> None:
        self._obj = zstd.ZstdDecompressor()
        self._input = b""  # the start of the next frame

    def step(self, data: bytes) -> bytes:
        if self._input:
            data, self._input = self._input + data, b""
        obj = self._obj
        if obj.eof:
            if not data:
                return b""
            obj = self._obj = zstd.ZstdDecompressor()
        out = obj.decompress(data, STEP)
        if obj.eof:
            self._input = obj.unused_data
        return out

    def more(self) -> bool:
        return bool(self._input) or (not self._obj.eof and not self._obj.needs_input)

    def ended(self) -> bool:
        return self._obj.eof and not self._input


class _Coding(Protocol):
    def step(self, data: bytes) -> bytes: ...
    def more(self) -> bool: ...
    def ended(self) -> bool: ...


_CODINGS: dict[str, Callable[[], _Coding]] = {
    "gzip": lambda: _Inflater(gzip=True),
    "x-gzip": lambda: _Inflater(gzip=True),
    "deflate": lambda: _Inflater(gzip=False),
    "br": _Unbrotli,
    "zstd": _Unzstd,
}
_DECODER_ERRORS = (zlib.error, brotli.error, zstd.ZstdError, EOFError)


def coding_of(header: str) -> str | None:
    """The content coding a `Content-Encoding` value names; None for identity. 415 for anything else."""
    names = [name.strip().lower() for name in header.split(",") if name.strip()]
    names = [name for name in names if name != "identity"]
    if not names:
        return None
    if len(names) > 1:
        raise UnsupportedEncoding(
            f"content-encoding {header.strip()!r}: only one content coding per request is supported"
        )
    if names[0] not in _CODINGS:
        raise UnsupportedEncoding(
            f"content-encoding {names[0]!r} is not supported; use gzip, deflate, br or zstd"
        )
    return names[0]


def request_body(
    request: web.Request | FrontRequest, limit: int, on_error: Callable[[BodyDecodingError], Exception]
) -> tuple[BodySource, int | None]:
    """(what to read the body from, its declared length): the body as sent, or decoded as it is read when
    it has a Content-Encoding; the decoded length is then unknown until the body has been read."""
    declared = request.content_length
    encoding = request.headers.get("content-encoding")
    if encoding is None:
        return request.content, declared
    if getattr(request.content, "total_compressed_bytes", None) is not None:
        return request.content, None  # a server with aiohttp's decompression on has decoded it already
    try:
        coding = coding_of(encoding)
    except BodyDecodingError as exc:
        raise on_error(exc) from None
    if coding is None:
        return request.content, declared
    decoded = DecodedContent(request.content, coding, limit, on_error)
    decoded.check_declared(declared)
    return decoded, None


class DecodedContent:
    """A compressed body read as its decoded bytes, `readany()` like aiohttp's StreamReader.

    Failures raise what `on_error` makes of a `BodyDecodingError`, so each caller gets its own error type.
    """

    __slots__ = ("_coding", "_compressed", "_content", "_ended", "_more", "_on_error", "allowance")

    def __init__(
        self,
        content: BodySource,
        coding: str,
        limit: int,
        on_error: Callable[[BodyDecodingError], Exception],
    ) -> None:
        self._content = content
        self._coding = _CODINGS[coding]()
        self._on_error = on_error
        self.allowance = compressed_allowance(limit)
        self._compressed = 0
        self._more = False
        self._ended = False

    def check_declared(self, declared: int | None) -> None:
        """Refuse up front a declared compressed length no body within the limit can have."""
        if declared is not None and declared > self.allowance:
            raise self._on_error(CompressedBodyTooLarge("compressed request body is too large"))

    async def readany(self) -> bytes:
        """The next decoded bytes (at most about `STEP`); b"" once the body has ended, complete."""
        while not self._ended:
            if self._more:
                data = b""
            else:
                data = await self._content.readany()
                if not data:
                    self._ended = True
                    if not self._coding.ended():
                        raise self._on_error(UndecodableBody("the compressed data is truncated"))
                    return b""
                self._compressed += len(data)
                if self._compressed > self.allowance:
                    raise self._on_error(CompressedBodyTooLarge("compressed request body is too large"))
            try:
                out = self._coding.step(data)
                self._more = self._coding.more()
            except BodyDecodingError as exc:
                raise self._on_error(exc) from None
            except _DECODER_ERRORS as exc:
                raise self._on_error(UndecodableBody(_reason(exc))) from None
            if out:
                return out
        return b""


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or exc.__class__.__name__
    return text.removeprefix("Error -3 while decompressing data: ")
