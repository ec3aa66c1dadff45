"""Model API keys: `Authorization: Bearer sk-…` or `x-api-key: sk-…`; anything else is 401 (envelope A)."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.model_api.error_bodies import assert_envelope_a, assert_envelope_b
from tests.support.gateway import revoke_key

CHAT_BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}


def chat(gateway, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/chat/completions", json=CHAT_BODY, headers=headers, timeout=10)


def test_bearer_key_is_accepted(gateway, tenant) -> None:
    assert chat(gateway, {"authorization": f"Bearer {tenant.api_key}"}).status_code == 200


def test_x_api_key_is_accepted(gateway, tenant) -> None:
    assert chat(gateway, {"x-api-key": tenant.api_key}).status_code == 200


def test_missing_key_is_401(gateway, alpha) -> None:
    assert_envelope_a(chat(gateway, {}), 401, "invalid_request_error")
    assert alpha.requests == []


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"authorization": "Bearer sk-wrong-0123456789abcdef0123456789abcdef"}, id="bearer"),
        pytest.param({"x-api-key": "sk-wrong-0123456789abcdef0123456789abcdef"}, id="x-api-key"),
        pytest.param({"authorization": "Bearer not-a-key"}, id="no-sk-prefix"),
        pytest.param({"authorization": "Basic c2stYWJjOmRlZg=="}, id="basic-scheme"),
        pytest.param({"authorization": "Bearer"}, id="bearer-without-token"),
        pytest.param({"x-api-key": ""}, id="empty-x-api-key"),
        pytest.param({"authorization": "Bearer sk-" + "a" * 5000}, id="very-long-key"),
    ],
)
def test_wrong_key_is_401(gateway, tenant, alpha, headers) -> None:
    assert_envelope_a(chat(gateway, headers), 401, "invalid_request_error")
    assert alpha.requests == []


def test_revoked_key_is_rejected_on_the_very_next_request(gateway, tenant) -> None:
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    assert chat(gateway, headers).status_code == 200  # the key is now known (and cached) by the gateway
    assert revoke_key(gateway.base_url, tenant).status_code == 200
    assert_envelope_a(chat(gateway, headers), 401, "invalid_request_error")


def test_revoked_key_is_rejected_through_x_api_key_too(gateway, tenant) -> None:
    assert chat(gateway, {"x-api-key": tenant.api_key}).status_code == 200
    assert revoke_key(gateway.base_url, tenant).status_code == 200
    assert_envelope_a(chat(gateway, {"x-api-key": tenant.api_key}), 401, "invalid_request_error")


def test_cabinet_session_token_is_not_a_model_key(gateway, tenant, alpha) -> None:
    response = chat(gateway, {"authorization": f"Bearer {tenant.session_token}"})
    assert_envelope_a(response, 401, "invalid_request_error")
    assert alpha.requests == []


def test_management_key_is_not_a_model_key(gateway, tenant, alpha) -> None:
    created = httpx.post(
        f"{gateway.base_url}/api/organization/management-keys",
        json={"name": "automation"},
        headers={"authorization": f"Bearer {tenant.session_token}"},
        timeout=10,
    )
    assert created.status_code == 201, created.text
    secret = created.json()["secret"]
    assert secret.startswith("sk-mgmt-")
    for headers in ({"authorization": f"Bearer {secret}"}, {"x-api-key": secret}):
        assert_envelope_a(chat(gateway, headers), 401, "invalid_request_error")
    assert alpha.requests == []


def test_key_with_invalid_utf8_bytes_is_401(gateway) -> None:
    response = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        json=CHAT_BODY,
        timeout=10,
        headers=[(b"authorization", b"Bearer sk-\xff\xfe\x80abc")],
    )
    assert_envelope_a(response, 401, "invalid_request_error")


def test_wrong_key_on_messages_is_envelope_b_authentication_error(gateway) -> None:
    response = httpx.post(
        f"{gateway.base_url}/v1/messages",
        timeout=10,
        headers={"x-api-key": "sk-wrong", "anthropic-version": "2023-06-01"},
        json={"model": "claude-test", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert_envelope_b(response, 401, "authentication_error")
