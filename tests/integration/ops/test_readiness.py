"""Health and readiness for load balancers: /readyz answers 503 once shutdown begins, while in-flight and
(during `server.drain_seconds`) new requests are still served; /healthz stays 200 while the process lives."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.integration.ops.conftest import chat, ops_toml, stop_and_collect, wait_until
from tests.support.gateway import GatewayProcess, register_tenant


def _readyz(base_url: str) -> int:
    try:
        return httpx.get(f"{base_url}/readyz", timeout=5).status_code
    except httpx.TransportError:
        return 0


def test_readyz_reports_storage_and_is_ready_while_serving(tmp_path: Path, sqlite_url: str) -> None:
    config = tmp_path / "ready.toml"
    config.write_text(ops_toml(sqlite_url))
    with GatewayProcess(config, cwd=tmp_path) as gateway:
        ready = httpx.get(f"{gateway.base_url}/readyz", timeout=5)
        assert ready.status_code == 200
        assert ready.json() == {
            "status": "ready",
            "checks": {"event_loop": "ok", "capacity": "ok", "storage": "ok"},
            "ledger_backlog": 0,
        }
        assert httpx.get(f"{gateway.base_url}/healthz", timeout=5).json() == {"status": "ok"}
    # Every open stream holds two descriptors: the process raised its soft limit to the hard one and said so.
    assert "open-files limit" in gateway.output()


def test_readyz_answers_503_during_the_shutdown_drain_while_requests_are_still_served(
    tmp_path: Path, sqlite_url: str
) -> None:
    config = tmp_path / "drain.toml"
    config.write_text(ops_toml(sqlite_url, server="drain_seconds = 3.0"))
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    try:
        tenant = register_tenant(gateway.base_url)
        gateway.terminate()
        assert wait_until(lambda: _readyz(gateway.base_url) == 503, timeout=5)

        draining = httpx.get(f"{gateway.base_url}/readyz", timeout=5)
        assert draining.json()["status"] == "shutting down"
        assert httpx.get(f"{gateway.base_url}/healthz", timeout=5).status_code == 200
        assert chat(gateway.base_url, tenant).status_code == 200
        output = stop_and_collect(gateway)
    finally:
        gateway.kill()
    assert "draining: /readyz answers 503" in output
