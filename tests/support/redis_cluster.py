"""A Redis Cluster started by a test on loopback ports of its own: `masters` masters with `replicas` replicas
each (`redis-server --cluster-enabled yes`, joined by `redis-cli --cluster create`). `kill_master` is a
crash of the master serving a key; the cluster then promotes its replica (`wait_for_failover`). A durable
cluster (an append-only file fsynced on every write) is stopped whole (`stop`: every node SIGTERMed) and
started again on its ports with what it held and its roles (`start_again`): an outage of the whole cluster.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import redis

from tests.support.gateway import free_port
from tests.support.local_servers import LocalServers
from tests.support.redis_sentinel import _ping, _replicating, _wait_for, kill_all

NODE_TIMEOUT_MS = 1000  # a master unreachable this long is failed over (the default, 15 s, is too slow)
# Nodes also run with `cluster-require-full-coverage no` (docs/deploy.md): the slots of live masters go on
# being served while one master is failed over (yes, the default, stops the whole cluster meanwhile).


class RedisClusterNodes(LocalServers):
    def __init__(self, masters: int = 3, replicas: int = 1, *, durable: bool = False) -> None:
        self.masters, self.replicas = masters, replicas
        self._persistence = (
            ("--appendonly", "yes", "--appendfsync", "always") if durable else ("--appendonly", "no")
        )
        self._stopped: list[int] = []  # the ports of a cluster stopped whole, its masters first
        ports: list[int] = []
        while len(ports) < 2 * masters * (1 + replicas):  # each node's port and its cluster bus port
            if (port := free_port()) not in ports:
                ports.append(port)
        self.ports, self._bus_ports = ports[::2], dict(zip(ports[::2], ports[1::2], strict=True))
        self._root = Path(tempfile.mkdtemp(prefix="modelgate-cluster-"))
        self._processes: dict[int, subprocess.Popen] = {}

    @property
    def nodes(self) -> list[str]:
        """The `host:port` of every node started (for `[redis] cluster_nodes`)."""
        return [f"127.0.0.1:{port}" for port in self.ports]

    def _server(self, port: int) -> None:
        workdir = self._root / str(port)
        workdir.mkdir(exist_ok=True)  # a node started again finds its nodes.conf (and data) there
        log = (workdir / "redis.log").open("ab")
        self._processes[port] = subprocess.Popen(
            [
                "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", *self._persistence,
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-port", str(self._bus_ports[port]),
                "--repl-diskless-sync-delay", "0", "--cluster-require-full-coverage", "no",
            ],
            stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
        )  # fmt: skip

    def start(self) -> RedisClusterNodes:
        for port in self.ports:
            self._server(port)
        for port in self.ports:
            _wait_for(lambda port=port: _ping(port), f"the cluster node on {port} did not start")
        if len(self.ports) == 1:  # redis-cli refuses a cluster of one master: give it every slot itself
            with redis.Redis(port=self.ports[0], socket_timeout=5) as client:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        else:
            subprocess.run(
                ["redis-cli", "--cluster", "create", *self.nodes, "--cluster-replicas", str(self.replicas),
                 "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
        _wait_for(self._formed, "the cluster did not form", timeout=60)
        return self

    def _formed(self) -> bool:
        """Every node sees every master and the cluster ok, and every replica has its master's data (a
        replica that never synchronised is never promoted)."""
        return (
            all(self._cluster_info(port).get("cluster_state") == "ok" for port in self._processes)
            and all(self._known_masters(port) == self.masters for port in self._processes)
            and sum(_replicating(port) for port in self._processes) == self.masters * self.replicas
        )

    @staticmethod
    def _cluster_info(port: int) -> dict:
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                return client.cluster("INFO")
        except redis.RedisError:
            return {}

    @staticmethod
    def _known_masters(port: int) -> int:
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                return len({tuple(shard[0:2]) for shard in client.execute_command("CLUSTER", "SLOTS")})
        except redis.RedisError:
            return 0

    def master_of(self, key: str) -> int:
        """The port of the master that serves `key` now, as a live node sees it."""
        for port in self._processes:
            try:
                with redis.Redis(port=port, socket_timeout=1) as client:
                    slot = client.cluster("KEYSLOT", key)
                    for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                        if start <= slot <= end:
                            return int(master[1])
            except redis.RedisError:
                continue
        raise RuntimeError("no node of the cluster answers")

    def master_ports(self) -> list[int]:
        """The ports of the masters that serve slots now."""
        with redis.Redis(port=self.live_ports()[0], socket_timeout=1) as client:
            return sorted({int(master[1]) for _, _, master, *_ in client.execute_command("CLUSTER", "SLOTS")})

    def live_ports(self) -> list[int]:
        return list(self._processes)

    def kill(self, port: int) -> None:
        process = self._processes.pop(port)
        process.kill()
        process.wait(10)

    def stop(self) -> None:
        """SIGTERM every node (each finishes its append-only file); their ports refuse connections."""
        masters = self.master_ports()
        self._stopped = masters + [port for port in self._processes if port not in masters]
        for port in self._stopped:
            self._processes[port].terminate()
        for port in self._stopped:
            self._processes.pop(port).wait(30)

    def start_again(self) -> None:
        """Start the nodes `stop` stopped on their ports, masters first (no replica finds its master gone and
        is promoted), and wait until the cluster is formed as before."""
        for port in self._stopped:
            self._server(port)
            _wait_for(lambda port=port: _ping(port), f"the cluster node on {port} did not start again")
        self._stopped = []
        _wait_for(self._formed, "the cluster did not form again", timeout=60)

    def wait_for_failover(self, key: str, dead: int, timeout: float = 30.0) -> int:
        """Wait until a replica serves `key` in place of the master on `dead`; returns its port."""
        _wait_for(
            lambda: (
                self.master_of(key) != dead
                and all(self._cluster_info(port).get("cluster_state") == "ok" for port in self._processes)
            ),
            "no failover",
            timeout,
        )
        return self.master_of(key)

    def close(self) -> None:
        kill_all(self._processes, self._root)
