"""The open-files limit: every open stream holds two descriptors (the client's connection and the
provider's), so a gateway sized for thousands of streams raises its soft limit to the hard one at start.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("modelgate.server")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; log and return (before, now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if soft == target:
        log.info("open-files limit: %s (the hard limit)", _text(soft))
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:  # e.g. macOS refuses RLIM_INFINITY for files
        log.warning("open-files limit: %s, could not raise it to %s: %s", _text(soft), _text(hard), exc)
        return soft, soft
    log.info("open-files limit raised from %s to %s (the hard limit)", _text(soft), _text(target))
    return soft, target


def _text(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
