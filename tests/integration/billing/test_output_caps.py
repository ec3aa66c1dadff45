"""Output caps are checked against the model on every route that takes one, whatever plugins are off."""

from __future__ import annotations

from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.integration.billing.conftest import billing_toml
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

CONTEXT = 4096  # max_context_tokens of the model below
NO_RESERVING_PLUGINS = '[plugins]\ndisabled = ["rate_limits", "billing_gate"]\n'


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory):
    """The rate-limit and billing plugins (which reserve by the cap) switched off: the check stays."""
    folder = tmp_path_factory.mktemp("caps")
    toml = billing_toml(f"sqlite:///{folder / 'caps.db'}", None, extra=NO_RESERVING_PLUGINS)
    toml = toml.replace(
        "default_max_tokens = 50\n", f"default_max_tokens = 50\nmax_context_tokens = {CONTEXT}\n"
    )
    with ThreadedGateway(write_config(folder / "caps.toml", toml)) as running:
        yield running


@pytest.fixture(scope="module")
def tenant(gateway: ThreadedGateway) -> Tenant:
    return register_tenant(gateway.base_url)


def _post(gateway: ThreadedGateway, tenant: Tenant, path: str, body: dict) -> httpx.Response:
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    return httpx.post(f"{gateway.base_url}{path}", json=body, headers=headers, timeout=30)


def test_messages_max_tokens_above_the_context_is_a_400_in_envelope_b(gateway, tenant) -> None:
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="metered", max_tokens=CONTEXT + 1, messages=[{"role": "user", "content": "hi"}]
        )
    body = refused.value.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert f"at most {CONTEXT}" in body["error"]["message"] and "max_tokens" in body["error"]["message"]
    answer = client.messages.create(
        model="metered", max_tokens=CONTEXT, messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.content[0].text


def test_legacy_chat_max_tokens_above_the_context_is_a_400_in_envelope_a(gateway, tenant) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="metered", max_tokens=CONTEXT + 1, messages=[{"role": "user", "content": "hi"}]
        )
    error = refused.value.response.json()["error"]
    assert error["type"] == "invalid_request_error" and f"at most {CONTEXT}" in error["message"]


def test_completions_max_tokens_above_the_context_is_a_400(gateway, tenant) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="metered", prompt="hi", max_tokens=CONTEXT + 1)
    assert f"at most {CONTEXT}" in refused.value.response.json()["error"]["message"]


@pytest.mark.parametrize("value", [-1, 0, 2.5, "12", True])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_max_tokens_that_is_not_a_positive_integer_is_a_400(gateway, tenant, path: str, value) -> None:
    body = {"model": "metered", "max_tokens": value}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"})
    reply = _post(gateway, tenant, path, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and "max_tokens" in error["message"]


@pytest.mark.parametrize("value", [-1, 0, 2.5, "12", True, CONTEXT + 1])
def test_a_messages_max_tokens_out_of_range_is_a_400_in_envelope_b(gateway, tenant, value) -> None:
    body = {"model": "metered", "max_tokens": value, "messages": [{"role": "user", "content": "hi"}]}
    reply = _post(gateway, tenant, "/v1/messages", body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["type"] == "error" and "max_tokens" in reply.json()["error"]["message"]


def test_the_config_cannot_switch_the_cap_check_off(tmp_path: Path) -> None:
    from modelgate.config import ConfigError

    toml = billing_toml(
        f"sqlite:///{tmp_path / 'x.db'}", None, extra='[plugins]\ndisabled = ["output_caps"]\n'
    )
    with pytest.raises(ConfigError, match="output_caps"):
        write_config(tmp_path / "off.toml", toml)
