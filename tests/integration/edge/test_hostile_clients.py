"""Hostile clients at once, a bounded run: slowloris heads, idle keep-alive connections and stalled bodies are
each closed by their deadline, while chat calls through the openai SDK keep the latency they had before."""

from __future__ import annotations

import select
import socket
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import openai
import orjson

from tests.integration.edge.conftest import SLACK, edge_server
from tests.integration.ops.conftest import ops_toml
from tests.support.gateway import GatewayProcess, Tenant, register_tenant
from tests.support.raw_http import connect

N = 50  # connections of each hostile kind
DEADLINE = 1.0  # header, body idle and keep-alive timeouts of this gateway
DRIBBLE_INTERVAL = 0.2  # a slowloris byte this often: always under the deadline between two bytes
BASELINE_CALLS = 30
MAX_CALLS_UNDER_ATTACK = 300
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n"


@dataclass(slots=True)
class Hostile:
    """One hostile connection: what it does, when its deadline started, when the gateway closed it."""

    kind: str
    sock: socket.socket
    since: float
    closed_at: float | None = None
    next_byte: int = 0


class HostileClients:
    """N slowloris, N idle and N stalled-body connections, driven from one thread without blocking."""

    def __init__(self, port: int, tenant: Tenant) -> None:
        self.port = port
        self.tenant = tenant
        self.connections: list[Hostile] = []

    def open(self) -> None:
        body = orjson.dumps({"model": "echo", "messages": [{"role": "user", "content": "never finished"}]})
        stalled_head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {self.tenant.api_key}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        for _ in range(N):
            sock = connect(self.port)
            sock.sendall(HEALTH[:1])
            self.connections.append(Hostile("slowloris", sock, time.monotonic(), next_byte=1))
        for _ in range(N):
            sock = connect(self.port)
            sock.sendall(HEALTH)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")  # served, then left idle
            self.connections.append(Hostile("idle", sock, time.monotonic()))
        for _ in range(N):
            sock = connect(self.port)
            sock.sendall(stalled_head + body[:20])
            self.connections.append(Hostile("stalled body", sock, time.monotonic()))
        for hostile in self.connections:
            hostile.sock.setblocking(False)

    @property
    def still_open(self) -> list[Hostile]:
        return [c for c in self.connections if c.closed_at is None]

    def step(self, wait: float) -> None:
        """Note the connections the gateway closed (waiting up to `wait`); send the slowloris bytes due."""
        open_now = self.still_open
        if not open_now:
            return
        readable, _, _ = select.select([c.sock for c in open_now], [], [], wait)
        by_socket = {c.sock: c for c in open_now}
        for sock in readable:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, BlockingIOError):
                data = b""
            if not data:
                by_socket[sock].closed_at = time.monotonic()
        now = time.monotonic()
        for hostile in self.still_open:
            due = hostile.since + hostile.next_byte * DRIBBLE_INTERVAL
            if hostile.kind == "slowloris" and now >= due and hostile.next_byte < len(HEALTH) - 1:
                try:
                    hostile.sock.send(HEALTH[hostile.next_byte : hostile.next_byte + 1])
                    hostile.next_byte += 1
                except (BrokenPipeError, ConnectionResetError):
                    hostile.closed_at = now

    def close(self) -> None:
        for hostile in self.connections:
            hostile.sock.close()


def test_hostile_connections_are_closed_by_the_deadlines_while_normal_traffic_keeps_its_latency(
    tmp_path: Path,
) -> None:
    config = tmp_path / "hostile.toml"
    server = edge_server(header=DEADLINE, body=DEADLINE, keepalive=DEADLINE, max_connections=1000)
    config.write_text(ops_toml(f"sqlite:///{tmp_path / 'hostile.db'}", server=server))
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    hostile = None
    try:
        tenant = register_tenant(gateway.base_url)
        sdk = openai.OpenAI(
            base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0, timeout=10
        )

        def timed_call() -> float:
            started = time.perf_counter()
            reply = sdk.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}])
            assert reply.choices[0].message.content
            return time.perf_counter() - started

        for _ in range(5):  # warm-up: connection pool, caches
            timed_call()
        baseline = [timed_call() for _ in range(BASELINE_CALLS)]

        hostile = HostileClients(gateway.port, tenant)
        hostile.open()
        under_attack: list[float] = []
        deadline = time.monotonic() + DEADLINE + SLACK
        while hostile.still_open and time.monotonic() < deadline:
            # Normal traffic only while nearly all hostile connections are still open.
            if len(under_attack) < MAX_CALLS_UNDER_ATTACK and len(hostile.still_open) > 2.5 * N:
                under_attack.append(timed_call())
                hostile.step(wait=0)
            else:
                hostile.step(wait=0.05)
        output = gateway.output()
    finally:
        if hostile is not None:
            hostile.close()
        gateway.terminate()
        gateway.wait(timeout=30)
        gateway.kill()

    left_open = [c.kind for c in hostile.still_open]
    assert left_open == [], f"{len(left_open)} hostile connections never closed: {set(left_open)}"
    for connection in hostile.connections:
        assert connection.closed_at - connection.since < DEADLINE + SLACK, connection.kind
    slowloris = [c for c in hostile.connections if c.kind == "slowloris"]
    assert all(c.next_byte < len(HEALTH) - 1 for c in slowloris)  # none finished its head

    assert len(under_attack) >= 10, "the normal traffic did not overlap the attack"
    base_p50, base_max = statistics.median(baseline), max(baseline)
    attack_p50, attack_max = statistics.median(under_attack), max(under_attack)
    print(  # the numbers behind the bounds, for `pytest -s`
        f"baseline p50 {base_p50 * 1000:.1f} ms, max {base_max * 1000:.1f} ms; under attack "
        f"({len(under_attack)} calls) p50 {attack_p50 * 1000:.1f} ms, max {attack_max * 1000:.1f} ms"
    )
    assert attack_p50 <= 3 * base_p50 + 0.05, (baseline, under_attack)
    assert attack_max <= 5 * base_max + 0.5, (baseline, under_attack)
    assert "Traceback" not in output
