"""One ledger row per admitted request, even across a SIGKILL: a request in flight when its gateway dies is
charged at the next start as "crashed" (its prompt, which the provider surely billed), exactly once; the
completed ones keep their own rows, and a graceful stop leaves no crashed row.

The gateway runs as a real `modelgate serve` process in front of a fake OpenAI upstream that holds its
streams before their last chunk, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson

from modelgate.storage import open_database
from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import GatewayProcess, register_tenant

OPENING_MICROS = 1000 * 1_000_000  # register_tenant funds 1000 USD
MICROS_PER_INPUT_TOKEN = 1000  # input_per_mtok = 1000 USD
MODEL = "gpt-4o-mini"
CHAT = "/v1/chat/completions"


def _config(tmp_path: Path, storage_url: str, upstream: FakeUpstream, *, grace: float = 5.0) -> Path:
    path = tmp_path / "journal.toml"
    path.write_text(f"""
[server]
shutdown_grace_seconds = {grace}

[storage]
url = "{storage_url}"

[billing]
ledger_flush_interval_seconds = 0.2

[[providers]]
name = "held"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[models]]
name = "{MODEL}"
kinds = ["chat"]
[[models.rows]]
provider = "held"
[models.prices]
input_per_mtok = {MICROS_PER_INPUT_TOKEN}
output_per_mtok = 1000

[[plans]]
code = "free"
rpm = 0
tpm = 0
""")
    return path


def _body(request_id: str, *, stream: bool) -> bytes:
    """The exact bytes sent: the crash cost is priced from their length."""
    return orjson.dumps(
        {
            "model": MODEL,
            "stream": stream,
            "max_tokens": 100,
            "messages": [{"role": "user", "content": f"tell me about {request_id} in a few words"}],
        }
    )


def _crash_cost(body: bytes) -> int:
    return len(body) // 4 * MICROS_PER_INPUT_TOKEN


def _headers(api_key: str, request_id: str) -> dict[str, str]:
    return {
        "authorization": f"Bearer {api_key}",
        "x-request-id": request_id,
        "content-type": "application/json",
    }


@contextlib.contextmanager
def _held_streams(
    client: httpx.Client, upstream: FakeUpstream, api_key: str, request_ids: list[str]
) -> Iterator[None]:
    """Streams that reached the client's first chunk and wait, at the upstream, before their last one."""
    chunks = []  # kept: an iterator dropped (collected) closes its response, and the upstream's stream
    with contextlib.ExitStack() as streams:
        for n, request_id in enumerate(request_ids):
            gate = f"held-{n}"
            upstream.add_fault(CHAT, Fault(hold_before_last_chunk=gate))
            response = streams.enter_context(
                client.stream(
                    "POST",
                    CHAT,
                    content=_body(request_id, stream=True),
                    headers=_headers(api_key, request_id),
                )
            )
            assert response.status_code == 200
            chunks.append(response.iter_bytes())
            assert b"chat.completion.chunk" in next(chunks[-1])
            assert upstream.wait_held(gate, timeout=10)
        yield


async def _ledger(storage_url: str, email: str) -> tuple[dict[str, dict], int]:
    """The tenant's ledger rows by request id (a request id seen twice fails here) and its stored balance."""
    db = await open_database(storage_url)
    try:
        org_id = await db.fetchval("SELECT organization_id FROM users WHERE email = $1", email)
        rows = await db.fetch(
            "SELECT request_id, outcome, status, input_tokens, output_tokens, cost_micros, usage_estimated"
            " FROM usage_ledger WHERE organization_id = $1",
            org_id,
        )
        balance = await db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", org_id)
    finally:
        await db.close()
    by_request: dict[str, dict] = {}
    for row in rows:
        assert row["request_id"] not in by_request, f"request {row['request_id']} has two ledger rows"
        by_request[row["request_id"]] = dict(row)
    return by_request, int(balance)


def _ledger_now(storage_url: str, email: str) -> tuple[dict[str, dict], int]:
    return asyncio.run(_ledger(storage_url, email))


def _wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)  # polling an observable condition, bounded by the deadline
    return False


def _complete(client: httpx.Client, api_key: str, request_id: str) -> None:
    reply = client.post(CHAT, content=_body(request_id, stream=False), headers=_headers(api_key, request_id))
    assert reply.status_code == 200, reply.text


