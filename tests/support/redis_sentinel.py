"""A Redis master, a replica of it and a sentinel watching them, started by a test on loopback ports of its
own (`redis-server`, and `redis-server --sentinel` with a config file it may rewrite). `kill_master` is a
crash; the sentinel then promotes the replica (`wait_for_failover`). With `password` the master and replica
ask for it (`requirepass`, `masterauth`); with `sentinel_password` the sentinel asks for its own.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support.gateway import free_port
from tests.support.local_servers import LocalServers

MASTER_NAME = "modelgate"


class SentinelTrio(LocalServers):
    def __init__(self, password: str | None = None, sentinel_password: str | None = None) -> None:
        self.master_port, self.replica_port, self.sentinel_port = free_port(), free_port(), free_port()
        self.password = password
        self.sentinel_password = sentinel_password
        self._root = Path(tempfile.mkdtemp(prefix="modelgate-sentinel-"))
        self._processes: dict[str, subprocess.Popen] = {}

    @property
    def sentinel(self) -> str:
        return f"127.0.0.1:{self.sentinel_port}"

    def _server(self, name: str, *args: str) -> None:
        log = (self._root / f"{name}.log").open("wb")
        self._processes[name] = subprocess.Popen(
            ["redis-server", *args], stdout=log, stderr=subprocess.STDOUT, cwd=self._root
        )

    def start(self) -> SentinelTrio:
        plain: tuple[str, ...] = ("--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
        if self.password:
            plain += ("--requirepass", self.password, "--masterauth", self.password)
        self._server("master", "--port", str(self.master_port), *plain)
        _wait_for(lambda: _ping(self.master_port, self.password), "the master did not start")
        following = ("--replicaof", "127.0.0.1", str(self.master_port))
        self._server("replica", "--port", str(self.replica_port), *plain, *following)
        replicating = lambda: _replicating(self.replica_port, self.password)  # noqa: E731
        _wait_for(replicating, "the replica did not catch up with the master")
        config = self._root / "sentinel.conf"
        secured = f"sentinel auth-pass {MASTER_NAME} {self.password}\n" if self.password else ""
        if self.sentinel_password:
            secured += f"requirepass {self.sentinel_password}\n"
        config.write_text(
            f"port {self.sentinel_port}\nbind 127.0.0.1\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} 500\n"
            f"sentinel failover-timeout {MASTER_NAME} 5000\n{secured}"
        )
        self._server("sentinel", str(config), "--sentinel")
        _wait_for(lambda: self._replicas_known() >= 1, "the sentinel does not know the replica")
        return self

    def _sentinel_client(self) -> redis.Redis:
        return redis.Redis(port=self.sentinel_port, socket_timeout=1, password=self.sentinel_password)

    def _replicas_known(self) -> int:
        try:
            with self._sentinel_client() as client:
                return len(client.sentinel_slaves(MASTER_NAME))
        except redis.RedisError:
            return 0

    def master_port_now(self) -> int | None:
        with self._sentinel_client() as client:
            address = client.sentinel_get_master_addr_by_name(MASTER_NAME)
        return int(address[1]) if address else None

    def kill_master(self) -> None:
        process = self._processes.pop("master")
        process.kill()
        process.wait(10)

    def wait_for_failover(self, timeout: float = 30.0) -> None:
        _wait_for(lambda: self.master_port_now() == self.replica_port, "no failover", timeout)

    def close(self) -> None:
        kill_all(self._processes, self._root)


def kill_all(processes: dict, root: Path) -> None:
    """Kill the servers a test started and remove their directory."""
    for process in processes.values():
        process.kill()
        process.wait(10)
    processes.clear()
    shutil.rmtree(root, ignore_errors=True)


def _ping(port: int, password: str | None = None) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=1, password=password) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def _replicating(port: int, password: str | None = None) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=1, password=password) as client:
            return client.info("replication").get("master_link_status") == "up"
    except redis.RedisError:
        return False


def _wait_for(condition, failure: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(failure)
        time.sleep(0.05)  # polling servers that start, bounded by the deadline
