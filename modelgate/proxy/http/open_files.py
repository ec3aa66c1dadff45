"""The open-files limit: every open stream holds two descriptors (the client's connection and the
provider's), so a gateway sized for thousands of streams raises its soft limit to the hard one at start.
"""

from __future__ import annotations

import resource


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit: (the limit before, the limit now). Quiet:
    the server says what it did once it listens (`open_files_text`), so a start that fails stays one line."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # e.g. macOS refuses RLIM_INFINITY for files
            return soft, soft
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_files_text(before: int, now: int) -> str:
    """The log line about the limit: raised, or already the hard one."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if before == now:
        if now == hard:
            return f"open-files limit: {_text(now)} (the hard limit)"
        return f"open-files limit: {_text(now)}, could not be raised to the hard limit {_text(hard)}"
    return f"open-files limit raised from {_text(before)} to {_text(now)} (the hard limit)"


def _text(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
