"""OpenAI images, audio and videos routes of the fake.

Multipart uploads are read part by part as they arrive (never whole), their part sizes recorded; speech and
video content are streamed back in chunks, held before the last one when the request's fault names a gate.
"""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any

from aiohttp import web

from .context import CONTEXT, created_id, fault_of, json_body, required
from .envelopes import UpstreamError, json_response
from .media_records import Upload, UploadPart

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\nfake-image").decode()
AUDIO_BYTES_PER_SECOND = 16_000  # the fake's "duration" of an audio upload it cannot decode (not a WAV)
SPEECH_CHUNK = 16 * 1024
SPEECH_CHUNKS = 8
CONTENT_CHUNK = 256 * 1024
_FIELD_MAX = 64 * 1024
_FILE_HEAD = 44  # a canonical WAV header: what the fake reads of a file to hear how long it is


async def read_upload(request: web.Request) -> Upload:
    """Read a multipart body part by part, counting each part's bytes as they arrive."""
    media = request.app[CONTEXT].media
    media.upload_started()
    fields: dict[str, str] = {}
    parts: list[UploadPart] = []
    complete = False
    current: UploadPart | None = None  # the part being read, with the bytes read so far
    try:
        reader = await request.multipart()
        while True:
            part = await reader.next()
            if part is None:
                complete = True
                break
            current = UploadPart(part.name, part.filename, 0)
            text = bytearray() if part.filename is None else None
            head = bytearray()
            while chunk := await part.read_chunk(64 * 1024):
                current = UploadPart(part.name, part.filename, current.size + len(chunk), current.head)
                media.received(len(chunk))
                if text is not None and len(text) < _FIELD_MAX:
                    text += chunk
                if len(head) < _FILE_HEAD:
                    head += chunk[: _FILE_HEAD - len(head)]
                    current = UploadPart(part.name, part.filename, current.size, bytes(head))
            if text is not None and part.name:
                fields[part.name] = text.decode("utf-8", "replace")
            parts.append(current)
            current = None
    finally:  # also when the sender aborts mid-body: the record says so, with the part it broke off in
        if current is not None:
            parts.append(current)
        upload = Upload(
            request.path,
            request.headers.get("content-type", ""),
            request.content_length,
            fields,
            tuple(parts),
            complete,
        )
        media.upload_ended(upload)
    return upload


async def _form_or_json(request: web.Request) -> tuple[dict[str, Any], Upload | None]:
    if request.content_type.startswith("multipart/"):
        upload = await read_upload(request)
        return dict(upload.fields), upload
    return json_body(request), None


def _count(body: dict[str, Any]) -> int:
    raw = body.get("n", 1)
    try:
        n = int(raw)
    except (TypeError, ValueError):
        raise UpstreamError(400, "Invalid 'n': expected an integer.", param="n") from None
    if not 1 <= n <= 10:
        raise UpstreamError(400, "Invalid 'n': expected 1 to 10.", param="n")
    return n


def _images(n: int) -> web.Response:
    return json_response({"created": int(time.time()), "data": [{"b64_json": PIXEL} for _ in range(n)]})


async def images_generations(request: web.Request) -> web.Response:
    body = json_body(request)
    required(body, "model", str)
    required(body, "prompt", str)
    return _images(_count(body))


async def images_edits(request: web.Request) -> web.Response:
    upload = await read_upload(request)
    if not any(p.filename for p in upload.parts):
        raise UpstreamError(400, "image: a file is required", param="image")
    return _images(_count(upload.fields))


async def audio_transcriptions(request: web.Request) -> web.Response:
    upload = await read_upload(request)
    files = [p for p in upload.parts if p.filename]
    if not files:
        raise UpstreamError(400, "file: a file is required", param="file")
    text = f"fake transcript of {files[0].filename} ({files[0].size} bytes)"
    duration = round(audio_seconds(files[0]), 3)
    answer = upload.fields.get("response_format", "json")
    if answer == "text":
        return web.Response(text=text, content_type="text/plain")
    if answer in ("srt", "vtt"):  # subtitles, as text: no duration in them
        cue = f"00:00:00,000 --> 00:00:{min(duration, 59):06.3f}\n{text}\n".replace(".", ",")
        subtitles = ("WEBVTT\n\n" if answer == "vtt" else "1\n") + cue
        return web.Response(text=subtitles, content_type="text/plain")
    if answer == "verbose_json":
        task = "translate" if request.path.endswith("translations") else "transcribe"
        return json_response(
            {"task": task, "language": "english", "duration": duration, "text": text, "segments": []}
        )
    return json_response({"text": text})


