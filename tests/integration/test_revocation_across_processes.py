"""A key revoked through one gateway process is refused by another on the very next request, with only
PostgreSQL between them (the revocation travels as a NOTIFY delivered with the commit)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.support.gateway import GatewayProcess, register_tenant, revoke_key


def _config(tmp_path: Path, storage_url: str) -> Path:
    path = tmp_path / "pg.toml"
    path.write_text(f"""
[storage]
url = "{storage_url}"

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "mock-chat"
kinds = ["chat"]
[[models.rows]]
provider = "mock"

[[plans]]
code = "free"
rpm = 0
tpm = 0
""")
    return path


def _chat(base_url: str, api_key: str) -> int:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        timeout=30,
        headers={"authorization": f"Bearer {api_key}"},
        json={"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]},
    ).status_code


def test_a_key_revoked_through_one_process_is_refused_by_the_other_at_once(
    tmp_path: Path, pg_server_url: str
) -> None:
    config = _config(tmp_path, pg_server_url)
    with GatewayProcess(config, cwd=tmp_path) as first, GatewayProcess(config, cwd=tmp_path) as second:
        for _ in range(10):
            tenant = register_tenant(first.base_url)
            # Both processes have the key in their cache before the revocation.
            assert _chat(first.base_url, tenant.api_key) == 200
            assert _chat(second.base_url, tenant.api_key) == 200
            assert revoke_key(first.base_url, tenant).status_code == 200
            assert _chat(second.base_url, tenant.api_key) == 401
            assert _chat(first.base_url, tenant.api_key) == 401


def test_a_key_revoked_while_the_notification_connection_was_down_is_refused_after_it_is_back(
    tmp_path: Path, pg_server_url: str
) -> None:
    from tests.fakes.tcp_proxy import TcpProxy

    with TcpProxy(5432) as proxy:
        direct = tmp_path / "direct.toml"
        direct.write_text(_config(tmp_path, pg_server_url).read_text())
        # This process reaches PostgreSQL through the proxy; the other directly.
        behind = tmp_path / "behind.toml"
        behind.write_text(_config(tmp_path, proxy.url(pg_server_url)).read_text())
        with GatewayProcess(behind, cwd=tmp_path) as cut_off, GatewayProcess(direct, cwd=tmp_path) as other:
            tenant = register_tenant(other.base_url)
            assert _chat(cut_off.base_url, tenant.api_key) == 200  # cached by the process behind the proxy
            assert proxy.accepted > 0
            proxy.cut()  # its notification connection is lost: the revocation's NOTIFY never reaches it
            assert revoke_key(other.base_url, tenant).status_code == 200
            assert _chat(cut_off.base_url, tenant.api_key) == 200  # still cached: nothing told it
            proxy.restore()
            deadline = time.monotonic() + 20
            status = _chat(cut_off.base_url, tenant.api_key)
            while status == 200 and time.monotonic() < deadline:  # until its listener is made again
                time.sleep(0.1)  # polling the observable outcome, bounded by the deadline
                status = _chat(cut_off.base_url, tenant.api_key)
            assert status == 401, cut_off.output()[-2000:]


def test_a_deny_rule_made_while_the_notification_connection_was_down_applies_after_it_is_back(
    tmp_path: Path, pg_server_url: str
) -> None:
    from tests.fakes.tcp_proxy import TcpProxy

    with TcpProxy(5432) as proxy:
        direct = tmp_path / "direct.toml"
        direct.write_text(_config(tmp_path, pg_server_url).read_text())
        behind = tmp_path / "behind.toml"
        behind.write_text(_config(tmp_path, proxy.url(pg_server_url)).read_text())
        with GatewayProcess(behind, cwd=tmp_path) as cut_off, GatewayProcess(direct, cwd=tmp_path) as other:
            tenant = register_tenant(other.base_url)
            assert _chat(cut_off.base_url, tenant.api_key) == 200  # its policy is compiled and cached
            proxy.cut()
            rule = httpx.post(
                f"{other.base_url}/api/policy-rules",
                json={"subjectType": "organization", "effect": "deny", "models": ["mock-*"]},
                headers={"authorization": f"Bearer {tenant.session_token}"},
                timeout=30,
            )
            assert rule.status_code == 201, rule.text
            assert _chat(cut_off.base_url, tenant.api_key) == 200  # still the cached policy: nothing told it
            proxy.restore()
            deadline = time.monotonic() + 20
            status = _chat(cut_off.base_url, tenant.api_key)
            while status == 200 and time.monotonic() < deadline:  # until its listener is made again
                time.sleep(0.1)  # polling the observable outcome, bounded by the deadline
                status = _chat(cut_off.base_url, tenant.api_key)
            assert status == 403, cut_off.output()[-2000:]
