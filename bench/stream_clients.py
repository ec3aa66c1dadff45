"""Closed-loop streaming clients that time every stream: time to first byte and the gap before each later
piece, at a fixed number of concurrent streams (one per keep-alive connection).

wrk counts requests but cannot time the pieces of a stream, and its latencies are corrected for coordinated
omission; this client reads each answer as it arrives and keeps 0.1 ms histograms (sparse dicts), so 10,000
concurrent streams cost the load core little. Streams count only when they start inside the measured window
(after the ramp and a warm-up): a stream counts when it completes inside the window, a first byte or a gap
when it arrives inside it, whenever its stream started (the warm-up is longer than a stream, so the window
sees a steady state); streams still open at its end are cut and not counted.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

_HOST = "127.0.0.1"
_END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked answer (SSE JSON never holds it)
_BUCKET = 10_000  # histogram buckets per second: 0.1 ms


@dataclass(slots=True)
class StreamStats:
    """What the measured window saw: completed streams, failures, pieces and their timing histograms."""

    streams: int = 0
    errors: int = 0  # non-2xx answers, connections lost mid-answer, refused connects
    kinds: dict[str, int] = field(default_factory=dict)  # the errors by kind: "503", "lost", "refused"
    pieces: int = 0  # reads of answer bytes after the first (a slow proxy may deliver several events in one)
    events: int = 0  # SSE events delivered (`data: ` lines), however they were grouped
    ttfb: dict[int, int] = field(default_factory=dict)
    gaps: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0

    def merge(self, other: StreamStats) -> None:
        self.streams += other.streams
        self.errors += other.errors
        for kind, count in other.kinds.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + count
        self.pieces += other.pieces
        self.events += other.events
        for mine, theirs in ((self.ttfb, other.ttfb), (self.gaps, other.gaps)):
            for bucket, count in theirs.items():
                mine[bucket] = mine.get(bucket, 0) + count
        self.seconds = max(self.seconds, other.seconds)

    def failed(self, kind: str) -> None:
        self.errors += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    @property
    def per_second(self) -> float:
        return self.streams / self.seconds if self.seconds else 0.0


def percentile(histogram: dict[int, int], q: float) -> float:
    """The q-quantile (0..1) of a 0.1 ms histogram, in seconds (0 when empty)."""
    total = sum(histogram.values())
    if not total:
        return 0.0
    rank, seen = q * (total - 1), 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen > rank:
            return bucket / _BUCKET
    return max(histogram) / _BUCKET


class _Window:
    """The measured window, shared by one process's connections."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.stats = StreamStats()
        self.running = True


class _TimedStream(asyncio.Protocol):
    """One connection, one stream at a time: the next request goes when the answer's last chunk is in."""

    def __init__(self, request: bytes, window: _Window, lost: asyncio.Future) -> None:
        self._request, self._window, self._lost = request, window, lost
        self._transport: asyncio.Transport | None = None
        self._head = bytearray()
        self._in_body = False
        self._left = -1  # bytes of a Content-Length answer still to come (an error answer)
        self._tail = b""
        self._sent_at = self._last_at = 0.0
        self._error_answer = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._send()

    def _send(self) -> None:
        window = self._window
        if not window.running:
            self._transport.close()
            return
        self._head.clear()
        self._in_body, self._left, self._tail = False, -1, b""
        self._sent_at = time.perf_counter()
        self._error_answer = False
        self._transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        window = self._window
        counted = window.start <= time.monotonic() < window.end
        stats = window.stats
        if not self._in_body:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = bytes(self._head[:end]), bytes(self._head[end + 4 :])
            self._in_body = True
            if head[9:10] != b"2" or b"chunked" not in head.lower():
                length = head.lower().find(b"content-length:")
                self._left = int(head[length + 15 :].split(b"\r\n", 1)[0]) if length >= 0 else 0
                self._error_answer = True
                if counted:
                    stats.failed(head[9:12].decode("latin-1"))
            elif counted:
                bucket = int((now - self._sent_at) * _BUCKET)
                stats.ttfb[bucket] = stats.ttfb.get(bucket, 0) + 1
                stats.events += data.count(b"data: ")
        elif counted and not self._error_answer:
            stats.pieces += 1
            stats.events += data.count(b"data: ")
            bucket = int((now - self._last_at) * _BUCKET)
            stats.gaps[bucket] = stats.gaps.get(bucket, 0) + 1
        self._last_at = now
        if self._left >= 0:  # a whole (error) answer: done once its body is in
            self._left -= len(data)
            if self._left <= 0:
                self._send()
            return
        seen = self._tail + data
        if _END in seen:
            if counted:
                stats.streams += 1
            self._send()
        else:
            self._tail = seen[-len(_END) :]

    def connection_lost(self, exc: Exception | None) -> None:
        window = self._window
        if window.running and window.start <= time.monotonic() < window.end:
            window.stats.failed("lost")
        if not self._lost.done():
            self._lost.set_result(None)


