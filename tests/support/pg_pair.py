"""A PostgreSQL primary and a streaming replica of it, started by a test on loopback ports of their own.

The primary is made with `initdb`, the replica with `pg_basebackup --write-recovery-conf` (streaming
replication), both run by `pg_ctl` from the machine's PostgreSQL binaries. PostgreSQL refuses to run as root:
when the tests do, the servers run as the `postgres` user (`runuser`), in a directory that user owns.
Failover is what an operator's tooling does: `stop_primary` (immediate: a crash, no checkpoint), then
`promote` the replica. Replication is asynchronous unless `synchronous`: then the primary acknowledges a
commit only once the replica has it on disk (`synchronous_standby_names = '*'`, set on the primary alone:
the promoted replica, with no standby of its own, commits without waiting), so a promotion loses nothing
that was acknowledged (docs/deploy.md "PostgreSQL failover").
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.gateway import free_port
from tests.support.local_servers import LocalServers

_BINARIES = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))


def postgres_binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian's layout), or None."""
    return _BINARIES[-1].parent if _BINARIES else None


class PostgresPair(LocalServers):
    """`start()` the primary and its replica; `url` names both (`target_session_attrs=read-write`)."""

    def __init__(self, database: str = "gateway", *, synchronous: bool = False) -> None:
        binaries = postgres_binaries()
        if binaries is None:
            raise FileNotFoundError("no PostgreSQL binaries under /usr/lib/postgresql")
        self._bin = binaries
        self.database = database
        self.synchronous = synchronous
        self.primary_port, self.replica_port = free_port(), free_port()
        self._as_root = os.geteuid() == 0
        self._root = Path(tempfile.mkdtemp(prefix="modelgate-pg-pair-"))
        if self._as_root:
            user = pwd.getpwnam("postgres")
            os.chown(self._root, user.pw_uid, user.pw_gid)
        self._primary = self._root / "primary"
        self._replica = self._root / "replica"
        self._running: list[Path] = []

    @property
    def url(self) -> str:
        hosts = f"127.0.0.1:{self.primary_port},127.0.0.1:{self.replica_port}"
        return f"postgresql://postgres@{hosts}/{self.database}?target_session_attrs=read-write"

    def url_of(self, port: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{self.database}"

    def _run(self, tool: str, *args: str) -> str:
        command = [str(self._bin / tool), *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=True, capture_output=True, timeout=120, text=True).stdout

    def _sql(self, port: int, statement: str) -> str:
        """One statement on a server's `postgres` database (psql: ALTER SYSTEM runs outside a transaction)."""
        address = ("-h", "127.0.0.1", "-p", str(port), "-U", "postgres")
        return self._run("psql", *address, "-d", "postgres", "-tAc", statement).strip()

    def _start(self, data: Path, port: int) -> None:
        options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self._root}"
        self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(data) + ".log", "-w", "start")
        self._running.append(data)

    def start(self) -> PostgresPair:
        self._run("initdb", "-D", str(self._primary), "-U", "postgres", "-A", "trust", "--no-sync")
        self._start(self._primary, self.primary_port)
        port = str(self.primary_port)
        self._run("createdb", "-h", "127.0.0.1", "-p", port, "-U", "postgres", self.database)
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary_port),
            "-U",
            "postgres",
            "-D",
            str(self._replica),
            "--write-recovery-conf",
            "--wal-method=stream",
            # The default (spread) checkpoint took over 90 s before the copy began.
            "--checkpoint=fast",
            "--no-sync",
        )
        self._start(self._replica, self.replica_port)
        if self.synchronous:
            self._sql(self.primary_port, "ALTER SYSTEM SET synchronous_standby_names = '*'")
            self._sql(self.primary_port, "SELECT pg_reload_conf()")
            self._wait_for_sync_standby()
        return self

    def _wait_for_sync_standby(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        query = "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
        while self._sql(self.primary_port, query) != "1":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica did not become a synchronous standby within {timeout} s")
            time.sleep(0.05)  # polling the primary's view of its standby, bounded by the deadline

    def stop_primary(self) -> None:
        """The primary goes away as in a crash: no shutdown checkpoint, its clients cut off."""
        self._run("pg_ctl", "-D", str(self._primary), "-m", "immediate", "-w", "stop")
        self._running.remove(self._primary)

    def promote(self) -> None:
        """The replica becomes the read-write primary (waits until it is)."""
        self._run("pg_ctl", "-D", str(self._replica), "-w", "promote")

    def close(self) -> None:
        for data in list(self._running):
            try:
                self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
            except subprocess.CalledProcessError:
                pass  # already gone
        self._running.clear()
        shutil.rmtree(self._root, ignore_errors=True)
