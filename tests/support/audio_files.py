"""Audio files of a known duration, built by their formats' specifications (WAV by the standard library's
`wave` writer): what the gateway's header reader (modelgate/domain/audio_duration.py) is tested on, and what
tests upload for a transcription to be charged by."""

from __future__ import annotations

import io
import struct
import wave


def wav(seconds: int, rate: int = 16000, channels: int = 1, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(b"\x01" * width * channels * rate * seconds)
    return out.getvalue()


def id3(size: int) -> bytes:
    """An ID3v2.4 tag of `size` bytes of frames (its size is 4 bytes of 7 bits)."""
    syncsafe = bytes([(size >> 21) & 0x7F, (size >> 14) & 0x7F, (size >> 7) & 0x7F, size & 0x7F])
    return b"ID3\x04\x00\x00" + syncsafe + b"\x00" * size


# MPEG-1 Layer III, 128 kbit/s, 44.1 kHz, stereo, no padding: 144 * 128000 // 44100 = 417 bytes a frame.
MP3_HEADER = b"\xff\xfb\x90\x00"
MP3_FRAME = 417


def mp3_cbr(frames: int) -> bytes:
    return (MP3_HEADER + b"\x00" * (MP3_FRAME - 4)) * frames


def mp3_xing(frames: int) -> bytes:
    """A VBR file: its first frame carries a Xing header (after 32 bytes of side information) counting
    the frames; the frames that follow are few, so only the count can tell the duration."""
    first = bytearray(MP3_HEADER + b"\x00" * (MP3_FRAME - 4))
    first[4 + 32 : 4 + 32 + 12] = b"Xing" + struct.pack(">II", 1, frames)
    return bytes(first) + mp3_cbr(3)


def flac(samples: int, rate: int = 44100) -> bytes:
    info = struct.pack(">HH", 4096, 4096) + b"\x00" * 6
    packed = (
        (rate << 44) | (1 << 41) | (15 << 36) | samples
    )  # rate 20 bits, channels-1 3, bps-1 5, samples 36
    info += packed.to_bytes(8, "big") + b"\x00" * 16  # then the MD5
    return b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info + b"\xff\xf8" * 1000


def ogg_page(serial: int, granule: int, packet: bytes, sequence: int) -> bytes:
    segments = [255] * (len(packet) // 255) + [len(packet) % 255]
    header = b"OggS\x00\x00" + struct.pack("<qIII", granule, serial, sequence, 0)
    return header + bytes([len(segments)]) + bytes(segments) + packet


def ogg_opus(seconds: float, pre_skip: int = 312) -> bytes:
    head = b"OpusHead" + bytes([1, 1]) + struct.pack("<HIhB", pre_skip, 48000, 0, 0)
    pages = [ogg_page(7, 0, head, 0), ogg_page(7, 0, b"OpusTags" + b"\x00" * 8, 1)]
    last = pre_skip + int(seconds * 48000)
    for index in range(1, 40):
        pages.append(ogg_page(7, last * index // 39, b"\x42" * 3000, index + 1))
    return b"".join(pages)


def ogg_vorbis(seconds: float, rate: int = 22050) -> bytes:
    head = b"\x01vorbis" + struct.pack("<IBI", 0, 2, rate) + b"\x00" * 16
    pages = [ogg_page(3, 0, head, 0)]
    pages.append(ogg_page(3, int(seconds * rate), b"\x42" * 5000, 1))
    return b"".join(pages)


def box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", 8 + len(body)) + kind + body


def mp4(seconds: float, *, moov_first: bool, version: int = 0, media: int = 200_000) -> bytes:
    scale = 44100
    if version == 0:
        mvhd = box(b"mvhd", b"\x00\x00\x00\x00" + struct.pack(">IIII", 0, 0, scale, int(seconds * scale)))
    else:
        mvhd = box(b"mvhd", b"\x01\x00\x00\x00" + struct.pack(">QQIQ", 0, 0, scale, int(seconds * scale)))
    moov = box(b"moov", mvhd + box(b"trak", b"\x00" * 300))
    ftyp = box(b"ftyp", b"M4A \x00\x00\x00\x00M4A mp42isom")
    mdat = box(b"mdat", b"\x21" * media)
    return ftyp + (moov + mdat if moov_first else box(b"free", b"") + mdat + moov)


def ebml(ident: int, body: bytes) -> bytes:
    size = len(body) | (1 << 56)  # an 8-byte size
    return ident.to_bytes((ident.bit_length() + 7) // 8, "big") + size.to_bytes(8, "big") + body


def webm(seconds: float, *, with_duration: bool = True) -> bytes:
    header = ebml(0x1A45DFA3, ebml(0x4282, b"webm"))
    info = ebml(0x2AD7B1, (1_000_000).to_bytes(3, "big"))
    if with_duration:
        info += ebml(0x4489, struct.pack(">d", seconds * 1000))
    segment = ebml(0x114D9B74, b"\x00" * 40) + ebml(0x1549A966, info) + ebml(0x1F43B675, b"\x00" * 50_000)
    return header + ebml(0x18538067, segment)
