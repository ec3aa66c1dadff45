"""Envelope A on the model API: the 400 rows about the request itself and the 404 rows, byte-exact."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.model_api.error_bodies import assert_envelope_a

# Nothing here fails a row or revokes a key: one gateway serves the whole module.
pytestmark = pytest.mark.shared_gateway

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]

UNSUPPORTED_ROUTES = [
    ("GET", "/v1/assistants"),
    ("POST", "/v1/assistants"),
    ("POST", "/v1/threads"),
    ("POST", "/v1/threads/thread_abc/runs"),
    ("POST", "/v1/moderations"),
    ("GET", "/v1/files"),
    ("POST", "/v1/files"),
    ("POST", "/v1/batches"),
    ("POST", "/v1/fine_tuning/jobs"),
    ("GET", "/v1/organization/users"),
    ("GET", "/v1/organization/admin_api_keys"),
    ("POST", "/v1/vector_stores"),
]


@pytest.mark.parametrize(("method", "path"), UNSUPPORTED_ROUTES)
def test_route_outside_the_model_api_is_404_route_not_supported_without_code(http, method, path) -> None:
    response = http.request(method, path, json={"model": "gpt-test"} if method == "POST" else None)
    assert_envelope_a(response, 404, "invalid_request_error", message="route not supported")


def test_route_not_supported_does_not_depend_on_the_key(gateway) -> None:
    response = httpx.post(f"{gateway.base_url}/v1/moderations", json={"input": "x"}, timeout=10)
    assert_envelope_a(response, 404, "invalid_request_error", message="route not supported")


def test_route_not_supported_stays_envelope_a_with_x_api_key(gateway, tenant) -> None:
    response = httpx.get(
        f"{gateway.base_url}/v1/assistants", headers={"x-api-key": tenant.api_key}, timeout=10
    )
    assert_envelope_a(response, 404, "invalid_request_error", message="route not supported")


def test_unknown_model_is_404_model_not_found(http, alpha) -> None:
    response = http.post(CHAT, json={"model": "no-such-model", "messages": MESSAGES})
    assert_envelope_a(response, 404, "invalid_request_error", code="model_not_found")
    assert alpha.requests == []


def test_model_that_does_not_serve_embeddings_is_404_model_not_found(http, alpha) -> None:
    response = http.post("/v1/embeddings", json={"model": "gpt-test", "input": "x"})
    assert_envelope_a(response, 404, "invalid_request_error", code="model_not_found")
    assert alpha.requests == []


def test_embedding_model_called_for_chat_is_404_model_not_found(http) -> None:
    response = http.post(CHAT, json={"model": "embed-test", "messages": MESSAGES})
    assert_envelope_a(response, 404, "invalid_request_error", code="model_not_found")


def test_model_not_found_stays_envelope_a_with_x_api_key(gateway, tenant) -> None:
    response = httpx.post(
        f"{gateway.base_url}{CHAT}",
        headers={"x-api-key": tenant.api_key},
        json={"model": "no-such-model", "messages": MESSAGES},
        timeout=10,
    )
    assert_envelope_a(response, 404, "invalid_request_error", code="model_not_found")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"model": "gpt-test", "messages": [', id="malformed-json"),
        pytest.param(b'[{"model": "gpt-test"}]', id="json-array"),
        pytest.param(b"", id="empty-body"),
        pytest.param(b'"gpt-test"', id="json-string"),
        pytest.param(b"null", id="json-null"),
        pytest.param(b'{"messages": [{"role": "user", "content": "hi"}]}', id="missing-model"),
        pytest.param(b'{"model": "", "messages": []}', id="empty-model"),
        pytest.param(b'{"model": 42, "messages": []}', id="model-not-a-string"),
        pytest.param(b'{"model": "gpt-test", "messages": [], "stream": "true"}', id="stream-string"),
        pytest.param(b'{"model": "gpt-test", "messages": [], "stream": 1}', id="stream-number"),
    ],
)
def test_invalid_request_body_is_400_without_code(http, alpha, body) -> None:
    response = http.post(CHAT, content=body, headers={"content-type": "application/json"})
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.requests == []


def test_null_stream_means_not_streaming(http, alpha) -> None:
    response = http.post(CHAT, json={"model": "gpt-test", "messages": MESSAGES, "stream": None})
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "chat.completion"


def test_streaming_on_a_route_that_does_not_stream_is_400(http) -> None:
    response = http.post("/v1/embeddings", json={"model": "embed-test", "input": "x", "stream": True})
    assert_envelope_a(response, 400, "invalid_request_error")


def test_every_error_answer_carries_the_request_id(http) -> None:
    response = http.post(
        CHAT, json={"model": "no-such-model", "messages": MESSAGES}, headers={"x-request-id": "trace-123"}
    )
    assert response.status_code == 404
    assert response.headers["x-request-id"] == "trace-123"
