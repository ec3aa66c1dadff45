"""Process-wide logging: one JSON object per line (or plain text), level from the config."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import orjson

from config import LoggingConfig

_STANDARD = frozenset(vars(logging.makeLogRecord({})))


class JsonFormatter(logging.Formatter):
    """A log record as one JSON line; extra fields given with `extra=` are kept.

    A record carrying a `fields` mapping (the access log's one line per request) has exactly those
    extra fields, which spares scanning every record attribute on the hot path.
    """

    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._second_text = ""

    def _timestamp(self, created: float, msecs: float) -> str:
        second = int(created)
        if second != self._second:  # strftime once a second, not once a line
            self._second = second
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._second_text}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self._timestamp(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = record.__dict__.get("fields")
        if isinstance(fields, dict):
            entry.update(fields)
        else:
            for key, value in record.__dict__.items():
                if key not in _STANDARD and not key.startswith("_"):
                    entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class BufferedLineHandler(logging.StreamHandler):
    """Writes log lines into a 64 KiB buffer instead of one write(2) per line (one per request on the
    access log). The buffer is flushed at once for warnings and errors, otherwise at most every
    `interval` seconds and by `flush_logs_periodically`; a crash may lose that last fraction of a second.
    """

    def __init__(self, fd: int = 2, interval: float = 0.2) -> None:
        super().__init__(os.fdopen(os.dup(fd), "w", buffering=65536, encoding="utf-8", errors="replace"))
        self._interval = interval
        self._flushed_at = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + "\n")
            now = time.monotonic()
            if record.levelno >= logging.WARNING or now - self._flushed_at >= self._interval:
                self._flushed_at = now
                self.stream.flush()
        except Exception:
            self.handleError(record)


def flush_logs() -> None:
    """Push buffered log lines out now (shutdown, and the periodic flush)."""
    for handler in logging.getLogger().handlers:
        handler.flush()


async def flush_logs_periodically(interval: float = 0.5) -> None:
    """Bound how long a line may wait in the buffer when the gateway goes quiet."""
    while True:
        await asyncio.sleep(interval)
        flush_logs()


def configure_logging(config: LoggingConfig) -> None:
    """Install the handler once for the process."""
    handler = BufferedLineHandler()
    handler.setFormatter(
        JsonFormatter()
        if config.json
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
