"""CPU time and resident memory of a process tree, read from /proc (Linux only)."""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (e.g. the worker processes of `modelgate serve --workers N`)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            parent = int(_stat_fields(int(entry.name))[1])
        except (OSError, ValueError, IndexError):
            continue  # the process exited while we looked
        parents.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(parents.get(current, ()))
    return tree


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds consumed so far by these processes."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / _TICKS


def rss_mb(pid: int) -> float:
    """Resident set size (VmRSS) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def core_times(cpus: set[int]) -> tuple[int, int]:
    """Busy and total jiffies of these cores since boot, from /proc/stat."""
    busy = total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        numbers = [int(v) for v in values[:8]]
        idle = numbers[3] + numbers[4]  # idle + iowait
        busy += sum(numbers) - idle
        total += sum(numbers)
    return busy, total


def cpu_by_process() -> dict[int, float]:
    """CPU seconds so far of every process on the machine, by PID."""
    seconds: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = _stat_fields(int(entry.name))
            except (OSError, ValueError):
                continue  # the process exited while we looked
            seconds[int(entry.name)] = (int(fields[11]) + int(fields[12])) / _TICKS
    return seconds


def foreign_cpu(before: dict[int, float], after: dict[int, float], ours: set[int]) -> float:
    """CPU seconds that processes other than `ours` used between two `cpu_by_process` snapshots."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items() if pid not in ours)


def wait_for_quiet(
    ours: set[int], *, max_cores: float = 0.1, window: float = 1.0, timeout: float = 30.0
) -> bool:
    """Wait until other processes use under `max_cores` for one `window`; False if it never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_by_process()
        time.sleep(window)  # sampling other processes' CPU over a window, bounded by the deadline
        if foreign_cpu(before, cpu_by_process(), ours) / window < max_cores:
            return True
    return False
