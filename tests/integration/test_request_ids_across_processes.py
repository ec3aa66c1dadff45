"""With Redis, a client request id claimed by a request in flight on one gateway is refused (409) by
another gateway, and free again once the first request has finished."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import ThreadedGateway, register_tenant, write_config


def _toml(storage_url: str, redis_url: str, upstream: FakeUpstream) -> str:
    return f"""
[storage]
url = "{storage_url}"

[redis]
url = "{redis_url}"

[[providers]]
name = "held"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[models]]
name = "held-chat"
kinds = ["chat"]
[[models.rows]]
provider = "held"

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


def _chat(base_url: str, api_key: str, request_id: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        timeout=30,
        headers={"authorization": f"Bearer {api_key}", "x-request-id": request_id},
        json={"model": "held-chat", "stream": True, "messages": [{"role": "user", "content": "hold me"}]},
    )


def test_a_request_id_in_flight_on_one_gateway_is_refused_by_another(tmp_path: Path, redis_url: str) -> None:
    with FakeUpstream("held") as upstream:
        toml = _toml(f"sqlite:///{tmp_path / 'shared.db'}", redis_url, upstream)
        first = ThreadedGateway(write_config(tmp_path / "a.toml", toml)).start()
        second = ThreadedGateway(write_config(tmp_path / "b.toml", toml)).start()
        try:
            tenant = register_tenant(first.base_url)
            request_id = f"dup-{tmp_path.name}"
            upstream.add_fault("/v1/chat/completions", Fault(hold_before_last_chunk="hold"))
            held: list[httpx.Response] = []
            runner = threading.Thread(
                target=lambda: held.append(_chat(first.base_url, tenant.api_key, request_id))
            )
            runner.start()
            assert upstream.wait_held("hold", timeout=10)

            refused = _chat(second.base_url, tenant.api_key, request_id)
            assert refused.status_code == 409
            assert refused.json()["error"]["code"] == "request_in_progress"

            upstream.release("hold")
            runner.join(timeout=30)
            assert held[0].status_code == 200
            assert _chat(second.base_url, tenant.api_key, request_id).status_code == 200
        finally:
            first.stop()
            second.stop()
