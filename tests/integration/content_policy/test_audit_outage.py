"""Content-rule audit entries are written off the request path: a database outage does not stop requests
from being served and checked, and the entries recorded meanwhile reach the audit log once it is back."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.fakes.tcp_proxy import TcpProxy
from tests.integration.content_policy.conftest import mock_config
from tests.support.gateway import GatewayProcess, Tenant, register_tenant

SECRET = "codename kestrel"


def _chat(base_url: str, tenant: Tenant) -> int:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        timeout=30,
        headers={"authorization": f"Bearer {tenant.api_key}"},
        json={"model": "gpt", "messages": [{"role": "user", "content": "about " + SECRET}]},
    ).status_code


def _flagged(base_url: str, tenant: Tenant, rule_id: str) -> int:
    reply = httpx.get(
        f"{base_url}/api/audit-log?ruleId={rule_id}",
        timeout=30,
        headers={"authorization": f"Bearer {tenant.session_token}"},
    )
    assert reply.status_code == 200, reply.text
    return sum(1 for entry in reply.json()["entries"] if entry["event"] == "content_policy.flagged")


def _flagged_within(base_url: str, tenant: Tenant, rule_id: str, wanted: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    count = _flagged(base_url, tenant, rule_id)
    while count < wanted and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the observable outcome, bounded by the deadline
        count = _flagged(base_url, tenant, rule_id)
    return count


def test_flags_recorded_during_a_database_outage_reach_the_audit_log_once_it_is_back(
    tmp_path: Path, pg_server_url: str
) -> None:
    with TcpProxy(5432) as proxy:
        behind = mock_config(tmp_path / "behind.toml", proxy.url(pg_server_url))
        direct = mock_config(tmp_path / "direct.toml", pg_server_url)
        with GatewayProcess(behind, cwd=tmp_path) as cut_off, GatewayProcess(direct, cwd=tmp_path) as other:
            tenant = register_tenant(other.base_url)
            rule = httpx.post(
                f"{other.base_url}/api/policy-rules",
                timeout=30,
                headers={"authorization": f"Bearer {tenant.session_token}"},
                json={
                    "subjectType": "organization",
                    "effect": "flag",
                    "content": {"where": "prompt", "phrases": [SECRET]},
                },
            ).json()
            assert _chat(cut_off.base_url, tenant) == 200  # key and policy now cached behind the proxy
            assert _flagged_within(other.base_url, tenant, rule["id"], 1, 20) == 1
            proxy.cut()
            assert [_chat(cut_off.base_url, tenant) for _ in range(3)] == [200, 200, 200]
            assert _flagged(other.base_url, tenant, rule["id"]) == 1  # queued in the process behind the proxy
            proxy.restore()
            assert _flagged_within(other.base_url, tenant, rule["id"], 4, 60) == 4, cut_off.output()[-2000:]
