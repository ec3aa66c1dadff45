"""The duration of an uploaded audio file, read from its container's header as the upload streams past.

A transcription answered as `json`, `text`, `srt` or `vtt` does not say how long the audio was, yet the
provider bills every second of it: the gateway takes the duration from the upload instead. Each container
has a reader, a generator that asks for the bytes it needs (`(offset, length)`, always ahead of what it was
last given, or `_END` for the file's size and last bytes) and returns the seconds, or None when the file is
not one it can read. The probe feeds it those bytes as they pass, so memory stays a few tens of KiB
whatever the file's size, and a reader that fails (a truncated or hostile header) only means "unknown".

Read: WAV (RIFF), FLAC, MP3 (Xing / Info / VBRI frame counts, else constant bit rate), Ogg Vorbis and Opus,
MP4 / M4A (`mvhd`, wherever `moov` is), WebM / Matroska (`Info` `Duration`).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Generator

_END = None  # what a reader yields to ask for (size, last bytes) once the file is complete
_HEAD = 16 * 1024  # the first bytes, kept: readers may look back into them
_TAIL = 66 * 1024  # the last bytes, kept once a reader asked for the end (an Ogg page is at most 65,307)
_RECENT = 256  # how far back a reader may look past the head
_MOST_SECONDS = 10 * 24 * 3600.0  # a header claiming more is not believed
_MOST_STEPS = 4096  # boxes, chunks or elements a reader may walk through

Reader = Generator["tuple[int, int] | None", "bytes | tuple[int, bytes] | None", "float | None"]
# What a reader is sent back: the bytes it asked for, or (size, last bytes) for `_END`; None primes it.
Answer = bytes | tuple[int, bytes] | None


def _read(offset: int, size: int) -> Generator[tuple[int, int], Answer, bytes]:
    """Ask for `size` bytes at `offset` (fewer at the end of the file)."""
    got = yield (offset, size)
    if not isinstance(got, bytes):
        raise ValueError("a reader that asked for bytes was sent something else")
    return got


def _end() -> Generator[None, Answer, tuple[int, bytes]]:
    """Ask for the file's size and its last bytes, once it is complete."""
    got = yield _END
    if not isinstance(got, tuple):
        raise ValueError("a reader that asked for the end was sent something else")
    return got