async def _keep_open(port: int, request: bytes, window: _Window) -> None:
    """One connection for the whole run, opened again if it is lost while the run goes on."""
    loop = asyncio.get_running_loop()
    while window.running:
        lost = loop.create_future()
        try:
            await loop.create_connection(lambda f=lost: _TimedStream(request, window, f), _HOST, port)
        except OSError:
            if window.start <= time.monotonic() < window.end:
                window.stats.failed("refused")
            await asyncio.sleep(0.1)  # the target refused: retry shortly, as a client would
            continue
        await lost


async def _drive(port: int, request: bytes, streams: int, ramp_until: float, start: float, end: float):
    window = _Window(start, end)
    tasks = []
    # One connect at a time, evenly over the ramp: streams then start (and, all lasting alike, go on
    # starting) spread in time, as real clients' do. Batches of 100 at once stay synchronised for the
    # whole run, and every batch's last request then waits for the 99 before it to be admitted.
    began = time.monotonic()
    step = max(0.0, ramp_until - began) / max(1, streams)
    for index in range(streams):
        tasks.append(asyncio.ensure_future(_keep_open(port, request, window)))
        delay = began + (index + 1) * step - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.sleep(max(0.0, end - time.monotonic()))
    window.running = False
    window.stats.seconds = end - start
    stats = window.stats
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return stats


def _worker(port: int, request: bytes, streams: int, times: tuple[float, float, float], cpus, out) -> None:
    os.sched_setaffinity(0, cpus)
    try:
        import uvloop

        stats = uvloop.run(_drive(port, request, streams, *times))
    except ImportError:
        stats = asyncio.run(_drive(port, request, streams, *times))
    out.send(stats)


def run_streams(
    port: int,
    *,
    streams: int,
    request: bytes,
    ramp: float,
    warmup: float,
    seconds: float,
    cpus: set[int],
    on_window: Callable[[float, float], None] | None = None,
) -> StreamStats:
    """Hold `streams` concurrent streams on `port` (one asyncio process per core in `cpus`): connect over
    `ramp` seconds, warm up, then measure `seconds`. `on_window(start, end)` runs in this process once the
    workers started (to sample the target's CPU and memory over the same window)."""
    now = time.monotonic()
    times = (now + ramp, now + ramp + warmup, now + ramp + warmup + seconds)
    processes = max(1, min(len(cpus), streams))
    context = multiprocessing.get_context("fork")
    pipes: list[Connection] = []
    workers = []
    for index in range(processes):
        share = streams // processes + (1 if index < streams % processes else 0)
        receive, send = context.Pipe(duplex=False)
        worker = context.Process(target=_worker, args=(port, request, share, times, cpus, send), daemon=True)
        worker.start()
        pipes.append(receive)
        workers.append(worker)
    if on_window is not None:
        on_window(times[1], times[2])
    total = StreamStats()
    for receive, worker in zip(pipes, workers, strict=True):
        if not receive.poll(ramp + warmup + seconds + 120):
            raise RuntimeError("the stream clients did not finish")
        total.merge(receive.recv())
        worker.join(timeout=30)
    return total
