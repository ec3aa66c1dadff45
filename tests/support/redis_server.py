"""A Redis server of a test's own on a free loopback port, which the test stops (an outage) and starts
again on the same port with what it held (an append-only file fsynced on every write)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support.gateway import free_port


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self._root = Path(tempfile.mkdtemp(prefix="modelgate-redis-"))
        self._process: subprocess.Popen | None = None
        self._lives = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self._lives += 1
        log = (self._root / f"redis-{self._lives}.log").open("wb")
        self._process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self._root),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while not self._answers():
            if time.monotonic() > deadline or self._process.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)  # polling an observable condition, bounded by the deadline
        return self

    def _answers(self) -> bool:
        try:
            with redis.Redis(port=self.port, socket_timeout=1) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        """SIGTERM: Redis finishes its append-only file and exits; its port refuses connections."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            process.wait(30)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)
            self._process = None
        shutil.rmtree(self._root, ignore_errors=True)
