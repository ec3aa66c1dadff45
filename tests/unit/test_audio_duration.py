"""The duration of an uploaded audio file, read from its container's header as the bytes stream past.

Each file is built by its format's specification (tests/support/audio_files.py), with a duration known by
construction, and fed in chunks of every awkward size: the probe must answer the same.
"""

from __future__ import annotations

import struct

import pytest

from modelgate.domain.audio_duration import AudioProbe
from tests.support.audio_files import (
    MP3_FRAME,
    box,
    flac,
    id3,
    mp3_cbr,
    mp3_xing,
    mp4,
    ogg_opus,
    ogg_vorbis,
    wav,
    webm,
)


def probe(data: bytes, chunk: int) -> AudioProbe:
    reader = AudioProbe()
    for at in range(0, len(data), chunk):
        reader.feed(data[at : at + chunk])
    reader.finish()
    return reader


CASES = [
    ("wav mono 16 kHz", wav(7), 7.0),
    ("wav stereo 44.1 kHz", wav(3, 44100, 2), 3.0),
    ("mp3 constant bit rate", mp3_cbr(600), 600 * MP3_FRAME * 8 / 128000),
    ("mp3 behind a 40 KiB ID3 tag (cover art)", id3(40_000) + mp3_cbr(300), 300 * MP3_FRAME * 8 / 128000),
    ("mp3 with an ID3v1 tag at its end", mp3_cbr(300) + b"TAG" + b"\x00" * 125, 300 * MP3_FRAME * 8 / 128000),
    ("mp3 VBR with a Xing frame count", mp3_xing(23_000), 23_000 * 1152 / 44100),
    ("flac", flac(44100 * 95), 95.0),
    ("flac behind an ID3 tag", id3(500) + flac(44100 * 12), 12.0),
    ("ogg opus", ogg_opus(61.5), 61.5),
    ("ogg vorbis", ogg_vorbis(42.0), 42.0),
    ("m4a moov first", mp4(125.5, moov_first=True), 125.5),
    ("m4a moov last, after the media", mp4(600.0, moov_first=False), 600.0),
    ("m4a 64-bit mvhd", mp4(33.0, moov_first=False, version=1), 33.0),
    ("webm with its duration", webm(12.25), 12.25),
]


@pytest.mark.parametrize("chunk", [1, 7, 4096, 65536, 1 << 30])
@pytest.mark.parametrize(("name", "data", "seconds"), CASES, ids=[case[0] for case in CASES])
def test_the_duration_is_read_from_the_header_whatever_the_chunking(
    name: str, data: bytes, seconds: float, chunk: int
) -> None:
    if chunk == 1 and len(data) > 50_000:
        chunk = 97  # byte by byte, but not forever
    reader = probe(data, chunk)
    assert reader.seconds == pytest.approx(seconds, rel=1e-6), name
    assert reader.size == len(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"just some text, not audio at all" * 100,
        webm(12.0, with_duration=False),  # a browser's recording: no Duration in its Info
        wav(3)[:30],  # cut inside the header
        b"RIFF\x00\x00\x00\x00WAVEdata\x00\x00\x00\x00" + b"\x00" * 100,  # data before any fmt
        b"fLaC\x80\x00\x00\x22" + b"\x00" * 34,  # a zero sample rate
        b"\xff\xfb" + b"\xff" * 5000,  # frame syncs that are no frames
        b"OggS" + b"\x00" * 200,
        box(b"ftyp", b"isom") + struct.pack(">I", 0) + b"mdat" + b"\x00" * 1000,  # no moov
        b"\x1a\x45\xdf\xa3\xff\xff\xff\xff",  # a broken EBML size
    ],
    ids=[
        "empty",
        "text",
        "webm-no-duration",
        "cut-wav",
        "wav-no-fmt",
        "flac-rate-0",
        "mp3-noise",
        "ogg-cut",
        "mp4-no-moov",
        "ebml-broken",
    ],
)
def test_an_unreadable_file_has_no_duration_and_raises_nothing(data: bytes) -> None:
    for chunk in (1, 1000, 1 << 20):
        reader = probe(data, chunk)
        assert reader.seconds is None
        assert reader.size == len(data)


def test_a_header_claiming_an_absurd_duration_is_not_believed() -> None:
    assert probe(flac(8000 * 3600 * 24 * 30, rate=8000), 4096).seconds is None  # 30 days


def test_a_truncated_wav_counts_the_samples_it_holds() -> None:
    data = wav(10)[: 44 + 16000 * 2 * 4]  # the header says 10 s; four seconds of samples arrived
    assert probe(data, 4096).seconds == pytest.approx(4.0)


def test_the_probe_keeps_little_of_a_long_file() -> None:
    reader = AudioProbe()
    data = mp3_cbr(60_000)  # 25 MB, read to its end for its size (a constant bit rate)
    for at in range(0, len(data), 65536):
        reader.feed(data[at : at + 65536])
        assert len(reader._tail) <= 66 * 1024 and len(reader._head) <= 16 * 1024
    reader.finish()
    assert reader.seconds == pytest.approx(60_000 * MP3_FRAME * 8 / 128000)