def test_requests_in_flight_at_a_sigkill_get_one_crashed_row_each_at_the_next_start(
    tmp_path: Path, storage_url: str
) -> None:
    run = os.urandom(3).hex()
    held = [f"held-{run}-{n}" for n in range(3)]
    before, after = [f"before-{run}-{n}" for n in range(2)], [f"after-{run}-{n}" for n in range(2)]
    with FakeUpstream("held") as upstream:
        config = _config(tmp_path, storage_url, upstream)
        gateway = GatewayProcess(config, cwd=tmp_path).start()
        restarted: GatewayProcess | None = None
        try:
            tenant = register_tenant(gateway.base_url)
            with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
                for request_id in before:
                    _complete(client, tenant.api_key, request_id)
                with _held_streams(client, upstream, tenant.api_key, held):
                    # Completed after the admissions: flushes seal and delete the segments holding them.
                    for request_id in after:
                        _complete(client, tenant.api_key, request_id)
                    assert _wait_until(lambda: len(_ledger_now(storage_url, tenant.email)[0]) == 4)
                    gateway.kill()  # SIGKILL with the three streams in flight
            rows, _ = _ledger_now(storage_url, tenant.email)
            assert set(rows) == {*before, *after}, "a row was written before the restart"

            restarted = GatewayProcess(config, cwd=tmp_path).start()
            assert _wait_until(lambda: len(_ledger_now(storage_url, tenant.email)[0]) == 7)
            rows, balance = _ledger_now(storage_url, tenant.email)
            for request_id in held:
                body = _body(request_id, stream=True)
                assert {key: rows[request_id][key] for key in ("outcome", "status", "cost_micros")} == {
                    "outcome": "crashed",
                    "status": 0,
                    "cost_micros": _crash_cost(body),
                }
                assert (rows[request_id]["input_tokens"], rows[request_id]["output_tokens"]) == (
                    len(body) // 4,
                    0,
                )
                assert rows[request_id]["usage_estimated"]  # an estimate, and the row says so
            for request_id in (*before, *after):
                assert rows[request_id]["outcome"] == "completed" and rows[request_id]["status"] == 200
                assert rows[request_id]["cost_micros"] > 0 and not rows[request_id]["usage_estimated"]
            assert balance == OPENING_MICROS - sum(row["cost_micros"] for row in rows.values())

            # A second start replays nothing more.
            restarted.terminate()
            assert restarted.wait(timeout=30) == 0
            restarted = GatewayProcess(config, cwd=tmp_path).start()
            restarted.terminate()
            assert restarted.wait(timeout=30) == 0
            assert _ledger_now(storage_url, tenant.email) == (rows, balance)
            assert "Traceback" not in gateway.output() + restarted.output()
        finally:
            gateway.kill()
            if restarted is not None:
                restarted.kill()


def test_a_graceful_stop_cutting_a_stream_leaves_its_own_row_and_no_crashed_one(
    tmp_path: Path, storage_url: str
) -> None:
    request_id = f"cut-{os.urandom(3).hex()}"
    with FakeUpstream("held") as upstream:
        # A grace shorter than the hold: the stop cuts the stream, which ends as "shutdown".
        config = _config(tmp_path, storage_url, upstream, grace=1.0)
        gateway = GatewayProcess(config, cwd=tmp_path).start()
        restarted: GatewayProcess | None = None
        try:
            tenant = register_tenant(gateway.base_url)
            with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
                with _held_streams(client, upstream, tenant.api_key, [request_id]):
                    gateway.terminate()
                    assert gateway.wait(timeout=30) == 0
            assert not list((tmp_path / "modelgate-spool").glob("*.spool")), "the stop left a spool file"

            restarted = GatewayProcess(config, cwd=tmp_path).start()
            restarted.terminate()
            assert restarted.wait(timeout=30) == 0
            rows, balance = _ledger_now(storage_url, tenant.email)
            assert list(rows) == [request_id]
            assert rows[request_id]["outcome"] == "shutdown"
            assert balance == OPENING_MICROS - rows[request_id]["cost_micros"]
        finally:
            gateway.kill()
            if restarted is not None:
                restarted.kill()
