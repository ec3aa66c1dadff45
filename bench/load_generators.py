"""Closed-loop load at a fixed number of connections: `wrk` when installed, else a Python fallback.

wrk is the reference. The fallback runs asyncio (uvloop) processes that each keep their share of the
connections busy with keep-alive requests (one in flight per connection); it is slower than wrk, so
the benchmark reports how busy the load core was and warns when it may have been the bottleneck.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from workload import CHAT_PATH, raw_request

WRK_INSTALL_HINT = (
    "wrk not found: install it for accurate numbers (Debian/Ubuntu: `apt-get install -y wrk`, "
    "macOS: `brew install wrk`); using the slower Python load generator instead"
)
_LUA_SCRIPT = Path(__file__).with_name("post.lua")
_WRK_LINE = re.compile(r"^BENCH (.*)$", re.MULTILINE)
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_LAST_CHUNK = b"\r\n0\r\n\r\n"
_HOST = "127.0.0.1"
_COUNT_TIMEOUT = 1800.0  # count_requests: a bound, even for a target slowed by valgrind


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one load run achieved."""

    requests: int
    seconds: float
    errors: int  # non-2xx answers plus socket errors

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def wrk_command(
    port: int, *, connections: int, seconds: float, body_file: Path, api_key: str, mix: str = ""
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of one wrk thread posting `body_file` (or the `mix`, see post.lua)."""
    args = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(_LUA_SCRIPT),
        f"http://{_HOST}:{port}{CHAT_PATH}",
    ]
    env = {**os.environ, "BENCH_BODY_FILE": str(body_file), "BENCH_API_KEY": api_key, "BENCH_MIX": mix}
    return args, env


def parse_wrk(returncode: int, stdout: str, stderr: str) -> LoadResult:
    """The result line post.lua prints, or an error with wrk's output."""
    match = _WRK_LINE.search(stdout)
    if returncode != 0 or match is None:
        raise RuntimeError(f"wrk failed ({returncode}): {stdout}\n{stderr}")
    values = {k: int(v) for k, v in (pair.split("=") for pair in match.group(1).split())}
    errors = sum(values[k] for k in ("status", "connect", "read", "write", "timeout"))
    # wrk's latency percentiles are not used: wrk "corrects" them for coordinated omission, so one
    # scheduler stall at one connection turns into thousands of made-up slow samples.
    return LoadResult(values["requests"], values["duration_us"] / 1e6, errors)


def run_wrk(
    port: int, *, connections: int, seconds: float, body_file: Path, api_key: str, cpus: set[int]
) -> LoadResult:
    """One wrk thread, pinned to `cpus`, posting the body at `connections` connections."""
    args, env = wrk_command(
        port, connections=connections, seconds=seconds, body_file=body_file, api_key=api_key
    )
    done = subprocess.run(
        args,
        env=env,
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    return parse_wrk(done.returncode, done.stdout, done.stderr)


class _ClosedLoop(asyncio.Protocol):
    """One keep-alive connection with one request in flight: the next goes as soon as the previous answer is
    complete, for as long as `_go_on` says. `counts` is shared by the connections: [answered, non-2xx]."""

    def __init__(self, request: bytes, counts: list[int], closed: asyncio.Future) -> None:
        self._request, self._counts, self._closed = request, counts, closed
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None

    def _go_on(self) -> bool:
        raise NotImplementedError

    def _send(self) -> None:
        if self._go_on():
            self._transport.write(self._request)
        else:
            self._transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._send()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\r\n\r\n")) >= 0:
            match = _CONTENT_LENGTH.search(self._buffer, 0, end + 2)
            if match:
                total = end + 4 + int(match.group(1))
            else:  # a chunked stream: complete at its last chunk (SSE JSON never holds this sequence)
                last = self._buffer.find(_LAST_CHUNK, end + 2)
                total = last + len(_LAST_CHUNK) if last >= 0 else len(self._buffer) + 1
            if len(self._buffer) < total:
                return
            self._counts[0] += 1
            self._counts[1] += 0 if self._buffer[9:10] == b"2" else 1
            del self._buffer[:total]
            self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed.done():
            self._closed.set_result(None)


class _UntilDeadline(_ClosedLoop):
    """Requests until `deadline` (time.monotonic) has passed."""

    def __init__(self, request: bytes, deadline: float, counts: list[int], closed: asyncio.Future) -> None:
        super().__init__(request, counts, closed)
        self._deadline = deadline

    def _go_on(self) -> bool:
        return time.monotonic() < self._deadline


async def _drive(port: int, request: bytes, connections: int, seconds: float) -> tuple[int, int, float]:
    loop = asyncio.get_running_loop()
    totals = [0, 0]
    started = time.monotonic()
    deadline = started + seconds
    waits = []
    for _ in range(connections):
        closed = loop.create_future()
        await loop.create_connection(
            lambda c=closed: _UntilDeadline(request, deadline, totals, c), _HOST, port
        )
        waits.append(closed)
    await asyncio.wait_for(asyncio.gather(*waits), timeout=seconds + 30)
    return totals[0], totals[1], time.monotonic() - started


class _UntilSent(_ClosedLoop):
    """Requests while the budget shared by the connections lasts (`left`: [requests still to send])."""

    def __init__(self, request: bytes, left: list[int], counts: list[int], closed: asyncio.Future) -> None:
        super().__init__(request, counts, closed)
        self._left = left

    def _go_on(self) -> bool:
        if self._left[0] <= 0:
            return False
        self._left[0] -= 1
        return True


async def count_requests(port: int, request: bytes, connections: int, total: int) -> tuple[int, int]:
    """Send exactly `total` requests over `connections` keep-alive connections (one in flight each) and
    wait for every answer: (answered, non-2xx)."""
    loop = asyncio.get_running_loop()
    left, counts = [total], [0, 0]
    waits = []
    for _ in range(min(connections, total)):
        closed = loop.create_future()
        await loop.create_connection(lambda c=closed: _UntilSent(request, left, counts, c), _HOST, port)
        waits.append(closed)
    await asyncio.wait_for(asyncio.gather(*waits), timeout=_COUNT_TIMEOUT)
    return counts[0], counts[1]


def _worker(
    port: int, request: bytes, connections: int, seconds: float, cpus: set[int], out: Connection
) -> None:
    os.sched_setaffinity(0, cpus)
    try:
        import uvloop

        result = uvloop.run(_drive(port, request, connections, seconds))
    except ImportError:
        result = asyncio.run(_drive(port, request, connections, seconds))
    out.send(result)


def run_python(port: int, *, connections: int, seconds: float, request: bytes, cpus: set[int]) -> LoadResult:
    """The fallback: one asyncio process per core in `cpus`, sharing `connections` connections."""
    processes = max(1, min(len(cpus), connections))
    context = multiprocessing.get_context("fork")
    pipes, workers = [], []
    for index in range(processes):
        share = connections // processes + (1 if index < connections % processes else 0)
        receive, send = context.Pipe(duplex=False)
        worker = context.Process(
            target=_worker, args=(port, request, share, seconds, cpus, send), daemon=True
        )
        worker.start()
        pipes.append(receive)
        workers.append(worker)
    requests = errors = 0
    elapsed = 0.0
    for receive, worker in zip(pipes, workers, strict=True):
        if not receive.poll(seconds + 60):
            raise RuntimeError("the Python load generator did not finish")
        done, failed, took = receive.recv()
        requests, errors, elapsed = requests + done, errors + failed, max(elapsed, took)
        worker.join(timeout=10)
    return LoadResult(requests, elapsed, errors)


class LoadGenerator:
    """The generator chosen for a run (wrk unless missing or `choice` says python), pinned to `cpus`."""

    def __init__(self, choice: str, cpus: set[int], body_file: Path, api_key: str) -> None:
        if choice == "wrk" and not wrk_available():
            raise SystemExit(WRK_INSTALL_HINT.split(";")[0])
        self.use_wrk = choice == "wrk" or (choice == "auto" and wrk_available())
        if not self.use_wrk and choice == "auto":
            print(f"note: {WRK_INSTALL_HINT}", file=sys.stderr)
        self.cpus, self._body_file, self._api_key = cpus, body_file, api_key
        self.name = "wrk -t1" if self.use_wrk else "python (asyncio) fallback"

    def run(self, port: int, connections: int, seconds: float, body_file: Path | None = None) -> LoadResult:
        """Keep `connections` connections busy for `seconds` posting `body_file` (default: the chat body)."""
        body_file = body_file or self._body_file
        if self.use_wrk:
            return run_wrk(
                port,
                connections=connections,
                seconds=seconds,
                body_file=body_file,
                api_key=self._api_key,
                cpus=self.cpus,
            )
        request = raw_request(_HOST, port, body_file.read_bytes(), self._api_key)
        return run_python(port, connections=connections, seconds=seconds, request=request, cpus=self.cpus)
