"""A key revoked through one gateway process is refused by another on the very next request, with only
PostgreSQL between them (the revocation travels as a NOTIFY delivered with the commit), or only a SQLite
database between the workers of one host (the host channel file beside it), the API-key cache on either way;
plan and policy changes likewise."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.fakes.tcp_proxy import TcpProxy
from tests.support.gateway import GatewayProcess, Tenant, register_tenant, revoke_key


def _config(tmp_path: Path, storage_url: str, name: str = "pg.toml", storage: str = "") -> Path:
    path = tmp_path / name
    path.write_text(f"""
[storage]
url = "{storage_url}"
{storage}

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


def _served(base_url: str, api_key: str) -> bool:
    """Whether a chat with the key is answered 200. A process that cannot reach its database while it
    distrusts its caches (and may not serve what it knew) answers 503 with a retry-after, in the client's
    envelope: never a 500, never a dropped connection."""
    reply = httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {api_key}"},
        json={"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    if reply.status_code != 200:
        assert (reply.status_code, reply.headers.get("retry-after")) == (503, "1"), reply.text
        assert reply.json()["error"]["type"] == "server_error"
    return reply.status_code == 200


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
    tmp_path: Path, pg_server_url: str, serve_cached: bool = False
) -> Iterator[tuple[TcpProxy, GatewayProcess, GatewayProcess]]:
    """(the proxy, a process reaching PostgreSQL through it, a process reaching PostgreSQL directly). The
    process behind the proxy fails closed while it cannot read the database unless `serve_cached`
    (`[storage] serve_cached_during_outage`, on by default: an outage does not refuse every request)."""
    with TcpProxy(5432) as proxy:
        flag = f"serve_cached_during_outage = {'true' if serve_cached else 'false'}"
        behind = _config(tmp_path, proxy.url(pg_server_url), "behind.toml", flag)
        direct = _config(tmp_path, pg_server_url, "direct.toml")
        with GatewayProcess(behind, cwd=tmp_path) as cut_off, GatewayProcess(direct, cwd=tmp_path) as other:
            yield proxy, cut_off, other


def _deny_every_model(base_url: str, tenant: Tenant) -> None:
    """A policy rule of the tenant's organization, made through the cabinet of `base_url`."""
    rule = httpx.post(
        f"{base_url}/api/policy-rules",
        json={"subjectType": "organization", "effect": "deny", "models": ["mock-*"]},
        headers={"authorization": f"Bearer {tenant.session_token}"},
        timeout=30,
    )
    assert rule.status_code == 201, rule.text


def _status_once_its_listener_is_back(gateway: GatewayProcess, api_key: str, expected: int) -> int | None:
    """`expected` once the process answers it, else its last answer (None: the connection dropped) when
    20 s passed. While its database is coming back it may answer an error first (it distrusts its caches
    and reads the database): only the settled answer counts."""
    deadline = time.monotonic() + 20
    while True:
        try:
            status: int | None = _chat(gateway.base_url, api_key)
        except httpx.TransportError:
            status = None
        if status == expected or time.monotonic() >= deadline:
            return status
        time.sleep(0.1)  # polling the observable outcome, bounded by the deadline


def test_a_key_revoked_while_the_notification_connection_was_down_is_refused_after_it_is_back(
    tmp_path: Path, pg_server_url: str
) -> None:
    with _one_process_behind_a_proxy(tmp_path, pg_server_url) as (proxy, cut_off, other):
        tenant = register_tenant(other.base_url)
        assert _chat(cut_off.base_url, tenant.api_key) == 200  # cached by the process behind the proxy
        assert proxy.accepted > 0
        proxy.cut()  # its notification connection is lost: the revocation's NOTIFY never reaches it
        # The revoke waits for it until its lease lapses (it can neither acknowledge nor renew).
        assert revoke_key(other.base_url, tenant).status_code == 200
        # It stopped trusting its cache when the connection went: the key is not served from it (fails
        # closed; the database is out of reach too, so the request fails).
        assert not _served(cut_off.base_url, tenant.api_key)
        proxy.restore()
        assert _status_once_its_listener_is_back(cut_off, tenant.api_key, 401) == 401, cut_off.output()[
            -2000:
        ]


