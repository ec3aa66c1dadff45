"""The ledger's write-ahead spool: every ledger row on local disk from the request's completion until the
database has it, and the admission of every request in flight (modelgate/domain/ledger.py gives both their
meaning).

A gateway process appends each row as one orjson line (one `os.write` on an O_APPEND descriptor) to its
current segment file; a flush seals the segment and starts the next, and a sealed segment is deleted once
the database holds its rows. A process holds every segment file it owns under `fcntl.flock`, so a
`*.spool` file that can be locked belongs to a process that died: the next gateway to start adopts it.
Each file starts with a header naming the database its rows belong to; a file of another database is
left alone. The Redis counters keep their own files in the same directory (`kind` "kept": settlement batches
Redis did not take, `domain.redis_counters`), adopted the same way.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from modelgate.config.schema import SPOOL_FSYNC_POLICIES

log = logging.getLogger("modelgate.spool")

_SUFFIX = ".spool"
_HEADER_KEY = "modelgate_spool"
_FORMAT = 1
_sync_data = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def default_spool_dir(storage_url: str) -> Path:
    """`modelgate-spool` next to the SQLite database file, or in the working directory for PostgreSQL."""
    if storage_url.startswith("sqlite:///"):
        return (
            Path(storage_url.removeprefix("sqlite:///") or "modelgate.db").absolute().parent
            / "modelgate-spool"
        )
    return Path("modelgate-spool").absolute()


def database_identity(storage_url: str) -> str:
    """Which database a spool's rows belong to: the storage URL without credentials or options."""
    if storage_url.startswith("sqlite:///"):
        return "sqlite:" + str(Path(storage_url.removeprefix("sqlite:///") or "modelgate.db").absolute())
    # Not urlsplit: a PostgreSQL URL may name several hosts (`h1:5432,h2:5432`, a primary and its replicas).
    authority, _, path = storage_url.partition("://")[2].partition("/")
    hosts = authority.rpartition("@")[2].lower()
    path = "/" + path.partition("?")[0].partition("#")[0]
    return "postgresql://" + ",".join(map(_with_port, hosts.split(","))) + path


def _with_port(host: str) -> str:
    """`host:port`, the default port added where the URL leaves it out (an IPv6 host is in brackets)."""
    return host if ":" in host.rpartition("]")[2] else f"{host}:5432"


class SpoolError(Exception):
    """The spool directory or a segment file cannot be written."""


@dataclass(slots=True, eq=False)
class SpoolFile:
    """One segment file, locked by this process while it is open."""

    path: Path
    fd: int
    sync_each: bool = False  # fsync = "always"
    dirty: bool = False  # written since the last fsync
    closed: bool = field(default=False, repr=False)

    def append(self, line: bytes) -> None:
        """Hand one line to the kernel; after this it survives the death of the process."""
        written = os.write(self.fd, line)
        if written < len(line):  # a regular file takes it whole unless the disk is full; then this raises
            view = memoryview(line)[written:]
            while view:
                view = view[os.write(self.fd, view) :]
        if self.sync_each:
            _sync_data(self.fd)
        else:
            self.dirty = True


