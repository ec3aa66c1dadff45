"""A content rule's creation, change and removal take effect on the next request, in every process."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.integration.content_policy.conftest import Stack, mock_config
from tests.support.gateway import GatewayProcess, register_tenant

SECRET = "codename bluebird"


def _chat(base_url: str, api_key: str, text: str = "about " + SECRET, model: str = "gpt") -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        timeout=30,
        headers={"authorization": f"Bearer {api_key}"},
        json={"model": model, "messages": [{"role": "user", "content": text}]},
    )


def test_create_patch_and_delete_each_take_effect_on_the_next_request(stack: Stack) -> None:
    key = stack.tenant.api_key
    assert _chat(stack.base_url, key).status_code == 200
    rule = stack.rule("block", phrases=[SECRET])
    assert _chat(stack.base_url, key).status_code == 403
    patched = stack.cabinet("PATCH", f"/policy-rules/{rule['id']}", {"effect": "redact"})
    assert patched.status_code == 200, patched.text
    assert _chat(stack.base_url, key).status_code == 200
    assert stack.oai.requests_to("/v1/chat/completions")[-1].json["messages"][0]["content"] == (
        "about [REDACTED:phrase]"
    )
    changed = stack.cabinet(
        "PATCH",
        f"/policy-rules/{rule['id']}",
        {"effect": "block", "content": {"where": "prompt", "phrases": ["x y z"]}},
    )
    assert changed.status_code == 200, changed.text
    assert _chat(stack.base_url, key).status_code == 200
    assert _chat(stack.base_url, key, "x Y z").status_code == 403
    assert stack.cabinet("DELETE", f"/policy-rules/{rule['id']}").status_code == 200
    assert _chat(stack.base_url, key, "x Y z").status_code == 200


def test_a_system_rule_applies_to_the_systems_keys_only(stack: Stack) -> None:
    system = stack.cabinet("POST", "/systems", {"name": "agent-7"})
    assert system.status_code == 201, system.text
    key = stack.cabinet(
        "POST", "/organization/api-keys", {"alias": "sys-key-7", "systemId": system.json()["id"]}
    )
    assert key.status_code == 201, key.text
    reply = stack.cabinet(
        "POST",
        "/policy-rules",
        {
            "subjectType": "system",
            "subjectId": system.json()["id"],
            "effect": "block",
            "content": {"where": "prompt", "phrases": [SECRET]},
        },
    )
    assert reply.status_code == 201, reply.text
    assert _chat(stack.base_url, key.json()["secret"]).status_code == 403
    assert _chat(stack.base_url, stack.tenant.api_key).status_code == 200


def test_a_rule_created_through_one_process_applies_in_the_other_on_the_next_request(
    tmp_path: Path, pg_server_url: str, redis_url: str
) -> None:
    config = mock_config(tmp_path / "fleet.toml", pg_server_url, redis_url)
    with GatewayProcess(config, cwd=tmp_path) as first, GatewayProcess(config, cwd=tmp_path) as second:
        for _ in range(5):
            tenant = register_tenant(first.base_url)
            # Both processes have compiled the organization's (empty) policy before the change.
            assert _chat(first.base_url, tenant.api_key).status_code == 200
            assert _chat(second.base_url, tenant.api_key).status_code == 200
            created = httpx.post(
                f"{first.base_url}/api/policy-rules",
                timeout=30,
                headers={"authorization": f"Bearer {tenant.session_token}"},
                json={
                    "subjectType": "organization",
                    "effect": "block",
                    "content": {"where": "prompt", "phrases": [SECRET]},
                },
            )
            assert created.status_code == 201, created.text
            assert _chat(second.base_url, tenant.api_key).status_code == 403
            assert _chat(first.base_url, tenant.api_key).status_code == 403
            deleted = httpx.delete(
                f"{first.base_url}/api/policy-rules/{created.json()['id']}",
                timeout=30,
                headers={"authorization": f"Bearer {tenant.session_token}"},
            )
            assert deleted.status_code == 200
            assert _chat(second.base_url, tenant.api_key).status_code == 200
