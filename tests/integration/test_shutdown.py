"""Graceful shutdown: SIGTERM stops accepting but lets a stream in flight finish, closes realtime sessions
(1001 going away) charging what their running responses used, then exits 0."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import aiohttp
import httpx

from modelgate.storage import open_database
from tests.fakes import FakeUpstream, Fault
from tests.fakes.realtime_routes import PARTIAL_USAGE
from tests.support.gateway import GatewayProcess, Tenant, register_tenant

# The realtime model's prices: free input, 20 µ per output token; 100 output tokens at most per response.
REALTIME_OUTPUT_PER_MTOK = 20
REALTIME_MAX_TOKENS = 100


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

[[models]]
name = "slow-realtime"
kinds = ["realtime"]
default_max_tokens = {REALTIME_MAX_TOKENS}
[[models.rows]]
provider = "slow"
[models.prices]
input_per_mtok = 0.0
output_per_mtok = {REALTIME_OUTPUT_PER_MTOK}

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


async def _realtime_response_cut_by_sigterm(
    gateway: GatewayProcess, upstream: FakeUpstream, tenant: Tenant
) -> int:
    """A session with one response running when the gateway gets SIGTERM; the close code the client sees."""
    auth = {"authorization": f"Bearer {tenant.api_key}"}
    async with httpx.AsyncClient(timeout=30) as http:
        minted = await http.post(
            f"{gateway.base_url}/v1/realtime/client_secrets", json={"model": "slow-realtime"}, headers=auth
        )
    assert minted.status_code == 200, minted.text
    params = {"client_secret": minted.json()["value"], "model": "slow-realtime"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
        ws = await client.ws_connect(f"{gateway.base_url}/v1/realtime", params=params, headers=auth)
        await ws.send_json({"type": "fake.hold_cancels", "gate": "cancel"})
        await ws.send_json({"type": "response.create"})
        while (await ws.receive_json(timeout=10))["type"] != "response.output_audio.delta":
            pass
        gateway.terminate()
        assert await asyncio.to_thread(upstream.wait_held, "cancel", 10), (
            "the running response was not cancelled"
        )
        await ws.send_json({"type": "response.create"})  # crosses the gateway's close: dropped, not forwarded
        await ws.close()
        upstream.release("cancel")
        return ws.close_code


async def _rows(storage_url: str) -> list[tuple]:
    db = await open_database(storage_url)
    try:
        rows = await db.fetch(
            "SELECT status, outcome, output_tokens, cost_micros FROM usage_ledger WHERE request_id LIKE '%:%'"
        )
        return [(r["status"], r["outcome"], r["output_tokens"], r["cost_micros"]) for r in rows]
    finally:
        await db.close()


def test_sigterm_closes_a_realtime_session_and_charges_its_running_response(tmp_path: Path) -> None:
    with FakeUpstream("slow") as upstream:
        upstream.realtime.announce_responses = upstream.realtime.hold_responses = True
        gateway = GatewayProcess(_config(tmp_path, upstream), cwd=tmp_path).start()
        try:
            tenant = register_tenant(gateway.base_url)
            assert asyncio.run(_realtime_response_cut_by_sigterm(gateway, upstream, tenant)) == 1001
            assert gateway.wait(timeout=30) == 0
        finally:
            gateway.kill()
        (session,) = upstream.realtime.sessions
        assert session.received("response.create") == 1
    cost = PARTIAL_USAGE["output_tokens"] * REALTIME_OUTPUT_PER_MTOK
    assert asyncio.run(_rows(gateway.storage_url)) == [
        (200, "shutdown", PARTIAL_USAGE["output_tokens"], cost)
    ]


def test_sigterm_lets_a_request_whose_body_is_still_arriving_finish(tmp_path: Path) -> None:
    with FakeUpstream("slow") as upstream:
        gateway = GatewayProcess(_config(tmp_path, upstream), cwd=tmp_path).start()
        try:
            tenant = register_tenant(gateway.base_url)
            body = b'{"model": "slow-chat", "messages": [{"role": "user", "content": "late body"}]}'
            head = (
                "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {tenant.api_key}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as client:
                client.sendall(head + body[:20])
                gateway.terminate()
                deadline = time.monotonic() + 10
                while _accepts_connections(gateway.port) and time.monotonic() < deadline:
                    time.sleep(0.02)  # bounded wait for the listener to close after the signal
                assert not _accepts_connections(gateway.port), "still accepting after SIGTERM"
                client.sendall(body[20:])  # the rest arrives once the stop has begun
                answer = b""
                while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                    piece = client.recv(65536)  # the socket's 10 s timeout bounds each wait
                    if not piece:
                        break
                    answer += piece
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            assert b"late body" in answer  # the fake echoes the prompt: the whole body reached it
            assert gateway.wait(timeout=30) == 0
        finally:
            gateway.kill()