class Spool:
    """The spool directory of one gateway process: its own segment files and those of dead processes."""

    def __init__(
        self, directory: Path, database: str, *, fsync: str, fsync_interval: float, kind: str = "ledger"
    ) -> None:
        if fsync not in SPOOL_FSYNC_POLICIES:
            raise ValueError(f"spool fsync must be one of {SPOOL_FSYNC_POLICIES}, got {fsync!r}")
        self.directory = directory
        self._database = database
        self._kind = kind  # the files' name prefix: a spool adopts only files of its own kind
        self._fsync = fsync
        self._fsync_interval = fsync_interval
        self.owner = f"{os.getpid()}-{secrets.token_hex(4)}"  # in its files' names
        self._sequence = 0
        self._directory_dirty = False
        self._open: list[SpoolFile] = []
        self._sync_lock = asyncio.Lock()  # a segment is never closed while a thread fsyncs it
        self._syncer: asyncio.Task | None = None

    def start(self) -> None:
        """Create the directory and, with `fsync = "interval"`, start the periodic fsync."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"cannot create the spool directory {self.directory}: {exc}") from exc
        if self._fsync == "interval":
            self._syncer = asyncio.get_running_loop().create_task(
                self._sync_periodically(), name="spool-fsync"
            )

    def new_file(self) -> SpoolFile:
        """A fresh locked segment file with its header. Raises SpoolError."""
        self._sequence += 1
        name = f"{self._kind}-{self.owner}-{self._sequence:06d}"
        # Created under a name adoption ignores, and renamed once locked: a starting process scanning the
        # directory can never take a live process's fresh file for a dead one's.
        temporary = self.directory / f".{name}.tmp"
        path = self.directory / f"{name}{_SUFFIX}"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise SpoolError(f"cannot create a spool file in {self.directory}: {exc}") from exc
        spool_file = SpoolFile(path, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            spool_file.append(orjson.dumps({_HEADER_KEY: _FORMAT, "database": self._database}) + b"\n")
            os.rename(temporary, path)
            if self._fsync == "always":
                _sync_data(fd)
                spool_file.dirty = False
                self._sync_directory()
        except OSError as exc:
            os.close(fd)
            temporary.unlink(missing_ok=True)
            raise SpoolError(f"cannot prepare the spool file {path}: {exc}") from exc
        spool_file.sync_each = self._fsync == "always"
        self._open.append(spool_file)
        self._directory_dirty = self._fsync == "interval"  # the periodic sync makes the new name durable
        return spool_file

    def adopt_orphans(self) -> list[SpoolFile]:
        """Lock the segment files of dead processes (files nobody holds), oldest first per process.

        A process's files are adopted all together or not at all: an admission and the completed row that
        supersedes it may be in two of them, and only one adopter may see both.
        """
        adopted: list[SpoolFile] = []
        skipped_owner: str | None = None
        for path in sorted(self.directory.glob(f"{self._kind}-*{_SUFFIX}"), key=_segment_order):
            owner = _segment_order(path)[0]
            if owner == skipped_owner:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:  # removed by its process or another adopter meanwhile
                continue
            except OSError as exc:
                log.warning("spool file %s cannot be opened (%s); left as it is", path, exc)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino != os.stat(path).st_ino:
                    raise FileNotFoundError(path)  # replayed and removed by another adopter, then recreated
            except FileNotFoundError:
                os.close(fd)
                continue
            except OSError:  # BlockingIOError: a live process, or another adopter, holds it
                os.close(fd)
                skipped_owner = owner
                while adopted and _segment_order(adopted[-1].path)[0] == owner:
                    self._close(adopted.pop())
                continue
            spool_file = SpoolFile(path, fd)
            database = self._header(path)
            if database != self._database:
                log.warning(
                    "spool file %s belongs to database %s, not %s; left as it is",
                    path,
                    database,
                    self._database,
                )
                os.close(fd)
                continue
            self._open.append(spool_file)
            adopted.append(spool_file)
        return adopted

    def has_files_of(self, owner: str) -> bool:
        """Whether a file of this kind named after `owner` is in the directory (held or not)."""
        return any(self.directory.glob(f"{self._kind}-{owner}-*{_SUFFIX}"))

    def rows(self, spool_file: SpoolFile) -> Iterator[list]:
        """The rows of a segment file in the order written (a torn last line, from a crash, is skipped)."""
        with open(spool_file.path, "rb") as stream:
            stream.readline()  # the header
            for number, line in enumerate(stream, start=2):
                try:
                    row = orjson.loads(line)
                except orjson.JSONDecodeError:
                    log.warning("spool file %s: line %d is torn or corrupt; skipped", spool_file.path, number)
                    continue
                yield row

    async def remove(self, spool_file: SpoolFile) -> None:
        """Delete a segment whose rows the database holds."""
        # Not synced: a deletion lost in a machine crash only brings back rows the replay finds written.
        async with self._sync_lock:
            spool_file.path.unlink(missing_ok=True)
            self._close(spool_file)

    async def close(self) -> None:
        """Stop syncing and release every file: the ones still holding rows stay for the next start."""
        if self._syncer is not None:
            self._syncer.cancel()
            await asyncio.gather(self._syncer, return_exceptions=True)
            self._syncer = None
        async with self._sync_lock:
            for spool_file in list(self._open):
                if self._fsync != "never" and spool_file.dirty:
                    _sync_quietly(spool_file)
                self._close(spool_file)

    def _close(self, spool_file: SpoolFile) -> None:
        if not spool_file.closed:
            spool_file.closed = True
            os.close(spool_file.fd)  # releases the lock
            self._open.remove(spool_file)

    def _header(self, path: Path) -> str | None:
        try:
            with open(path, "rb") as stream:
                header = orjson.loads(stream.readline())
        except (OSError, orjson.JSONDecodeError):
            return None
        return header.get("database") if isinstance(header, dict) and _HEADER_KEY in header else None

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def _sync_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._fsync_interval)
            async with self._sync_lock:
                dirty = [f for f in self._open if f.dirty]
                for spool_file in dirty:
                    spool_file.dirty = False
                directory, self._directory_dirty = self._directory_dirty, False
                if dirty or directory:
                    # In a thread: an fsync may take long on a busy disk, and requests must not wait for it.
                    await asyncio.to_thread(self._sync, dirty, directory)

    def _sync(self, files: list[SpoolFile], directory: bool) -> None:
        for spool_file in files:
            _sync_quietly(spool_file)
        if directory:
            try:
                self._sync_directory()
            except OSError as exc:
                log.warning("spool fsync of %s failed: %s", self.directory, exc)


def _segment_order(path: Path) -> tuple[str, int]:
    """(owning process, sequence number) of a segment named `<kind>-<owner>-<sequence>.spool`."""
    owner, _, sequence = path.name.removesuffix(_SUFFIX).rpartition("-")
    return (owner, int(sequence)) if sequence.isdigit() else (path.name, 0)


def _sync_quietly(spool_file: SpoolFile) -> None:
    try:
        _sync_data(spool_file.fd)
    except OSError as exc:  # the rows are still in the kernel; only a machine crash could lose them
        log.warning("spool fsync of %s failed: %s", spool_file.path, exc)