def test_by_default_a_process_cut_off_from_the_database_serves_what_it_knew_until_it_is_back(
    tmp_path: Path, pg_server_url: str
) -> None:
    # The default trades exactness for availability while a process cannot read the database: a whole
    # outage serves every tenant whose key was cached (tests/integration/billing/test_ledger_spool.py); a
    # process cut off alone serves a key revoked meanwhile until it reads the database again.
    with _one_process_behind_a_proxy(tmp_path, pg_server_url, serve_cached=True) as (proxy, cut_off, other):
        tenant = register_tenant(other.base_url)
        assert _chat(cut_off.base_url, tenant.api_key) == 200
        proxy.cut()
        assert revoke_key(other.base_url, tenant).status_code == 200
        assert _chat(cut_off.base_url, tenant.api_key) == 200  # the database is out of its reach
        proxy.restore()
        assert _status_once_its_listener_is_back(cut_off, tenant.api_key, 401) == 401, cut_off.output()[
            -2000:
        ]


def test_a_deny_rule_made_while_the_notification_connection_was_down_applies_after_it_is_back(
    tmp_path: Path, pg_server_url: str
) -> None:
    with _one_process_behind_a_proxy(tmp_path, pg_server_url) as (proxy, cut_off, other):
        tenant = register_tenant(other.base_url)
        assert _chat(cut_off.base_url, tenant.api_key) == 200  # its policy is compiled and cached
        assert proxy.accepted > 0
        proxy.cut()
        _deny_every_model(other.base_url, tenant)  # answers once the cut-off process's lease lapsed
        assert not _served(cut_off.base_url, tenant.api_key)  # no cached policy or key is trusted now
        proxy.restore()
        assert _status_once_its_listener_is_back(cut_off, tenant.api_key, 403) == 403, cut_off.output()[
            -2000:
        ]


# -- several workers on one SQLite database, no Redis ---------------------------------------------------

OPERATOR_TOKEN = "operator-token-for-the-workers-test-0123456789"
# Each request opens a fresh connection, which SO_REUSEPORT hands to either worker: a round of 16 reaches
# both but with odds of 2**-15.
_ROUND = 16


def _workers_config(tmp_path: Path) -> Path:
    path = _config(tmp_path, f"sqlite:///{tmp_path / 'gateway.db'}", "workers.toml")
    path.write_text(
        f'[server]\noperator_token = "{OPERATOR_TOKEN}"\n'
        + path.read_text()
        + '\n[[plans]]\ncode = "credit"\ncredit_limit = 100.0\nrpm = 0\ntpm = 0\n'
        + '\n[[plans]]\ncode = "pro"\nmonthly_fee = 49.0\nrpm = 0\ntpm = 0\n'
    )
    return path


@contextmanager
def _two_workers(config: Path) -> Iterator[GatewayProcess]:
    """`modelgate serve --workers 2`, once both workers listen (the first to answer /readyz may be alone)."""
    with GatewayProcess(config, workers=2, cwd=config.parent) as gateway:
        deadline = time.monotonic() + 30
        while gateway.output().count("modelgate listening on") < 2:
            assert time.monotonic() < deadline, gateway.output()[-2000:]
            time.sleep(0.05)  # polling the log of a starting worker, bounded by the deadline
        yield gateway


def _round(gateway: GatewayProcess, api_key: str) -> set[int]:
    """The statuses of a round of chat requests spread over the workers."""
    return {_chat(gateway.base_url, api_key) for _ in range(_ROUND)}


