"""Optional sampling of the gateway with py-spy; the benchmark runs fine without it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PY_SPY_HINT = "py-spy not found: install it with `pip install py-spy` to use --profile"
SAMPLE_RATE = 250


def find_py_spy() -> str | None:
    """py-spy on PATH or next to this interpreter (an unactivated virtualenv)."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


def _format_for(path: Path) -> str:
    return {".svg": "flamegraph", ".json": "speedscope"}.get(path.suffix, "raw")


@contextlib.contextmanager
def start_profiler(pid: int, output: Path, seconds: float, cpus: set[int]) -> Iterator[subprocess.Popen]:
    """py-spy recording `pid` and its worker processes for `seconds`, pinned to `cpus`; stopped by PID."""
    py_spy = find_py_spy()
    if py_spy is None:
        raise SystemExit(PY_SPY_HINT)
    args = [
        py_spy,
        "record",
        "--pid",
        str(pid),
        "--subprocesses",
        "--nonblocking",
        "--rate",
        str(SAMPLE_RATE),
        "--duration",
        str(max(1, round(seconds))),
        "--format",
        _format_for(output),
        "--output",
        str(output),
    ]
    process = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGINT)  # py-spy writes what it has on SIGINT
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=5)


def is_raw(output: Path) -> bool:
    """Whether `output` holds collapsed stacks that `profile_summary` can read."""
    return _format_for(output) == "raw"
