"""GET /v1/models: the OpenAI list by default; with `anthropic-version` the Anthropic list and envelope B for
its own errors — but a wrong key stays in envelope A."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.integration.model_api.error_bodies import assert_envelope_a, assert_envelope_b

# Nothing here fails a row or revokes a key: one gateway serves the whole module.
pytestmark = pytest.mark.shared_gateway

CONFIGURED = ["balanced", "claude-test", "decider", "embed-test", "gpt-test", "mock-chat"]
VERSION = {"anthropic-version": "2023-06-01"}


def test_models_list_has_the_openai_list_shape(http, alpha) -> None:
    response = http.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"object", "data"}
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == CONFIGURED
    for model in body["data"]:
        assert set(model) == {"id", "object", "created", "owned_by"}
        assert model["object"] == "model" and isinstance(model["created"], int)
    assert alpha.requests == []  # answered by the gateway itself


def test_models_list_parses_in_the_openai_sdk(client) -> None:
    models = list(client.models.list())
    assert [m.id for m in models] == CONFIGURED
    assert all(isinstance(m, openai.types.Model) for m in models)
    assert client.models.retrieve("gpt-test").id == "gpt-test"


def test_unknown_model_id_is_404_model_not_found_in_the_sdk(client) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.models.retrieve("no-such-model")
    assert raised.value.status_code == 404
    assert raised.value.code == "model_not_found"
    assert raised.value.type == "invalid_request_error"


def test_models_list_with_the_version_header_has_the_anthropic_list_shape(http) -> None:
    response = http.get("/v1/models", headers=VERSION)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"data", "has_more", "first_id", "last_id"}
    assert [m["id"] for m in body["data"]] == CONFIGURED
    assert body["has_more"] is False
    assert (body["first_id"], body["last_id"]) == ("balanced", "mock-chat")
    for model in body["data"]:
        assert set(model) == {"type", "id", "display_name", "created_at"}
        assert model["type"] == "model"


def test_anthropic_list_pages_with_limit_and_after_id(http) -> None:
    first = http.get("/v1/models", params={"limit": 2}, headers=VERSION).json()
    assert [m["id"] for m in first["data"]] == ["balanced", "claude-test"]
    assert first["has_more"] is True
    second = http.get("/v1/models", params={"limit": 2, "after_id": first["last_id"]}, headers=VERSION).json()
    assert [m["id"] for m in second["data"]] == ["decider", "embed-test"]


def test_models_list_parses_in_the_anthropic_sdk(gateway, tenant) -> None:
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0)
    assert [m.id for m in client.models.list()] == CONFIGURED
    assert client.models.retrieve("claude-test").id == "claude-test"


@pytest.mark.parametrize(
    "limit",
    ["abc", "0", "-1", "1001", "1.5", "", "\u00b2", "9" * 5000],
    ids=["letters", "zero", "negative", "too-big", "fraction", "empty", "superscript-two", "5000-digits"],
)
def test_invalid_limit_with_the_version_header_is_400_envelope_b(http, limit) -> None:
    response = http.get("/v1/models", params={"limit": limit}, headers=VERSION)
    assert_envelope_b(response, 400, "invalid_request_error")


def test_unknown_cursor_with_the_version_header_is_400_envelope_b(http) -> None:
    response = http.get("/v1/models", params={"after_id": "no-such-model"}, headers=VERSION)
    assert_envelope_b(response, 400, "invalid_request_error")


def test_unknown_model_id_with_the_version_header_is_404_envelope_b(http) -> None:
    response = http.get("/v1/models/no-such-model", headers=VERSION)
    assert_envelope_b(response, 404, "not_found_error")


def test_unknown_model_id_without_the_version_header_is_404_envelope_a(http) -> None:
    response = http.get("/v1/models/no-such-model")
    assert_envelope_a(response, 404, "invalid_request_error", code="model_not_found")


def test_limit_without_the_version_header_is_ignored(http) -> None:
    response = http.get("/v1/models", params={"limit": "abc"})
    assert response.status_code == 200
    assert response.json()["object"] == "list"


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"x-api-key": "sk-wrong"}, id="wrong-x-api-key"),
        pytest.param({"authorization": "Bearer sk-wrong"}, id="wrong-bearer"),
        pytest.param({}, id="missing-key"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/gpt-test"])
def test_wrong_key_with_the_version_header_stays_envelope_a(gateway, headers, path) -> None:
    response = httpx.get(f"{gateway.base_url}{path}", headers={**VERSION, **headers}, timeout=10)
    assert_envelope_a(response, 401, "invalid_request_error")


def test_wrong_key_surfaces_as_authentication_error_in_the_openai_sdk(gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.models.list()
    assert raised.value.status_code == 401
    assert raised.value.type == "invalid_request_error"
    assert raised.value.body is not None and "code" not in raised.value.body
