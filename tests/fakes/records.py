"""What a fake upstream received: one immutable record per HTTP request."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the fake saw it on the wire (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    json: Any

    @classmethod
    def capture(
        cls, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> RecordedRequest:
        """Build a record, parsing the body as JSON when it is JSON."""
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        return cls(method, path, query, {k.lower(): v for k, v in headers.items()}, body, parsed)


class RequestLog:
    """Append-only list of records, written from the server loop and read from the test thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []

    def append(self, record: RecordedRequest) -> None:
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
