"""Graceful shutdown: SIGTERM stops accepting but lets a stream in flight finish, then exits 0."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import GatewayProcess, register_tenant


def _config(tmp_path: Path, upstream: FakeUpstream) -> Path:
    path = tmp_path / "modelgate.toml"
    path.write_text(f"""
[server]
shutdown_grace_seconds = 20.0

[storage]
url = "sqlite:///{tmp_path / "gw.db"}"

[[providers]]
name = "slow"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[models]]
name = "slow-chat"
kinds = ["chat"]
[[models.rows]]
provider = "slow"

[[plans]]
code = "free"
rpm = 0
tpm = 0
""")
    return path


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_sigterm_lets_an_in_flight_stream_finish_and_exits_zero(tmp_path: Path) -> None:
    with FakeUpstream("slow") as upstream:
        gateway = GatewayProcess(_config(tmp_path, upstream), cwd=tmp_path).start()
        try:
            tenant = register_tenant(gateway.base_url)
            upstream.add_fault("/v1/chat/completions", Fault(hold_before_last_chunk="end"))
            body = {
                "model": "slow-chat",
                "stream": True,
                "messages": [{"role": "user", "content": "a b c d e f"}],
            }
            with httpx.stream(
                "POST",
                f"{gateway.base_url}/v1/chat/completions",
                json=body,
                timeout=30,
                headers={"authorization": f"Bearer {tenant.api_key}"},
            ) as response:
                assert response.status_code == 200
                chunks = response.iter_bytes()
                first = next(chunks)
                assert b"chat.completion.chunk" in first
                assert upstream.wait_held("end", timeout=10)

                gateway.terminate()
                deadline = time.monotonic() + 10
                while _accepts_connections(gateway.port) and time.monotonic() < deadline:
                    time.sleep(0.02)  # bounded wait for the listener to close after the signal
                assert not _accepts_connections(gateway.port), "still accepting after SIGTERM"

                upstream.release("end")
                rest = b"".join(chunks)
            assert rest.rstrip().endswith(b"data: [DONE]")
            assert gateway.wait(timeout=30) == 0
        finally:
            gateway.kill()