def _in_storage(tmp_path: Path, sql: str, *args: str) -> list[tuple]:
    """Read or write the gateway's SQLite database behind its back (no channel tells the workers)."""
    with sqlite3.connect(tmp_path / "gateway.db", timeout=10) as conn:
        return conn.execute(sql, args).fetchall()


def _organization_id(tmp_path: Path, tenant: Tenant) -> str:
    [(organization_id,)] = _in_storage(
        tmp_path, "SELECT organization_id FROM users WHERE email = ?", tenant.email
    )
    return organization_id


def _assert_keys_are_served_from_the_cache(tmp_path: Path, gateway: GatewayProcess, tenant: Tenant) -> None:
    """A key made inactive in storage behind the workers' back still passes on every worker: they answer
    from their key cache (uncached, they would refuse it at once)."""
    _in_storage(tmp_path, "UPDATE api_keys SET status = 'revoked' WHERE id = ?", tenant.key_id)
    try:
        assert _round(gateway, tenant.api_key) == {200}
    finally:
        _in_storage(tmp_path, "UPDATE api_keys SET status = 'active' WHERE id = ?", tenant.key_id)


def test_a_key_revoked_through_one_worker_is_refused_by_every_worker_on_sqlite_with_the_cache_on(
    tmp_path: Path,
) -> None:
    with _two_workers(_workers_config(tmp_path)) as gateway:
        for _ in range(3):
            tenant = register_tenant(gateway.base_url)
            assert _round(gateway, tenant.api_key) == {200}  # both workers have cached it
            _assert_keys_are_served_from_the_cache(tmp_path, gateway, tenant)
            assert revoke_key(gateway.base_url, tenant).status_code == 200  # through one of them
            assert _round(gateway, tenant.api_key) == {401}


def test_a_deny_rule_made_through_one_worker_applies_on_every_worker_on_sqlite(tmp_path: Path) -> None:
    with _two_workers(_workers_config(tmp_path)) as gateway:
        tenant = register_tenant(gateway.base_url)
        assert _round(gateway, tenant.api_key) == {200}  # both workers have compiled its policy
        _deny_every_model(gateway.base_url, tenant)  # through one of them
        assert _round(gateway, tenant.api_key) == {403}


def _set_plan_through_the_operator_api(
    gateway: GatewayProcess, _config_path: Path, organization_id: str, plan: str
) -> None:
    reply = httpx.post(
        f"{gateway.base_url}/api/operator/organizations/{organization_id}/plan",
        json={"planCode": plan},
        headers={"authorization": f"Bearer {OPERATOR_TOKEN}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text


def _set_plan_through_the_cli(
    _gateway: GatewayProcess, config_path: Path, organization_id: str, plan: str
) -> None:
    """`modelgate billing set-plan` on the storage: a separate process on the same SQLite file."""
    command = ["billing", "set-plan", organization_id, plan, "--config", str(config_path)]
    done = subprocess.run(
        [sys.executable, "-m", "modelgate", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "not notified" not in done.stdout + done.stderr


@pytest.mark.parametrize("set_plan", [_set_plan_through_the_operator_api, _set_plan_through_the_cli])
def test_a_plan_change_applies_on_every_worker_on_sqlite_at_once(
    tmp_path: Path, set_plan: Callable[[GatewayProcess, Path, str, str], None]
) -> None:
    config = _workers_config(tmp_path)
    with _two_workers(config) as gateway:
        # Unpaid (a plan with a fee), without credit: refused until the plan gives it credit.
        tenant = register_tenant(gateway.base_url, plan="pro", fund_usd=None)
        assert _round(gateway, tenant.api_key) == {402}  # both workers have cached the key with its plan
        set_plan(gateway, config, _organization_id(tmp_path, tenant), "credit")
        assert _round(gateway, tenant.api_key) == {200}
        set_plan(gateway, config, _organization_id(tmp_path, tenant), "pro")
        assert _round(gateway, tenant.api_key) == {402}
