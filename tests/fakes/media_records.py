"""What a fake upstream saw of uploads and realtime sessions; written by the server loop, read by tests.

Uploads are read part by part as they arrive, so `wait_receiving` lets a test see the first bytes of an
upload reach the fake while its client is still sending.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class UploadPart:
    """One part of a multipart upload: its name, file name (None for a text field), size in bytes and first
    bytes (a file's, for the fake to read its header)."""

    name: str | None
    filename: str | None
    size: int
    head: bytes = b""


@dataclass(frozen=True, slots=True)
class Upload:
    """A multipart request as the fake read it; `complete` is False when it broke off mid-body."""

    path: str
    content_type: str
    content_length: int | None
    fields: dict[str, str]
    parts: tuple[UploadPart, ...]
    complete: bool

    def part(self, name: str) -> UploadPart:
        return next(p for p in self.parts if p.name == name)


class MediaLog:
    """Uploads, the bytes of the uploads in flight, and the videos the fake has made."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._uploads: list[Upload] = []
        self._receiving = 0
        self.video_content_size = 2 * MiB  # bytes GET /v1/videos/{id}/content streams
        self.videos: dict[str, dict[str, Any]] = {}  # touched only on the server loop

    @property
    def uploads(self) -> list[Upload]:
        with self._cond:
            return list(self._uploads)

    def upload_started(self) -> None:
        with self._cond:
            self._receiving = 0

    def received(self, size: int) -> None:
        with self._cond:
            self._receiving += size
            self._cond.notify_all()

    def upload_ended(self, upload: Upload) -> None:
        with self._cond:
            self._uploads.append(upload)
            self._cond.notify_all()

    def wait_receiving(self, at_least: int, timeout: float = 10.0) -> bool:
        """Block until the upload in flight has delivered `at_least` bytes of part content."""
        with self._cond:
            return self._cond.wait_for(lambda: self._receiving >= at_least, timeout)

    def wait_uploads(self, count: int, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self._uploads) >= count, timeout)

    def clear(self) -> None:
        with self._cond:
            self._uploads.clear()
            self._receiving = 0
            self.video_content_size = 2 * MiB


@dataclass(slots=True)
class RealtimeSession:
    """One realtime WebSocket the fake accepted: the upstream model and credential it was opened with."""

    model: str | None
    authorization: str | None
    events: list[dict[str, Any]] = field(default_factory=list)
    binary_frames: int = 0
    closed_by: str | None = None  # "client" or "fake"
    close_code: int | None = None
    held: list[str] = field(default_factory=list)  # ids of responses started but not done (hold_responses)
    buffered: int = 0  # base64 characters appended to the input buffer since its last commit or clear

    def received(self, kind: str) -> int:
        """How many events of type `kind` the fake received in this session."""
        return sum(event.get("type") == kind for event in list(self.events))


class RealtimeLog:
    """Realtime sessions, and an optional gate that holds every handshake until the test releases it.

    Response behaviour (reset by `clear`): `announce_responses` sends `response.created` before each
    `response.done`; `hold_responses` starts each response (created + one audio delta) and finishes it only
    when the client cancels it (`response.done` with status "cancelled" and PARTIAL_USAGE); `server_vad`
    makes `input_audio_buffer.commit` start a response the client did not ask for; `reject_responses`
    answers `response.create` with an `error` event naming the client's event id; `empty_commit_error`
    answers the commit of an empty input buffer with OpenAI's `input_audio_buffer_commit_empty` error (and
    nothing else); `usage`, when set, is the usage every completed response reports instead of
    realtime_routes.USAGE.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sessions: list[RealtimeSession] = []
        self.hold_gate: str | None = None
        self.announce_responses = False
        self.hold_responses = False
        self.server_vad = False
        self.reject_responses = False
        self.empty_commit_error = False
        self.usage: dict | None = None

    @property
    def sessions(self) -> list[RealtimeSession]:
        with self._cond:
            return list(self._sessions)

    def opened(self, session: RealtimeSession) -> None:
        with self._cond:
            self._sessions.append(session)
            self._cond.notify_all()

    def changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_closed(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until `count` sessions have ended."""
        with self._cond:
            return self._cond.wait_for(
                lambda: sum(s.closed_by is not None for s in self._sessions) >= count, timeout
            )

    def clear(self) -> None:
        with self._cond:
            self._sessions.clear()
            self.hold_gate = None
            self.announce_responses = self.hold_responses = self.server_vad = self.reject_responses = False
            self.empty_commit_error = False
            self.usage = None
