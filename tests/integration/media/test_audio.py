"""Audio: transcriptions and translations (multipart, streamed to the row), speech (JSON in, audio streamed
back chunk by chunk) with the openai SDK; charged per audio second, and speech per request."""

from __future__ import annotations

import io
import math
import os
import socket
import threading
from urllib.parse import urlsplit

import openai
import pytest

from modelgate.domain.media import ESTIMATED_AUDIO_BYTES_PER_SECOND
from tests.fakes import Fault
from tests.fakes.media_routes import AUDIO_BYTES_PER_SECOND, SPEECH_CHUNK, SPEECH_CHUNKS
from tests.integration.media.conftest import (
    MULTIPART,
    PER_AUDIO_SECOND_USD,
    TTS_PER_REQUEST_USD,
    MiB,
    ledger_row,
    multipart,
)
from tests.support.audio_files import flac, wav
from tests.support.gateway import register_tenant

AUDIO = bytes(range(256)) * 625  # 160,000 bytes: the fake hears 10 seconds
AUDIO_SECOND_MICROS = round(PER_AUDIO_SECOND_USD * 1_000_000)  # 100 µ


def test_transcription_through_the_sdk(client: openai.OpenAI, alpha) -> None:
    result = client.audio.transcriptions.create(
        model="whisper-test", file=("talk.mp3", io.BytesIO(AUDIO), "audio/mpeg")
    )
    assert result.text == f"fake transcript of talk.mp3 ({len(AUDIO)} bytes)"
    (upload,) = alpha.media.uploads
    assert upload.complete and upload.part("file").size == len(AUDIO)
    assert upload.fields["model"] == "whisper-upstream"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK marks translations deprecated
def test_translation_through_the_sdk(client: openai.OpenAI, alpha) -> None:
    result = client.audio.translations.create(
        model="whisper-test", file=("rede.mp3", io.BytesIO(AUDIO), "audio/mpeg")
    )
    assert result.text.startswith("fake transcript of rede.mp3")
    assert alpha.media.uploads[0].path == "/v1/audio/translations"


def test_verbose_transcription_is_charged_per_audio_second(client: openai.OpenAI, stack) -> None:
    raw = client.audio.transcriptions.with_raw_response.create(
        model="whisper-test",
        file=("talk.mp3", io.BytesIO(AUDIO), "audio/mpeg"),
        response_format="verbose_json",
    )
    assert raw.parse().duration == len(AUDIO) / AUDIO_BYTES_PER_SECOND
    row = ledger_row(stack.gateway.storage_url, raw.headers["x-request-id"])
    assert row["units"] == 10.0
    assert row["cost_micros"] == round(10 * PER_AUDIO_SECOND_USD * 1_000_000)


def test_an_unreadable_upload_is_charged_an_estimate_from_its_size_and_says_so(
    client: openai.OpenAI, stack
) -> None:
    # Not a container the gateway reads, and a format that reports no duration: 160,000 bytes are taken
    # for 10 s (ESTIMATED_AUDIO_BYTES_PER_SECOND), and the row says the usage is estimated.
    raw = client.audio.transcriptions.with_raw_response.create(
        model="whisper-test", file=("talk.mp3", io.BytesIO(AUDIO), "audio/mpeg"), response_format="text"
    )
    assert raw.parse().startswith("fake transcript")
    row = ledger_row(stack.gateway.storage_url, raw.headers["x-request-id"])
    assert len(AUDIO) / ESTIMATED_AUDIO_BYTES_PER_SECOND == 10
    assert (row["units"], row["cost_micros"], row["usage_estimated"]) == (10, 10 * AUDIO_SECOND_MICROS, True)


