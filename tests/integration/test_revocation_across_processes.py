"""A key revoked through one gateway process is refused by another on the very next request, with only
PostgreSQL between them (the revocation travels as a NOTIFY delivered with the commit)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.fakes.tcp_proxy import TcpProxy
from tests.support.gateway import GatewayProcess, register_tenant, revoke_key


def _config(tmp_path: Path, storage_url: str, name: str = "pg.toml") -> Path:
    path = tmp_path / name
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


@contextmanager
def _one_process_behind_a_proxy(
    tmp_path: Path, pg_server_url: str
) -> Iterator[tuple[TcpProxy, GatewayProcess, GatewayProcess]]:
    """(the proxy, a process reaching PostgreSQL through it, a process reaching PostgreSQL directly)."""
    with TcpProxy(5432) as proxy:
        behind = _config(tmp_path, proxy.url(pg_server_url), "behind.toml")
        direct = _config(tmp_path, pg_server_url, "direct.toml")
        with GatewayProcess(behind, cwd=tmp_path) as cut_off, GatewayProcess(direct, cwd=tmp_path) as other:
            yield proxy, cut_off, other


def _status_once_its_listener_is_back(gateway: GatewayProcess, api_key: str) -> int:
    """The first answer other than 200, or 200 when none came within 20 s."""
    deadline = time.monotonic() + 20
    status = _chat(gateway.base_url, api_key)
    while status == 200 and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the observable outcome, bounded by the deadline
        status = _chat(gateway.base_url, api_key)
    return status


def test_a_key_revoked_while_the_notification_connection_was_down_is_refused_after_it_is_back(
    tmp_path: Path, pg_server_url: str
) -> None:
    with _one_process_behind_a_proxy(tmp_path, pg_server_url) as (proxy, cut_off, other):
        tenant = register_tenant(other.base_url)
        assert _chat(cut_off.base_url, tenant.api_key) == 200  # cached by the process behind the proxy
        assert proxy.accepted > 0
        proxy.cut()  # its notification connection is lost: the revocation's NOTIFY never reaches it
        assert revoke_key(other.base_url, tenant).status_code == 200
        assert _chat(cut_off.base_url, tenant.api_key) == 200  # still cached: nothing told it
        proxy.restore()
        assert _status_once_its_listener_is_back(cut_off, tenant.api_key) == 401, cut_off.output()[-2000:]


def test_a_deny_rule_made_while_the_notification_connection_was_down_applies_after_it_is_back(
    tmp_path: Path, pg_server_url: str
) -> None:
    with _one_process_behind_a_proxy(tmp_path, pg_server_url) as (proxy, cut_off, other):
        tenant = register_tenant(other.base_url)
        assert _chat(cut_off.base_url, tenant.api_key) == 200  # its policy is compiled and cached
        assert proxy.accepted > 0
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
        assert _status_once_its_listener_is_back(cut_off, tenant.api_key) == 403, cut_off.output()[-2000:]
