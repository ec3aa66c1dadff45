"""Child processes of the benchmark: started pinned to cores, tied to our lifetime, stopped by PID."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _prepare_child(cpus: set[int]) -> Callable[[], None]:
    def prepare() -> None:
        os.sched_setaffinity(0, cpus)
        # If the benchmark dies (even by SIGKILL), the kernel sends the child SIGTERM: nothing outlives us.
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return prepare


@dataclass(slots=True)
class Child:
    """One started process and the log file its output goes to."""

    name: str
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def check_alive(self) -> None:
        """Raise with the tail of the log if the process has exited."""
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{tail}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM by PID, then SIGKILL by PID if it does not exit in time."""
        if self.process.poll() is not None:
            return
        os.kill(self.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait(timeout=5)


def start(
    name: str,
    args: list[str],
    *,
    cpus: Iterable[int],
    log_dir: Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Child:
    """Start `args` on the given cores with output to `log_dir/name.log`."""
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            preexec_fn=_prepare_child(set(cpus)),
        )
    return Child(name, process, log_path)


def wait_for_port(child: Child, port: int, timeout: float = 30.0) -> None:
    """Block until something accepts TCP connections on `port`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child.check_alive()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)  # polling a starting process, bounded by the deadline
    raise RuntimeError(f"{child.name} did not listen on port {port} within {timeout:g}s")


def wait_for_http(child: Child, url: str, timeout: float = 60.0) -> None:
    """Block until `url` answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child.check_alive()
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as reply:
            if reply.status == 200:
                return
        time.sleep(0.1)  # polling a starting process, bounded by the deadline
    raise RuntimeError(f"{child.name} was not ready at {url} within {timeout:g}s")