class AudioProbe:
    """Fed a file's bytes in order (`feed`), then told it ended (`finish`); `seconds` is then the audio's
    duration, or None for a container it cannot read. `size` counts the file's bytes."""

    __slots__ = (
        "_got",
        "_head",
        "_reader",
        "_recent",
        "_tail",
        "_tail_from",
        "_want",
        "seconds",
        "size",
        "waiting_for_end",
    )

    def __init__(self) -> None:
        self.size = 0
        self.seconds: float | None = None
        self._head = bytearray()
        self._tail = b""
        self._tail_from = 0  # the file offset of the tail's first byte
        self._recent = b""  # the last bytes before the chunk being fed: a reader may look back a little
        self._reader: Reader | None = _sniff()
        self._want: tuple[int, int] | None = None
        self._got = bytearray()
        self.waiting_for_end = False
        self._advance(None)  # to the reader's first ask

    def feed(self, chunk: bytes) -> None:
        start = self.size
        end = self.size = start + len(chunk)
        if start < _HEAD:
            self._head += chunk[: _HEAD - start]
        while self._want is not None:
            offset, length = self._want
            got = self._got
            position = offset + len(got)  # the next byte the reader needs
            if position < start:  # streamed past already: the kept head or the recent bytes may hold it
                recent_from = start - len(self._recent)
                if position < len(self._head):
                    got += self._head[position : offset + length]
                elif position >= recent_from:
                    got += self._recent[position - recent_from : offset + length - recent_from]
                else:
                    self._close()
                    break
            elif position < end:
                got += chunk[position - start : position - start + length - len(got)]
            else:
                break  # in a later chunk
            if len(got) < length:
                if offset + len(got) >= end:
                    break
                continue  # the head held the first part of it; this chunk may hold the rest
            self._got = bytearray()
            self._advance(bytes(got))
        if self.waiting_for_end:
            if not self._tail:
                self._tail_from = start
            tail = self._tail + chunk if self._tail else chunk
            if len(tail) > _TAIL:
                self._tail_from += len(tail) - _TAIL
                tail = tail[-_TAIL:]
            self._tail = tail
        if self._reader is not None:
            recent = self._recent + chunk if len(chunk) < _RECENT else chunk
            self._recent = recent[-_RECENT:]

    def finish(self) -> None:
        """The file ended: answer a reader waiting for the end, or for bytes that never came (short)."""
        for _ in range(4):
            if self.waiting_for_end:
                self.waiting_for_end = False
                tail, start = self._tail, self._tail_from if self._tail else self.size
                if 0 < start <= len(self._head):  # a short file: the head holds what came before the tail
                    tail = bytes(self._head[:start]) + tail
                self._advance((self.size, tail[-_TAIL:]))
            elif self._want is not None:
                got, self._got = bytes(self._got), bytearray()
                self._advance(got)  # short: the reader's parsing fails, or copes
            else:
                break
        self._close()

    def _advance(self, value: Answer) -> None:
        reader = self._reader
        if reader is None:
            return
        self._want = None
        try:
            ask = reader.send(value)
        except StopIteration as done:
            seconds = done.value
            if isinstance(seconds, float | int) and math.isfinite(seconds) and 0 < seconds <= _MOST_SECONDS:
                self.seconds = float(seconds)
            self._close()
            return
        except (struct.error, IndexError, ValueError, ZeroDivisionError, OverflowError):
            self._close()  # a header that does not parse: unknown, never an error of the upload
            return
        if ask is _END:
            self.waiting_for_end = True
        else:
            self._want = ask

    def _close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._want = None
        self.waiting_for_end = False
        self._tail = b""
        self._recent = b""
        self._head = bytearray()


def _sniff() -> Reader:
    first = yield from _read(0, 12)
    if first[:4] == b"RIFF" and first[8:12] == b"WAVE":
        return (yield from _wav())
    if first[:4] == b"fLaC":
        return (yield from _flac(0))
    if first[:3] == b"ID3":
        end = _id3_end(first)
        data = yield from _read(end, 4096)  # asked once: a later ask for these bytes would find them passed
        if data[:4] == b"fLaC":
            return (yield from _flac(end, data))
        return (yield from _mp3(end, data))
    if first[:4] == b"OggS":
        return (yield from _ogg())
    if first[4:8] == b"ftyp":
        return (yield from _mp4())
    if first[:4] == b"\x1a\x45\xdf\xa3":
        return (yield from _matroska())
    if first[0] == 0xFF and first[1] & 0xE0 == 0xE0:
        return (yield from _mp3(0))
    return None


def _id3_end(header: bytes) -> int:
    """Where an ID3v2 tag (at the file's start) ends: its size is 4 bytes of 7 bits each."""
    size = (header[6] << 21) | (header[7] << 14) | (header[8] << 7) | header[9]
    return 10 + size + (10 if header[5] & 0x10 else 0)


# -- WAV ---------------------------------------------------------------------------------------------


def _wav() -> Reader:
    offset, byte_rate = 12, 0
    for _ in range(_MOST_STEPS):
        header = yield from _read(offset, 8)
        kind, size = header[:4], struct.unpack_from("<I", header, 4)[0]
        if kind == b"fmt ":
            fmt = yield from _read(offset + 8, 16)
            byte_rate = struct.unpack_from("<I", fmt, 8)[0]
        elif kind == b"data":
            if not byte_rate:
                return None
            total, _tail = yield from _end()
            start = offset + 8
            # A streamed WAV says 0 or 0xFFFFFFFF; a truncated one more than it holds: the bytes there count.
            present = total - start
            size = present if size in (0, 0xFFFFFFFF) else min(size, present)
            return size / byte_rate
        offset += 8 + size + (size & 1)
    return None


