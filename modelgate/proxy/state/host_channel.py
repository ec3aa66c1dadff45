"""The processes of one host on one SQLite database tell each other of revocations, plan, policy and balance
changes through a small file next to the database (`<database>-channel`), mapped into memory by each of
them: the workers of `modelgate serve --workers N` and the `modelgate billing` command alike.

The file is a ring of message slots behind a head counter. Publishing takes an exclusive `flock` for the
few microseconds it writes one slot and moves the head. Listening costs one 8-byte read of shared memory:
the key directory calls `poll()` at the start of every key lookup, and only when the head moved are the
new slots read and handed to their handlers. So a message published before the cabinet (or the CLI)
answers is acted on by every process before the next request it serves, with no thread, no socket and no
database query on the request path. A process that falls more than a ring behind (or finds a slot
rewritten under it) cannot know what it missed and calls its `on_missed` callbacks (drop every cache).
"""

from __future__ import annotations

import asyncio
import fcntl
import inspect
import logging
import mmap
import os
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

log = logging.getLogger("modelgate.host_channel")

Handler = Callable[[str], Awaitable[None] | None]

_MAGIC = b"MGCHAN01"
_HEADER = 64  # the magic, then the head (the sequence number of the latest message) at byte 8
_SLOTS = 1024
_SLOT = 256
_SLOT_HEAD = struct.Struct("<QIH")  # sequence number (0 while being written), origin, length
_CAPACITY = _SLOT - _SLOT_HEAD.size
_SIZE = _HEADER + _SLOTS * _SLOT
_MISSED = ""  # the channel name of a message too long for a slot: readers drop everything instead


def channel_path(storage_url: str) -> Path | None:
    """The channel file of a SQLite database; None where processes have another channel (PostgreSQL) or
    share nothing (an in-memory database)."""
    if not storage_url.startswith("sqlite:///"):
        return None
    database = storage_url.removeprefix("sqlite:///") or "modelgate.db"
    if database == ":memory:":
        return None
    return Path(database).absolute().with_name(Path(database).name + "-channel")


class HostChannel:
    """Publish to and hear from every process mapping the same channel file."""

    def __init__(self, path: Path, fd: int, mapped: mmap.mmap) -> None:
        self.path = path
        self._fd = fd
        self._map = mapped
        self._words = memoryview(mapped).cast("Q")  # word 1 is the head
        self._seen = self._words[1]
        self._origin = int.from_bytes(os.urandom(4), "little")  # to skip what this channel published
        self._handlers: dict[str, list[Handler]] = {}
        self._missed: list[Callable[[], None]] = []
        self._tasks: set[asyncio.Task] = set()

    @classmethod
    def open(cls, storage_url: str) -> HostChannel | None:
        """Map the database's channel file (created beside it, with the database file's permissions), or
        None for a database that has none (see `channel_path`). Raises OSError when it cannot be made."""
        path = channel_path(storage_url)
        if path is None:
            return None
        database = path.with_name(path.name.removesuffix("-channel"))
        mode = database.stat().st_mode & 0o666 if database.exists() else 0o600
        fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size != _SIZE or os.pread(fd, len(_MAGIC), 0) != _MAGIC:
                    # New, or of another layout: start empty (zeroed in place, never cut to nothing under a
                    # process that has it mapped; one that had read further sees the head go back: missed).
                    os.ftruncate(fd, _SIZE)
                    os.pwrite(fd, _MAGIC + bytes(_SIZE - len(_MAGIC)), 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            mapped = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, mapped)

    def on(self, channel: str, handler: Handler) -> None:
        """Call `handler(payload)` for each message on `channel` published by another process."""
        self._handlers.setdefault(channel, []).append(handler)

    def on_missed(self, callback: Callable[[], None]) -> None:
        """Called when messages were lost to this process (it fell a ring behind): read everything afresh."""
        self._missed.append(callback)

    def poll(self) -> None:
        """Hand the messages published since the last poll to their handlers; one shared-memory read when
        there are none (the hot path)."""
        if self._words[1] != self._seen:
            self._receive()

    def _receive(self) -> None:
        head = self._words[1]
        if head < self._seen or head - self._seen > _SLOTS:
            self._seen = head
            self._lost()
            return
        while self._seen < head:
            sequence = self._seen + 1
            offset = _HEADER + (sequence % _SLOTS) * _SLOT
            written, origin, length = _SLOT_HEAD.unpack_from(self._map, offset)
            body = self._map[offset + _SLOT_HEAD.size : offset + _SLOT_HEAD.size + length]
            if written != sequence or _SLOT_HEAD.unpack_from(self._map, offset)[0] != sequence:
                self._seen = head  # rewritten by a publisher a ring ahead of us
                self._lost()
                return
            self._seen = sequence
            if origin != self._origin:
                self._deliver(body.decode("utf-8", "replace"))

    def _deliver(self, message: str) -> None:
        channel, _, payload = message.partition("\n")
        if channel == _MISSED:
            self._lost()
            return
        for handler in self._handlers.get(channel, ()):
            try:
                result = handler(payload)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._tasks.add(task)
                    task.add_done_callback(self._finished)
            except Exception:
                log.exception("host channel: handler for %s failed", channel)

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("host channel: handler failed", exc_info=task.exception())

    def _lost(self) -> None:
        log.warning("host channel: messages were missed; cached keys and policies are read afresh")
        for callback in self._missed:
            callback()

    async def publish(self, channel: str, payload: str) -> None:
        """Append a message for every other process mapping the file (this channel does not hear it)."""
        self.publish_now(channel, payload)

    def publish_now(self, channel: str, payload: str) -> None:
        """`publish`, for callers outside an event loop."""
        body = f"{channel}\n{payload}".encode()
        if len(body) > _CAPACITY:
            log.warning("host channel: a %s message of %d bytes does not fit a slot", channel, len(body))
            body = _MISSED.encode() + b"\n"
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            sequence = self._words[1] + 1
            offset = _HEADER + (sequence % _SLOTS) * _SLOT
            _SLOT_HEAD.pack_into(self._map, offset, 0, self._origin, len(body))
            self._map[offset + _SLOT_HEAD.size : offset + _SLOT_HEAD.size + len(body)] = body
            _SLOT_HEAD.pack_into(self._map, offset, sequence, self._origin, len(body))
            self._words[1] = sequence
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._words.release()
        self._map.close()
        os.close(self._fd)
