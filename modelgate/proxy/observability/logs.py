"""Process-wide logging: one JSON object per line (or plain text), level from the config."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

import orjson

from modelgate.config import LoggingConfig

_STANDARD = frozenset(vars(logging.makeLogRecord({})))
# Libraries whose debug lines carry what they handle: SQL parameters (aiosqlite logs every operation with
# its arguments, an OIDC client secret among them), commands, request headers and bodies. They stay at
# info or above even when `logging.level = "debug"`; modelgate's own loggers follow the setting.
QUIET_LIBRARY_LOGGERS = (
    "aiosqlite",
    "asyncpg",
    "redis",
    "aiohttp.client",
    "aiohttp.internal",
    "aiohttp.server",
    "aiohttp.web",
    "aiohttp.websocket",
    "authlib",
    "httpx",
    "httpcore",
    "urllib3",
    "hpack",
)
_LEVEL_NAMES = {level: logging.getLevelName(level).lower() for level in (10, 20, 30, 40, 50)}


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
        # Bytes: the access line comes out of orjson as UTF-8 and goes in as it is.
        super().__init__(os.fdopen(os.dup(fd), "wb", buffering=65536))
        self._interval = interval
        self._flushed_at = 0.0
        self._stamped_at = -1  # the millisecond of `_stamp`
        self._stamp = ""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write((self.format(record) + "\n").encode("utf-8", "replace"), record.levelno)
        except Exception:
            self.handleError(record)

    def _write(self, line: bytes, levelno: int) -> None:
        self.stream.write(line)
        now = time.monotonic()
        if levelno >= logging.WARNING or now - self._flushed_at >= self._interval:
            self._flushed_at = now
            self.stream.flush()

    def write_entry(self, levelno: int, entry: dict) -> None:
        """The line JsonFormatter would write for a record carrying `entry`'s fields, without building the
        record (see json_line_writer). `entry` is the whole line: its first keys are `ts`, `level`, `logger`
        and `msg`, in that order, then the fields; `ts` and `level` are filled in here. One dict, made by the
        caller in one go: a line of the access log is made once per request."""
        if levelno < self.level:
            return
        entry["ts"] = self._now()
        entry["level"] = _LEVEL_NAMES.get(levelno) or logging.getLevelName(levelno).lower()
        line = orjson.dumps(entry, default=str, option=orjson.OPT_APPEND_NEWLINE)
        lock = self.lock  # made by logging.Handler.__init__; `with` it, not acquire(): once per request
        if lock is None:
            raise RuntimeError("a log handler without its lock")
        with lock:
            self._write(line, levelno)

    def _now(self) -> str:
        """The time as JsonFormatter writes it, formatted once a millisecond (lines of one come together)."""
        millisecond = int(time.time() * 1000)
        if millisecond != self._stamped_at:
            self._stamped_at = millisecond
            formatter = self.formatter
            if not isinstance(formatter, JsonFormatter):  # the handler is only ever given JsonFormatter
                formatter = self.formatter = JsonFormatter()
            self._stamp = formatter._timestamp(millisecond // 1000, millisecond % 1000)
        return self._stamp


EntryWriter = Callable[[int, dict], None]
# The keys an access-log entry starts with (BufferedLineHandler.write_entry); the fields follow.
ENTRY_HEAD = ("ts", "level", "logger", "msg")


def json_line_writer(logger: logging.Logger) -> EntryWriter | None:
    """A writer of `logger`'s structured lines straight to the process's JSON log, or None.

    Only when every record of `logger` would reach exactly our one buffered JSON handler untouched (no
    filter, no other handler on the way): then the access log, one line per request, skips building a
    LogRecord and going through the handler chain, and writes the same line.
    """
    node: logging.Logger | None = logger
    while node is not None and node.parent is not None:  # up to, not including, the root
        if node.handlers or node.filters or not node.propagate:
            return None
        node = node.parent
    root = logging.getLogger()
    if root.filters or len(root.handlers) != 1:
        return None
    handler = root.handlers[0]
    if type(handler) is not BufferedLineHandler or handler.filters:
        return None
    if type(handler.formatter) is not JsonFormatter:
        return None
    return handler.write_entry


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
    # What the lines never show is not collected either (the logging HOWTO's "Optimization"): the
    # caller's file and line, thread, process and multiprocessing names.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.getLogger().handlers[:] = [handler]
    set_log_level(config.level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def set_log_level(level: str) -> None:
    """The process's log level ("debug", "info", ...); the libraries in QUIET_LIBRARY_LOGGERS stay at info
    or above."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    quiet = max(logging.INFO, root.level)
    for name in QUIET_LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