# -- FLAC --------------------------------------------------------------------------------------------


def _flac(offset: int, block: bytes | None = None) -> Reader:
    if block is None:
        block = yield from _read(offset, 4 + 4 + 18)
    if block[:4] != b"fLaC" or block[4] & 0x7F != 0:  # STREAMINFO must be the first metadata block
        return None
    info = block[8:]
    rate = (info[10] << 12) | (info[11] << 4) | (info[12] >> 4)
    samples = ((info[13] & 0x0F) << 32) | struct.unpack_from(">I", info, 14)[0]
    return samples / rate if rate and samples else None


# -- MP3 ---------------------------------------------------------------------------------------------

_MP3_BITRATES = {  # kbit/s by (MPEG-1?, layer) for bit rate indexes 1..14
    (True, 1): (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def _mp3_frame(data: bytes, at: int) -> tuple[int, int, int, int, int] | None:
    """(version, layer, bit rate in bit/s, sample rate, frame bytes) of the frame header at `at`, if one."""
    if at + 4 > len(data) or data[at] != 0xFF or data[at + 1] & 0xE0 != 0xE0:
        return None
    b1, b2 = data[at + 1], data[at + 2]
    version, layer = (b1 >> 3) & 3, 4 - ((b1 >> 1) & 3)
    index, rate_index, padding = b2 >> 4, (b2 >> 2) & 3, (b2 >> 1) & 1
    if version == 1 or layer == 4 or index in (0, 15) or rate_index == 3:
        return None
    mpeg1 = version == 3
    bitrate = _MP3_BITRATES[(mpeg1, layer)][index - 1] * 1000
    rate = _MP3_RATES[version][rate_index]
    if layer == 1:
        length = (12 * bitrate // rate + padding) * 4
    else:
        length = (144 if mpeg1 or layer == 2 else 72) * bitrate // rate + padding
    return version, layer, bitrate, rate, length


def _mp3(offset: int, data: bytes | None = None) -> Reader:
    if data is None:
        data = yield from _read(offset, 4096)
    for at in range(len(data) - 4):  # encoders may pad between the tag and the first frame
        frame = _mp3_frame(data, at)
        if frame is None:
            continue
        following = _mp3_frame(data, at + frame[4])
        if at + frame[4] + 4 <= len(data) and (following is None or following[:2] != frame[:2]):
            continue  # a stray sync pattern: a real frame is followed by another of its kind
        break
    else:
        return None
    version, layer, bitrate, rate, _length = frame
    mono = data[at + 3] >> 6 == 3
    samples = 384 if layer == 1 else 1152 if version == 3 or layer == 2 else 576
    side = (17 if mono else 32) if version == 3 else (9 if mono else 17)
    for marker_at, count_at in ((at + 4 + side, 8), (at + 36, 14)):
        marker = data[marker_at : marker_at + 4]
        if marker in (b"Xing", b"Info") and struct.unpack_from(">I", data, marker_at + 4)[0] & 1:
            return struct.unpack_from(">I", data, marker_at + count_at)[0] * samples / rate
        if marker == b"VBRI" and marker_at == at + 36:
            return struct.unpack_from(">I", data, marker_at + count_at)[0] * samples / rate
    total, tail = yield from _end()  # constant bit rate: the audio bytes over the rate (less an ID3v1 tag)
    end = total - (128 if tail[-128:-125] == b"TAG" else 0)
    return (end - offset - at) * 8 / bitrate


# -- Ogg (Vorbis, Opus) ------------------------------------------------------------------------------


def _ogg() -> Reader:
    page = yield from _read(0, 27 + 255 + 32)
    segments = page[26]
    serial = page[14:18]
    packet = page[27 + segments :]
    if packet[:8] == b"OpusHead":
        rate, skip = 48000, struct.unpack_from("<H", packet, 10)[0]
    elif packet[:7] == b"\x01vorbis":
        rate, skip = struct.unpack_from("<I", packet, 12)[0], 0
    else:
        return None
    _total, tail = yield from _end()
    at = len(tail)
    while (at := tail.rfind(b"OggS", 0, at)) >= 0:  # the last page of this stream holds its last sample
        if at + 27 <= len(tail) and tail[at + 4] == 0 and tail[at + 14 : at + 18] == serial:
            granule = struct.unpack_from("<q", tail, at + 6)[0]
            if granule >= 0:
                return (granule - skip) / rate if rate else None
    return None


# -- MP4 / M4A ---------------------------------------------------------------------------------------


def _box(header: bytes) -> tuple[bytes, int, int]:
    """(type, size, header size) of an ISO base media box."""
    size, kind = struct.unpack_from(">I4s", header)
    if size == 1:
        return kind, struct.unpack_from(">Q", header, 8)[0], 16
    return kind, size, 8


def _mp4() -> Reader:
    offset = 0
    for _ in range(_MOST_STEPS):
        kind, size, header = _box((yield from _read(offset, 16)))
        if kind == b"moov":
            child, end = offset + header, offset + size
            while child + 8 <= end:
                kind, size, header = _box((yield from _read(child, 16)))
                if kind == b"mvhd":
                    body = yield from _read(child + header, 32)
                    if body[0] == 1:
                        scale, duration = struct.unpack_from(">IQ", body, 20)
                    else:
                        scale, duration = struct.unpack_from(">II", body, 12)
                    return duration / scale if scale else None
                if size < header:
                    return None
                child += size
            return None
        if size < header:  # 0: the box runs to the end of the file, and it is not `moov`
            return None
        offset += size
    return None


# -- WebM / Matroska ---------------------------------------------------------------------------------

_SEGMENT, _INFO, _CLUSTER = 0x18538067, 0x1549A966, 0x1F43B675
_TIMECODE_SCALE, _DURATION = 0x2AD7B1, 0x4489


def _vint(data: bytes, at: int, keep_marker: bool) -> tuple[int, int]:
    """(value, length) of an EBML variable-length integer; value -1 for "unknown size"."""
    first = data[at]
    length = 8 - first.bit_length() + 1
    if length > 8:
        raise ValueError("not an EBML number")
    value = first if keep_marker else first & (0xFF >> length)
    for byte in data[at + 1 : at + length]:
        value = (value << 8) | byte
    if len(data) < at + length:
        raise ValueError("truncated EBML number")
    if not keep_marker and value == (1 << (7 * length)) - 1:
        return -1, length
    return value, length


def _element(data: bytes, at: int = 0) -> tuple[int, int, int]:
    """(id, size, header size) of the EBML element at `at`."""
    ident, id_length = _vint(data, at, True)
    size, size_length = _vint(data, at + id_length, False)
    return ident, size, id_length + size_length


def _matroska() -> Reader:
    ident, size, header = _element((yield from _read(0, 12)))
    offset = header + size  # past the EBML header
    for _ in range(_MOST_STEPS):
        ident, size, header = _element((yield from _read(offset, 12)))
        if ident == _SEGMENT:
            offset += header  # into the segment: Info is one of its first children
            continue
        if ident == _CLUSTER or size < 0:
            return None  # media before the Info, or an element of unknown size: not read further
        if ident == _INFO:
            info = yield from _read(offset + header, min(size, 4096))
            scale, duration, at = 1_000_000, None, 0
            while at < len(info):
                child, child_size, child_header = _element(info, at)
                value = info[at + child_header : at + child_header + child_size]
                if child == _TIMECODE_SCALE:
                    scale = int.from_bytes(value, "big")
                elif child == _DURATION and child_size in (4, 8):
                    duration = struct.unpack(">f" if child_size == 4 else ">d", value)[0]
                at += child_header + child_size
            return duration * scale / 1e9 if duration is not None else None
        offset += header + size
    return None
