"""Policy Rules on the model API: 403 deny, 404 not enabled, budgets (402), rpm overrides, and every rule
change effective on the very next request."""

from __future__ import annotations

import time

import httpx
import orjson

from tests.integration.billing.conftest import OPERATOR_TOKEN
from tests.support.gateway import Tenant, register_tenant

CHAT = {"model": "metered", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def _chat(gateway, tenant: Tenant, model: str = "metered") -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        content=orjson.dumps({**CHAT, "model": model}),
        headers={"authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
        timeout=30,
    )


def _first_status_within(gateway, tenant: Tenant, wanted: int, *, seconds: float) -> int:
    """Repeat a chat request until it answers `wanted` or `seconds` pass; the last status."""
    deadline = time.monotonic() + seconds
    status = _chat(gateway, tenant).status_code
    while status != wanted and time.monotonic() < deadline:
        time.sleep(0.02)
        status = _chat(gateway, tenant).status_code
    return status


def _cabinet(
    gateway, tenant: Tenant, method: str, path: str, body: dict | None = None, token: str | None = None
) -> httpx.Response:
    return httpx.request(
        method,
        f"{gateway.base_url}/api{path}",
        json=body,
        timeout=30,
        headers={"authorization": f"Bearer {token or tenant.session_token}"},
    )


def _rule(gateway, tenant: Tenant, **fields) -> dict:
    reply = _cabinet(gateway, tenant, "POST", "/policy-rules", fields)
    assert reply.status_code == 201, reply.text
    return reply.json()


def test_a_deny_rule_answers_403_and_its_removal_takes_effect_on_the_next_request(start_gateway) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    assert _chat(gateway, tenant).status_code == 200
    rule = _rule(gateway, tenant, subjectType="organization", effect="deny", models=["meter*"])
    blocked = _chat(gateway, tenant)
    assert blocked.status_code == 403
    assert blocked.json() == {
        "error": {"message": blocked.json()["error"]["message"], "type": "invalid_request_error"}
    }
    assert _chat(gateway, tenant, "other").status_code == 200
    assert _cabinet(gateway, tenant, "DELETE", f"/policy-rules/{rule['id']}").status_code in (200, 204)
    assert _chat(gateway, tenant).status_code == 200


def test_a_deny_rule_on_messages_is_a_permission_error_in_envelope_b(single_backend_gateway) -> None:
    gateway = single_backend_gateway()
    tenant = register_tenant(gateway.base_url)
    _rule(gateway, tenant, subjectType="key", subjectId=tenant.key_id, effect="deny", models=["*"])
    reply = httpx.post(
        f"{gateway.base_url}/v1/messages",
        headers={"x-api-key": tenant.api_key},
        timeout=30,
        json={"model": "metered", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
    )
    assert reply.status_code == 403
    assert reply.json()["type"] == "error"
    assert reply.json()["error"]["type"] == "permission_error"


def test_a_model_outside_the_allow_rules_is_model_not_found_and_hidden_from_the_list(start_gateway) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    _rule(gateway, tenant, subjectType="organization", effect="allow", models=["other"])
    refused = _chat(gateway, tenant, "metered")
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "model_not_found"
    assert _chat(gateway, tenant, "other").status_code == 200
    listed = httpx.get(f"{gateway.base_url}/v1/models", headers={"authorization": f"Bearer {tenant.api_key}"})
    assert [m["id"] for m in listed.json()["data"]] == ["other"]
    single = httpx.get(
        f"{gateway.base_url}/v1/models/metered", headers={"authorization": f"Bearer {tenant.api_key}"}
    )
    assert single.status_code == 404


def test_a_key_rule_overrides_the_plan_rpm(start_gateway) -> None:
    gateway = start_gateway(rpm=100)
    tenant = register_tenant(gateway.base_url)
    _rule(gateway, tenant, subjectType="key", subjectId=tenant.key_id, effect="allow", models=["*"], rpm=2)
    assert [_chat(gateway, tenant).status_code for _ in range(3)] == [200, 200, 429]


def test_a_rule_budget_is_enforced_per_period(start_gateway) -> None:
    gateway = start_gateway(per_request_usd=1.0)
    tenant = register_tenant(gateway.base_url, fund_usd=100.0)
    _rule(
        gateway,
        tenant,
        subjectType="organization",
        effect="allow",
        models=["*"],
        budget={"amountMicros": 2_000_000, "period": "day"},
    )
    statuses = [_chat(gateway, tenant).status_code for _ in range(3)]
    assert statuses == [200, 200, 402]


def _first_invoice(gateway, tenant: Tenant) -> dict:
    reply = _cabinet(gateway, tenant, "GET", "/invoices")
    assert reply.status_code == 200, reply.text
    invoices = reply.json()["invoices"] if isinstance(reply.json(), dict) else reply.json()
    return invoices[-1]


def test_marking_the_invoice_paid_unblocks_the_organization_at_once(start_gateway) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url, plan="pro", fund_usd=None)
    assert _chat(gateway, tenant).status_code == 402
    invoice = _first_invoice(gateway, tenant)
    paid = _cabinet(
        gateway, tenant, "POST", f"/operator/invoices/{invoice['id']}/mark-paid", token=OPERATOR_TOKEN
    )
    assert paid.status_code == 200, paid.text
    assert _chat(gateway, tenant).status_code == 200


def test_a_top_up_raises_the_headroom_at_once(start_gateway) -> None:
    gateway = start_gateway(per_request_usd=1.0)
    tenant = register_tenant(gateway.base_url, fund_usd=1.0)
    assert [_chat(gateway, tenant).status_code for _ in range(2)] == [200, 402]
    session = _cabinet(gateway, tenant, "GET", "/auth/session").json()
    org_id = session["organization"]["id"]
    topped = _cabinet(
        gateway,
        tenant,
        "POST",
        f"/operator/organizations/{org_id}/top-up",
        {"amountMicros": 2_000_000},
        token=OPERATOR_TOKEN,
    )
    assert topped.status_code in (200, 201), topped.text
    assert [_chat(gateway, tenant).status_code for _ in range(3)] == [200, 200, 402]


def test_the_billing_cli_unblocks_a_running_gateway_through_postgres(tmp_path, pg_server_url: str) -> None:
    import subprocess
    import sys

    from tests.integration.billing.conftest import billing_toml
    from tests.support.gateway import ThreadedGateway, write_config

    config_path = tmp_path / "cli.toml"
    with ThreadedGateway(write_config(config_path, billing_toml(pg_server_url, None))) as gateway:
        tenant = register_tenant(gateway.base_url, plan="pro", fund_usd=None)
        assert _chat(gateway, tenant).status_code == 402
        invoice = _first_invoice(gateway, tenant)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "modelgate",
                "billing",
                "mark-paid",
                invoice["id"],
                "--config",
                str(config_path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        # NOTIFY reaches the gateway's listener asynchronously; bounded wait for the first 200.
        assert _first_status_within(gateway, tenant, 200, seconds=5) == 200


def test_a_cli_top_up_on_sqlite_reaches_a_gateway_that_refused_the_organization(tmp_path) -> None:
    import subprocess
    import sys

    from tests.integration.billing.conftest import billing_toml
    from tests.support.gateway import ThreadedGateway, write_config

    config_path = tmp_path / "sqlite-cli.toml"
    toml = billing_toml(f"sqlite:///{tmp_path / 'cli.db'}", None, per_request_usd=1.0)
    with ThreadedGateway(write_config(config_path, toml)) as gateway:
        tenant = register_tenant(gateway.base_url, fund_usd=None)
        assert _chat(gateway, tenant).status_code == 402
        org_id = _cabinet(gateway, tenant, "GET", "/auth/session").json()["organization"]["id"]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "modelgate",
                "billing",
                "top-up",
                org_id,
                "3",
                "--config",
                str(config_path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        # No channel reaches the gateway from the CLI on SQLite: it re-reads a refused organization at
        # most once a second, so the first 200 comes within that bound.
        assert _first_status_within(gateway, tenant, 200, seconds=5) == 200
        assert [_chat(gateway, tenant).status_code for _ in range(3)] == [200, 200, 402]
