"""Production mode talks to Redis once per request on its way in: one script claims the request id, counts
the rate windows and reserves the balance; the TPM corrections, the settlement and the claim's release
follow in one batched call. Watched with Redis MONITOR (every command the gateway sends, one line each)."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import httpx
import redis

from modelgate.domain.counters import WINDOW_SECONDS
from modelgate.infra import redis_scripts
from tests.fakes import FakeUpstream
from tests.support.gateway import ThreadedGateway, register_tenant, write_config

_DEADLINE_SECONDS = 10


def _toml(storage_url: str, redis_url: str, upstream: FakeUpstream) -> str:
    return f"""
[storage]
url = "{storage_url}"

[redis]
url = "{redis_url}"

[[providers]]
name = "counted"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[models]]
name = "counted-chat"
kinds = ["chat"]
[[models.rows]]
provider = "counted"

[[plans]]
code = "free"
rpm = 1000
tpm = 1000000
"""


class _Monitor:
    """Every command Redis receives, one line each, from a raw MONITOR connection (read on a thread)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._socket = socket.create_connection(("127.0.0.1", 6379), timeout=_DEADLINE_SECONDS)
        self._socket.sendall(b"MONITOR\r\n")
        self._file = self._socket.makefile("rb")
        assert self._file.readline() == b"+OK\r\n"
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for raw in self._file:
                self.lines.append(raw.decode("utf-8", "replace"))
        except OSError:
            return

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + _DEADLINE_SECONDS
        while not any(text in line for line in self.lines):
            assert time.monotonic() < deadline, f"Redis never received {text!r}"
            time.sleep(0.01)  # the polling period of a bounded wait

    def close(self) -> None:
        self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._reader.join(timeout=_DEADLINE_SECONDS)


def _organization(database: Path, email: str) -> str:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT organization_id FROM users WHERE email = ?", (email,)).fetchone()[0]


def _chat(base_url: str, api_key: str, request_id: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        timeout=30,
        headers={"authorization": f"Bearer {api_key}", "x-request-id": request_id},
        json={"model": "counted-chat", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]},
    )


def _settled(client: redis.Redis, organization_id: str, claim: str) -> bool:
    reserved = client.hget(f"mg:bal:{{{organization_id}}}", "r")
    return reserved is not None and int(reserved) == 0 and not client.exists(claim)


def test_a_chat_request_costs_one_redis_call_on_the_way_in_and_one_batched_after(
    tmp_path: Path, redis_url: str
) -> None:
    database = tmp_path / "gateway.db"
    client = redis.Redis.from_url(redis_url)
    ours = client.client_info()["addr"]  # the test's own reads (one connection) are not the gateway's
    # Balance events are re-applied by a background poll (not the request path): not counted.
    background = hashlib.sha1(redis_scripts.APPLY.encode()).hexdigest()
    with FakeUpstream("counted") as upstream:
        config = write_config(tmp_path / "gw.toml", _toml(f"sqlite:///{database}", redis_url, upstream))
        with ThreadedGateway(config) as gateway:
            tenant = register_tenant(gateway.base_url)
            organization_id = _organization(database, tenant.email)
            warm_up = f"warm-{uuid.uuid4().hex}"
            assert _chat(gateway.base_url, tenant.api_key, warm_up).status_code == 200
            # The warm-up's settlement batch follows its answer: counted, it would be a third call.
            deadline = time.monotonic() + _DEADLINE_SECONDS
            while not _settled(client, organization_id, f"mg:rid:{{{organization_id}}}:{warm_up}"):
                assert time.monotonic() < deadline, "the warm-up request was never settled"
                time.sleep(0.01)  # the polling period of a bounded wait
            monitor = _Monitor()
            try:
                request_id = f"counted-{uuid.uuid4().hex}"
                answer = _chat(gateway.base_url, tenant.api_key, request_id)
                assert answer.status_code == 200, answer.text
                assert answer.headers["x-ratelimit-remaining-requests"] == "998"
                claim = f"mg:rid:{{{organization_id}}}:{request_id}"
                deadline = time.monotonic() + _DEADLINE_SECONDS
                while not _settled(client, organization_id, claim):
                    assert time.monotonic() < deadline, "the request was never settled"
                    time.sleep(0.01)  # the polling period of a bounded wait
                marker = f"end-{uuid.uuid4().hex}"
                client.echo(marker)
                monitor.wait_for(marker)
            finally:
                monitor.close()
    client.close()
    names = (organization_id, tenant.key_id)
    lines = monitor.lines[: next(i for i, line in enumerate(monitor.lines) if marker in line)]
    gateway_calls = [
        line
        for line in lines
        if any(name in line for name in names)
        and background not in line
        and f" {ours}]" not in line
        and " lua]" not in line  # what a script does inside Redis is part of its one call
    ]
    assert len(gateway_calls) == 2, "".join(gateway_calls)
    admission, batch = gateway_calls
    assert hashlib.sha1(redis_scripts.ADMIT_REQUEST.encode()).hexdigest() in admission
    assert hashlib.sha1(redis_scripts.complete(WINDOW_SECONDS).encode()).hexdigest() in batch
