"""The request's `provider` object keeps only matching routing rows and never leaves the gateway."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes import Fault
from tests.integration.model_api.conftest import UPSTREAM_KEY
from tests.integration.model_api.error_bodies import assert_envelope_a

# Nothing here fails a row or revokes a key: one gateway serves the whole module.
pytestmark = pytest.mark.shared_gateway

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "pick a row"}]


def chat(http, provider, model: str = "gpt-test", **extra):
    return http.post(CHAT, json={"model": model, "messages": MESSAGES, "provider": provider, **extra})


def test_provider_only_picks_the_named_providers_row(http, alpha, beta) -> None:
    response = chat(http, {"only": ["beta"]})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "echo: pick a row"
    assert alpha.requests_to(CHAT) == []
    [sent] = beta.requests_to(CHAT)
    assert sent.json["model"] == "gpt-upstream-b"


def test_provider_only_accepts_a_single_name(http, alpha, beta) -> None:
    assert chat(http, {"only": "beta"}).status_code == 200
    assert alpha.requests_to(CHAT) == []
    assert len(beta.requests_to(CHAT)) == 1


def test_provider_host_picks_the_row_on_that_host(http, alpha, beta) -> None:
    assert chat(http, {"host": "localhost"}).status_code == 200
    assert alpha.requests_to(CHAT) == []
    assert beta.requests_to(CHAT)[0].json["model"] == "gpt-upstream-b"


def test_provider_host_of_the_primary_row_picks_it(http, alpha, beta) -> None:
    assert chat(http, {"host": "127.0.0.1"}).status_code == 200
    assert alpha.requests_to(CHAT)[0].json["model"] == "gpt-upstream-a"
    assert beta.requests_to(CHAT) == []


def test_provider_only_and_host_together_narrow_the_rows(http, alpha, beta) -> None:
    assert chat(http, {"only": ["alpha", "beta"], "host": "localhost"}).status_code == 200
    assert alpha.requests_to(CHAT) == []
    assert len(beta.requests_to(CHAT)) == 1


def test_provider_object_is_removed_before_forwarding(http, beta) -> None:
    assert chat(http, {"only": ["beta"]}, temperature=0.5).status_code == 200
    sent = beta.requests_to(CHAT)[0].json
    assert "provider" not in sent
    assert sent["temperature"] == 0.5
    assert sent["messages"] == MESSAGES


def test_provider_object_is_removed_when_the_model_name_is_not_rewritten(http, alpha) -> None:
    # `balanced` rows keep the client's model name upstream, so the body is not rebuilt for the name.
    assert chat(http, {"only": "alpha"}, model="balanced").status_code == 200
    sent = alpha.requests_to(CHAT)[0]
    # The output cap the gateway reserved for is sent too (the request named none): the model's default.
    assert sent.json == {"model": "balanced", "messages": MESSAGES, "max_completion_tokens": 4096}


def test_provider_key_is_sent_and_never_the_clients(http, tenant, beta) -> None:
    assert chat(http, {"only": ["beta"]}).status_code == 200
    sent = beta.requests_to(CHAT)[0]
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert "x-api-key" not in sent.headers
    assert all(tenant.api_key not in value for value in sent.headers.values())
    assert tenant.api_key.encode() not in sent.body


def test_client_headers_do_not_reach_the_provider(http, alpha) -> None:
    client_only = {"openai-organization": "org-client", "openai-project": "proj-client", "cookie": "s=1"}
    response = http.post(CHAT, json={"model": "gpt-test", "messages": MESSAGES}, headers=client_only)
    assert response.status_code == 200
    [sent] = alpha.requests_to(CHAT)
    assert not set(client_only) & set(sent.headers)


def test_provider_account_headers_do_not_reach_the_client(http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(headers={"openai-organization": "org-upstream", "set-cookie": "u=1"}))
    response = chat(http, {"only": "alpha"})
    assert response.status_code == 200
    assert "openai-organization" not in response.headers and "set-cookie" not in response.headers
    assert "x-fake-upstream" not in response.headers


def test_streamed_request_honours_the_provider_object(http, alpha, beta) -> None:
    with http.stream(
        "POST",
        CHAT,
        json={"model": "gpt-test", "messages": MESSAGES, "stream": True, "provider": {"only": ["beta"]}},
    ) as response:
        assert response.status_code == 200
        assert b"data: [DONE]" in response.read()
    assert alpha.requests_to(CHAT) == []
    assert "provider" not in beta.requests_to(CHAT)[0].json


@pytest.mark.parametrize(
    "provider",
    [
        pytest.param("alpha", id="not-an-object"),
        pytest.param(["alpha"], id="array"),
        pytest.param(None, id="null"),
        pytest.param({"only": []}, id="only-empty-list"),
        pytest.param({"only": 7}, id="only-number"),
        pytest.param({"only": [""]}, id="only-empty-name"),
        pytest.param({"only": ["nobody"]}, id="unknown-provider"),
        pytest.param({"only": ["alpha", "nobody"]}, id="one-unknown-provider"),
        pytest.param({"host": "example.invalid"}, id="unknown-host"),
        pytest.param({"host": ""}, id="empty-host"),
        pytest.param({"host": ["localhost"]}, id="host-array"),
        pytest.param({"sort": "price"}, id="unknown-field"),
        pytest.param({"only": ["claude"]}, id="provider-without-a-row-of-the-model"),
        pytest.param({"only": ["alpha"], "host": "localhost"}, id="no-row-matches-both"),
    ],
)
def test_invalid_provider_object_is_400_without_code(http, alpha, beta, provider) -> None:
    assert_envelope_a(chat(http, provider), 400, "invalid_request_error")
    assert alpha.requests == [] and beta.requests == []


def test_provider_object_naming_no_row_of_an_embedding_model_is_400(http, alpha) -> None:
    response = http.post(
        "/v1/embeddings", json={"model": "embed-test", "input": "x", "provider": {"only": ["beta"]}}
    )
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.requests == []


def test_provider_object_400_on_messages_stays_envelope_a(gateway, tenant, claude) -> None:
    response = httpx.post(
        f"{gateway.base_url}/v1/messages",
        timeout=10,
        headers={"x-api-key": tenant.api_key, "anthropic-version": "2023-06-01"},
        json={
            "model": "claude-test",
            "max_tokens": 8,
            "provider": {"only": ["nobody"]},
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert_envelope_a(response, 400, "invalid_request_error")
    assert claude.requests == []
