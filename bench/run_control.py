"""What every benchmark run needs: the core layout, the time budget's alarm, the gateway log's problems."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def core_layout(workers: int) -> tuple[set[int], set[int]]:
    """(proxy cores, load cores): the proxy alone on the first core, everything else on the second."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        print("note: only one core available, nothing is pinned; numbers are indicative", file=sys.stderr)
        return set(available), set(available)
    return ({available[0]} if workers == 1 else set(available)), {available[1]}


def timeout_alarm(signum: int, frame: object) -> None:
    """SIGALRM handler: the run went past its time budget."""
    raise TimeoutError("the benchmark ran past its time budget")


def log_problems(log_path: Path, limit: int = 5) -> list[str]:
    """The first few warning/error lines of a gateway JSON log."""
    lines = log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if '"level":"error"' in line or '"level":"warning"' in line][:limit]
