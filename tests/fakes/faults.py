"""Faults a test queues on a path, consumed FIFO by the next requests to that path."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fault:
    """How the next request(s) to a path misbehave; unset fields mean normal behaviour.

    `status` answers with that status and `body` (default: the route's vendor error envelope),
    `headers` adds response headers (e.g. `retry-after`). The stream fields only affect SSE answers.
    `ignore_output_cap` makes chat and completions answer past the request's `max_tokens` /
    `max_completion_tokens`, as a misbehaving provider would. `omit_usage` makes chat completions answer
    without any usage (plain or streamed), like providers that report none. `answer_model` is the model name
    the answer reports instead of the one requested (as providers answer with a dated snapshot's name).
    `usage_chunk` shapes a chat stream's usage as some providers send it: "empty_choice" (a usage chunk
    whose `choices` hold one choice with an empty delta) or "last_content" (usage on the chunk carrying the
    last piece of content and the finish reason); both then carry a provider `cost` field, top level and in
    `usage`, as plain answers do with `provider_cost`. `object_id` is the id a created stored response or
    video gets instead of the fake's own (providers' ids differ in length and alphabet). `billed_usage` is
    the usage a chat completion or a response reports (plain and streamed) instead of the echo's count: a
    provider billing what the request does not show (a previous response's context, a stored prompt, a
    file, an image URL), or more than the cap it was sent. `report_usage` is what a chat completion, a
    Response or a Messages answer reports instead of its own usage: `{"usage": {...}}` in the provider's
    shape, for chat and Responses a `service_tier` beside it, for Responses `output_items` (tool calls)
    added to its output (plain and streamed alike; a Messages stream then repeats the whole usage in its
    message_delta, as the API may).
    `hold_before_headers` names a gate the request waits at before it is answered at all (a slow
    non-streamed answer, finished when the test releases the gate). `hold_after_last_chunk` names a gate
    a stream waits at once every frame, its final event included, was written, before its body ends.
    """

    status: int | None = None
    body: dict | None = None
    headers: dict[str, str] | None = None
    delay_before_headers: float = 0.0
    hold_before_headers: str | None = None
    hang: bool = False
    disconnect_after_chunks: int | None = None
    chunk_delay: float = 0.0
    hold_before_last_chunk: str | None = None
    hold_after_last_chunk: str | None = None
    ignore_output_cap: bool = False
    omit_usage: bool = False
    answer_model: str | None = None
    usage_chunk: str | None = None
    provider_cost: bool = False
    object_id: str | None = None
    billed_usage: dict | None = None
    report_usage: dict | None = None


FOREVER = -1


@dataclass(slots=True)
class _Queued:
    fault: Fault
    remaining: int  # FOREVER, or uses left


class FaultBook:
    """Per-path FIFO of queued faults; shared by the test thread and the server loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, deque[_Queued]] = {}

    def add(self, path: str, fault: Fault, times: int = 1) -> None:
        if not path.startswith("/"):
            raise ValueError(f"fault path must be absolute, e.g. '/v1/chat/completions', got {path!r}")
        if times != FOREVER and times < 1:
            raise ValueError(f"times must be >= 1 or -1 (forever), got {times}")
        with self._lock:
            self._queues.setdefault(path, deque()).append(_Queued(fault, times))

    def take(self, path: str) -> Fault | None:
        """Consume one use of the oldest fault queued on `path`, if any."""
        with self._lock:
            queue = self._queues.get(path)
            if not queue:
                return None
            head = queue[0]
            if head.remaining != FOREVER:
                head.remaining -= 1
                if head.remaining == 0:
                    queue.popleft()
            return head.fault

    def clear(self) -> None:
        with self._lock:
            self._queues.clear()
