"""Usage and cost of the media routes: images, audio seconds, speech and video seconds.

What is charged (prices from `[models.prices]`, plus `per_request` on every charged answer):
- images (generations, edits, variations): the image's price by its size and quality (`per_image_by`, the
  answer's `size` / `quality`, else the request's; else `per_image`) * the number of images in the answer's
  `data` (the request's `n` when the answer has no list), plus token prices when the answer reports `usage`;
- transcriptions and translations, in every response format: `per_audio_second` * the seconds the answer
  reports (`duration` of `verbose_json`, or `usage.seconds`), else the duration in the uploaded file's
  header (modelgate/domain/audio_duration.py), else an estimate from its size
  (ESTIMATED_AUDIO_BYTES_PER_SECOND, the row marked estimated); plus any reported token usage; the model's
  `max_audio_seconds` is reserved;
- speech: `per_request` (the audio is streamed back, not read);
- video creation: `per_video_second` * the created video's `seconds` (the request's when the answer has none);
- follow-ups (video retrieve, content, delete, list; minting a realtime client secret): free.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import orjson

from modelgate.domain.audio_duration import AudioProbe
from modelgate.domain.prices import ModelPrices
from modelgate.domain.usage import Usage, merge_usage


class MediaKind(Enum):
    """How a media call is charged: never by tokens (a route's `media`, proxy.pipeline.route_table)."""

    IMAGES = "images"  # per image (the answer's `data`, or the `n` asked for), plus per request
    AUDIO_IN = "audio_in"  # per second of the audio transcribed or translated, plus per request
    SPEECH = "speech"  # per request
    VIDEO = "video"  # per second of the video made, plus per request
    FOLLOW_UP = "follow_up"  # a follow-up on a media object, or a realtime secret: charged as its route says


# The kinds whose answer is a JSON document naming what was made (read once, never scanned for tokens).
_JSON_ANSWERS = frozenset({MediaKind.IMAGES, MediaKind.AUDIO_IN, MediaKind.VIDEO})
_DEFAULT_VIDEO_SECONDS = 4.0  # the videos API's default clip length
# An upload whose container the gateway cannot read is taken for audio at 128 kbit/s (a common MP3 / Opus
# rate): its bytes over this, charged as estimated.
ESTIMATED_AUDIO_BYTES_PER_SECOND = 16_000


def _number(value: Any) -> float | None:
    """A non-negative number, also from a form field's string ("8")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _requested_images(payload: dict | None) -> int:
    n = _number(payload.get("n")) if payload else None
    return max(int(n), 1) if n is not None else 1


class MediaUsageReader:
    """Reads the media units of one answer as it passes (the usage scanner of usage metering).

    JSON answers of these routes are relayed whole, in one chunk, so the first chunk is the document;
    binary answers (speech, video content) are never parsed.
    """

    __slots__ = ("_kind", "_payload", "_read", "_upload", "usage")

    def __init__(self, kind: MediaKind, payload: dict | None, upload: AudioProbe | None = None) -> None:
        self._kind = kind
        self._payload = payload
        self._upload = upload  # the audio file sent, read as it passed (transcriptions, translations)
        self._read = kind not in _JSON_ANSWERS
        self.usage = Usage()

    def feed(self, chunk: bytes) -> None:
        if self._read:
            return
        self._read = True
        try:
            document = orjson.loads(chunk)
        except orjson.JSONDecodeError:
            document = None  # e.g. a transcription as text, srt or vtt: no duration in it
        if not isinstance(document, dict):
            document = {}
        usage, kind = self.usage, self._kind
        reported = document.get("usage")
        if isinstance(reported, dict):
            merge_usage(usage, reported)
            if reported.get("type") == "duration":
                usage.audio_seconds = _number(reported.get("seconds")) or 0.0
        if kind is MediaKind.IMAGES:
            data = document.get("data")
            usage.images = len(data) if isinstance(data, list) else _requested_images(self._payload)
            usage.image_variant = _image_variant(document, self._payload)
        elif kind is MediaKind.AUDIO_IN:
            duration = _number(document.get("duration"))
            if duration is not None:
                usage.audio_seconds = duration
            elif not usage.audio_seconds and self._upload is not None:
                _upload_seconds(usage, self._upload)
        else:  # MediaKind.VIDEO
            seconds = _number(document.get("seconds"))
            if seconds is None and self._payload:
                seconds = _number(self._payload.get("seconds"))
            usage.video_seconds = seconds if seconds is not None else _DEFAULT_VIDEO_SECONDS


def _image_variant(answer: dict, payload: dict | None) -> str:
    """ "SIZE/QUALITY" the images were made at: the answer's (gpt-image answers say), else the request's."""
    size = answer.get("size") or (payload.get("size") if payload else None)
    quality = answer.get("quality") or (payload.get("quality") if payload else None)
    if not isinstance(size, str) or not size:
        return ""
    return f"{size}/{quality}" if isinstance(quality, str) and quality else size


def _upload_seconds(usage: Usage, upload: AudioProbe) -> None:
    """The seconds of the uploaded audio, from its header, else estimated from its size."""
    if upload.seconds is not None:
        usage.audio_seconds = upload.seconds
    elif upload.size:
        usage.audio_seconds = upload.size / ESTIMATED_AUDIO_BYTES_PER_SECOND
        usage.estimated = True


def media_worst_case(kind: MediaKind | None, payload: dict | None, prices: ModelPrices) -> int | None:
    """What to reserve before a media request (None: not a charged media call, use the token worst case).

    An audio file's duration is unknown until it is transcribed: the model's `max_audio_seconds` is reserved
    for it, and the charge is capped there.
    """
    if kind is MediaKind.IMAGES:
        return prices.per_request + math.ceil(prices.highest_image_price * _requested_images(payload))
    if kind is MediaKind.VIDEO:
        seconds = _number(payload.get("seconds")) if payload else None
        seconds = _DEFAULT_VIDEO_SECONDS if seconds is None else seconds
        return prices.per_request + math.ceil(seconds * prices.per_video_second)
    if kind is MediaKind.AUDIO_IN:
        return prices.per_request + math.ceil(prices.max_audio_seconds * prices.per_audio_second)
    if kind is MediaKind.SPEECH:
        return prices.per_request
    return None