def audio_seconds(file: UploadPart) -> float:
    """How long the fake hears an uploaded file: a canonical PCM WAV by its samples (what a provider bills),
    anything else by its size."""
    head = file.head
    if len(head) == _FILE_HEAD and head[:4] == b"RIFF" and head[8:12] == b"WAVE" and head[36:40] == b"data":
        byte_rate = int.from_bytes(head[28:32], "little")
        return min(int.from_bytes(head[40:44], "little"), file.size - _FILE_HEAD) / byte_rate
    return file.size / AUDIO_BYTES_PER_SECOND


async def _stream_bytes(
    request: web.Request, content_type: str, total: int, chunk: int
) -> web.StreamResponse:
    """`total` bytes in chunks of `chunk`, held before the last one at the gate the request's fault names."""
    ctx = request.app[CONTEXT]
    fault = fault_of(request)
    gate = fault.hold_before_last_chunk if fault is not None else None
    response = web.StreamResponse(headers={"Content-Type": content_type})
    await response.prepare(request)
    block = bytes(range(256)) * (chunk // 256 + 1)
    sent = 0
    while sent < total:
        size = min(chunk, total - sent)
        last = sent + size >= total
        if last and gate is not None and not await ctx.unless_stopping(ctx.gates.wait(gate)):
            return response
        await response.write(block[:size])
        sent += size
    await response.write_eof()
    return response


async def audio_speech(request: web.Request) -> web.StreamResponse:
    body = json_body(request)
    required(body, "model", str)
    required(body, "input", str)
    return await _stream_bytes(request, "audio/mpeg", SPEECH_CHUNKS * SPEECH_CHUNK, SPEECH_CHUNK)


async def videos_create(request: web.Request) -> web.Response:
    body, _upload = await _form_or_json(request)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise UpstreamError(400, "model: Field required", param="model")
    video = {
        "id": created_id(request, "video_" + secrets.token_hex(12)),
        "object": "video",
        "model": model,
        "status": "queued",
        "progress": 0,
        "created_at": int(time.time()),
        "seconds": str(body.get("seconds", "4")),
        "size": body.get("size", "720x1280"),
        "prompt": body.get("prompt"),
    }
    request.app[CONTEXT].media.videos[video["id"]] = video
    return json_response(video)


def _video(request: web.Request) -> dict[str, Any]:
    video = request.app[CONTEXT].media.videos.get(request.match_info["video_id"])
    if video is None:
        raise UpstreamError(404, f"Video with id '{request.match_info['video_id']}' not found.")
    return video


async def videos_retrieve(request: web.Request) -> web.Response:
    video = _video(request)
    video.update(status="completed", progress=100, completed_at=int(time.time()))
    return json_response(video)


async def videos_list(request: web.Request) -> web.Response:
    videos = list(request.app[CONTEXT].media.videos.values())
    return json_response({"object": "list", "data": videos, "has_more": False})


async def videos_delete(request: web.Request) -> web.Response:
    video = _video(request)
    del request.app[CONTEXT].media.videos[video["id"]]
    return json_response({"id": video["id"], "object": "video.deleted", "deleted": True})


async def videos_content(request: web.Request) -> web.StreamResponse:
    _video(request)
    total = request.app[CONTEXT].media.video_content_size
    return await _stream_bytes(request, "video/mp4", total, CONTENT_CHUNK)


ROUTES = [
    web.post("/v1/images/generations", images_generations),
    web.post("/v1/images/edits", images_edits),
    web.post("/v1/images/variations", images_edits),
    web.post("/v1/audio/transcriptions", audio_transcriptions),
    web.post("/v1/audio/translations", audio_transcriptions),
    web.post("/v1/audio/speech", audio_speech),
    web.post("/v1/videos", videos_create),
    web.get("/v1/videos", videos_list),
    web.get("/v1/videos/{video_id}", videos_retrieve),
    web.delete("/v1/videos/{video_id}", videos_delete),
    web.get("/v1/videos/{video_id}/content", videos_content),
]
