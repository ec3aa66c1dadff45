"""Behind trusted load balancers the client address comes from X-Forwarded-For; otherwise the header is
ignored, so a client cannot pick the address its failed logins are counted (and throttled) against."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.gateway import ThreadedGateway, register_tenant, write_config

WRONG_PASSWORD = "not the password at all"
OWNER_PASSWORD = "correct horse battery"  # what register_tenant registers with


def _gateway(tmp_path: Path, trusted: str) -> ThreadedGateway:
    toml = f"""
[server]
trusted_proxies = {trusted}

[storage]
url = "sqlite:///{tmp_path / "addr.db"}"

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
"""
    return ThreadedGateway(write_config(tmp_path / "addr.toml", toml))


def _login(gateway: ThreadedGateway, email: str, password: str, forwarded: str) -> int:
    reply = httpx.post(
        f"{gateway.base_url}/api/auth/login",
        headers={"x-forwarded-for": forwarded},
        json={"email": email, "password": password},
        timeout=30,
    )
    return reply.status_code


def _failed_login_address(gateway: ThreadedGateway, forwarded: str) -> str:
    tenant = register_tenant(gateway.base_url, fund_usd=None)
    assert _login(gateway, tenant.email, WRONG_PASSWORD, forwarded) == 401
    log = httpx.get(
        f"{gateway.base_url}/api/audit-log",
        timeout=30,
        headers={"authorization": f"Bearer {tenant.session_token}"},
    ).json()
    failed = next(e for e in log["entries"] if e["event"] == "auth.login_failed")
    return failed["details"]["address"]


def test_a_trusted_proxy_forwards_the_client_address(tmp_path: Path) -> None:
    with _gateway(tmp_path, '["127.0.0.1"]') as gateway:
        assert _failed_login_address(gateway, "203.0.113.7, 127.0.0.1") == "203.0.113.7"


def test_without_trusted_proxies_the_forwarded_header_is_ignored(tmp_path: Path) -> None:
    with _gateway(tmp_path, "[]") as gateway:
        assert _failed_login_address(gateway, "203.0.113.7") == "127.0.0.1"


def test_a_garbage_forwarded_chain_keeps_the_peer_address(tmp_path: Path) -> None:
    with _gateway(tmp_path, '["127.0.0.1"]') as gateway:
        assert _failed_login_address(gateway, "not-an-ip") == "127.0.0.1"


def test_behind_a_trusted_proxy_the_forwarded_client_is_the_throttled_address(tmp_path: Path) -> None:
    with _gateway(tmp_path, '["127.0.0.1"]') as gateway:
        tenant = register_tenant(gateway.base_url, fund_usd=None)
        attacker = [_login(gateway, tenant.email, WRONG_PASSWORD, "203.0.113.7") for _ in range(8)]
        owner = _login(gateway, tenant.email, OWNER_PASSWORD, "198.51.100.9")

    assert attacker == [401] * 5 + [429] * 3
    assert owner == 200


def test_without_trusted_proxies_a_client_cannot_escape_by_forging_its_address(tmp_path: Path) -> None:
    with _gateway(tmp_path, "[]") as gateway:
        tenant = register_tenant(gateway.base_url, fund_usd=None)
        forged = [_login(gateway, tenant.email, WRONG_PASSWORD, f"203.0.113.{n}") for n in range(1, 8)]

    assert forged == [401] * 5 + [429] * 2