def test_the_answers_own_duration_wins_over_the_uploads_header(client: openai.OpenAI, stack) -> None:
    # A FLAC header that claims 95 s over a few KB: the provider (the fake hears 1 s per 16,000 bytes) says
    # in verbose_json how long it heard, and that is charged; a text answer says nothing, so the header is.
    claimed = flac(44100 * 95)
    heard = round(len(claimed) / AUDIO_BYTES_PER_SECOND, 3)
    charged = {}
    for response_format in ("verbose_json", "text"):
        raw = client.audio.transcriptions.with_raw_response.create(
            model="whisper-test",
            file=("talk.flac", io.BytesIO(claimed), "audio/flac"),
            response_format=response_format,
        )
        row = ledger_row(stack.gateway.storage_url, raw.headers["x-request-id"])
        charged[response_format] = (row["units"], row["cost_micros"], row["usage_estimated"])
    assert charged == {
        "verbose_json": (heard, math.ceil(heard * AUDIO_SECOND_MICROS), False),
        "text": (95, 95 * AUDIO_SECOND_MICROS, False),
    }


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK marks translations deprecated
def test_every_response_format_is_charged_the_seconds_the_provider_bills(
    storage_url: str, media_gateway, stack
) -> None:
    """Issue 32's row: a 600 s transcription in `json` or `text` was charged 0 µ; the provider bills 600 s
    at 0.0001 USD a second, 60,000 µ, in every format, transcriptions and translations alike."""
    gateway = media_gateway(storage_url=storage_url)
    tenant = register_tenant(gateway.base_url)
    audio = wav(600, rate=8000, width=1)  # 8,000 one-byte samples a second: 4.8 MB, ten minutes
    bill = 600 * AUDIO_SECOND_MICROS
    assert bill == 60_000
    charged = {}
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0) as sdk:
        for route in (sdk.audio.transcriptions, sdk.audio.translations):
            for response_format in ("json", "text", "srt", "vtt", "verbose_json"):
                raw = route.with_raw_response.create(
                    model="whisper-test",
                    file=("meeting.wav", io.BytesIO(audio), "audio/wav"),
                    response_format=response_format,
                )
                row = ledger_row(storage_url, raw.headers["x-request-id"])
                charged[(route.__class__.__name__, response_format)] = (
                    row["units"],
                    row["cost_micros"],
                    row["usage_estimated"],
                )
    assert set(charged.values()) == {(600, bill, False)}, charged
    assert len(stack.alpha.media.uploads) == 10


def test_speech_streams_audio_back_through_the_sdk(client: openai.OpenAI, alpha, stack) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="tts-test", voice="alloy", input="hello there"
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        audio = b"".join(response.iter_bytes())
    assert len(audio) == SPEECH_CHUNK * SPEECH_CHUNKS
    assert alpha.requests_to("/v1/audio/speech")[0].json["model"] == "tts-upstream"
    row = ledger_row(stack.gateway.storage_url, response.headers["x-request-id"])
    assert row["cost_micros"] == round(TTS_PER_REQUEST_USD * 1_000_000)


def test_speech_chunks_reach_the_client_before_the_upstream_finishes(client: openai.OpenAI, alpha) -> None:
    alpha.add_fault("/v1/audio/speech", Fault(hold_before_last_chunk="speech-end"))
    releaser = threading.Timer(10, alpha.release, args=("speech-end",))  # a safety net, never the path
    releaser.start()
    try:
        with client.audio.speech.with_streaming_response.create(
            model="tts-test", voice="alloy", input="hold the last chunk"
        ) as response:
            chunks = response.iter_bytes(SPEECH_CHUNK)
            first = next(chunks)
            # The upstream still holds its last chunk, yet the first one is here: nothing was buffered.
            assert alpha.wait_held("speech-end", timeout=5)
            assert len(first) == SPEECH_CHUNK
            alpha.release("speech-end")
            rest = b"".join(chunks)
        assert len(first) + len(rest) == SPEECH_CHUNK * SPEECH_CHUNKS
    finally:
        releaser.cancel()


def test_a_client_that_leaves_mid_upload_is_not_charged(stack) -> None:
    """The call was never wholly sent: the provider bills nothing, so neither does the gateway (a client
    leaving after the upload is read to its end: tests/integration/billing/test_abandoned_calls.py)."""
    total, chunks = multipart([("model", "whisper-test")], [("file", 4 * MiB)])
    request_id = f"left-mid-upload-{os.urandom(4).hex()}"
    url = urlsplit(stack.gateway.base_url)
    head = (
        f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {stack.tenant.api_key}\r\nContent-Type: {MULTIPART['content-type']}\r\n"
        f"x-request-id: {request_id}\r\nContent-Length: {total}\r\n\r\n"
    )
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head.encode())
        sent = 0
        for chunk in chunks:
            sock.sendall(chunk)
            sent += len(chunk)
            if sent > MiB:
                break
        assert stack.alpha.media.wait_receiving(MiB // 2), "the upload never reached the provider"
    # The socket is closed: the gateway aborts the upload.
    row = ledger_row(stack.gateway.storage_url, request_id)
    assert (row["cost_micros"], row["units"]) == (0, 0), row
    assert stack.alpha.media.wait_uploads(1) and not stack.alpha.media.uploads[0].complete
