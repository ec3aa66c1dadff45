"""Time as the cabinet stores it (epoch seconds) and shows it (ISO 8601, UTC)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now() -> float:
    """The current time in epoch seconds, as stored in every `*_at` column."""
    return time.time()


def isoformat(epoch: float | None) -> str | None:
    """An epoch-seconds column as an ISO 8601 UTC string (`None` stays `None`)."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
