"""Audio: transcriptions and translations (multipart, streamed to the row), speech (JSON in, audio streamed
back chunk by chunk) with the openai SDK; charged per audio second, and speech per request."""

from __future__ import annotations

import io
import threading

import openai
import pytest

from tests.fakes import Fault
from tests.fakes.media_routes import AUDIO_BYTES_PER_SECOND, SPEECH_CHUNK, SPEECH_CHUNKS
from tests.integration.media.conftest import PER_AUDIO_SECOND_USD, TTS_PER_REQUEST_USD, ledger_row

AUDIO = bytes(range(256)) * 625  # 160,000 bytes: the fake hears 10 seconds


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


def test_plain_transcription_without_a_duration_costs_nothing_per_second(
    client: openai.OpenAI, stack
) -> None:
    raw = client.audio.transcriptions.with_raw_response.create(
        model="whisper-test", file=("talk.mp3", io.BytesIO(AUDIO), "audio/mpeg"), response_format="text"
    )
    assert raw.parse().startswith("fake transcript")
    row = ledger_row(stack.gateway.storage_url, raw.headers["x-request-id"])
    assert (row["units"], row["cost_micros"]) == (0, 0)


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
