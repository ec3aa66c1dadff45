"""Hostile or odd input never gets a 500 or a traceback: it is either served or refused with a 4xx in the
route's envelope."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.integration.model_api.conftest import gateway_toml
from tests.integration.model_api.error_bodies import assert_envelope_a, assert_envelope_b
from tests.support.gateway import ThreadedGateway, write_config

# Nothing here fails a row or revokes a key: one gateway serves the whole module.
pytestmark = pytest.mark.shared_gateway

CHAT = "/v1/chat/completions"


def nested(depth: int) -> bytes:
    """A chat request whose message content is a list nested `depth` levels deep."""
    return (
        b'{"model": "gpt-test", "messages": [{"role": "user", "content": '
        + b"[" * depth
        + b"]" * depth
        + b"}]}"
    )


def assert_no_traceback(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:500]
    assert "Traceback" not in response.text and 'File "' not in response.text


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"model": "gpt-test", "messages": [], "temperature": NaN}', id="nan-literal"),
        pytest.param(
            b'{"model": "gpt-test", "messages": [], "temperature": Infinity}', id="infinity-literal"
        ),
        pytest.param(b'{"model": "gpt-test", "messages": [], "temperature": -Infinity}', id="minus-infinity"),
        pytest.param(b'{"model": "gpt-test", "messages": [], "temperature": 1e400}', id="float-overflow"),
        pytest.param(b'{"model": "gpt-test\xff\xfe", "messages": []}', id="invalid-utf8-in-string"),
        pytest.param(b'\xff\xfe{"model": "gpt-test"}', id="invalid-utf8-before-json"),
        pytest.param(b'{"model": "gpt-test", "messages": "\\ud800"}', id="lone-surrogate-escape"),
        pytest.param(b'{"model": "gpt-test", "model": 1, "messages": []}', id="duplicate-key-wrong-type"),
        pytest.param(b"[" * 100_000, id="deeply-nested-unclosed"),
        pytest.param(b"[" * 5000 + b"]" * 5000, id="deeply-nested-array"),
        pytest.param(b'{"a":' * 5000 + b"1" + b"}" * 5000, id="deeply-nested-object"),
        pytest.param(b"\x00\x01\x02", id="binary"),
        pytest.param(b'{"model": "gpt-test"', id="truncated"),
    ],
)
def test_unparseable_or_invalid_json_is_400(http, alpha, body) -> None:
    response = http.post(CHAT, content=body, headers={"content-type": "application/json"})
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.requests == []


def test_json_nested_200_levels_is_forwarded(http, alpha) -> None:
    response = http.post(CHAT, content=nested(200), headers={"content-type": "application/json"})
    assert_no_traceback(response)
    assert alpha.requests_to(CHAT)[0].json["model"] == "gpt-upstream-a"


@pytest.mark.parametrize("depth", [300, 1000])
def test_json_nested_too_deeply_to_re_encode_is_400(http, alpha, depth) -> None:
    response = http.post(CHAT, content=nested(depth), headers={"content-type": "application/json"})
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.requests == []


@pytest.mark.parametrize("depth", [300, 1000])
def test_json_nested_too_deeply_with_a_provider_object_is_400(http, alpha, depth) -> None:
    body = nested(depth)[:-1] + b', "provider": {"only": ["alpha"]}}'
    response = http.post(CHAT, content=body, headers={"content-type": "application/json"})
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.requests == []


def test_deeply_nested_responses_request_is_400(http, alpha) -> None:
    body = b'{"model": "gpt-test", "input": ' + b"[" * 400 + b"]" * 400 + b"}"
    response = http.post("/v1/responses", content=body, headers={"content-type": "application/json"})
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.requests == []


def test_huge_integer_is_never_a_500(http) -> None:
    body = (
        b'{"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": '
        + b"9" * 400
        + b"}"
    )
    assert_no_traceback(http.post(CHAT, content=body, headers={"content-type": "application/json"}))


def test_unicode_prompt_round_trips(http, alpha) -> None:
    text = "héllo 世界 🚀 \u202e עברית \u0000 end"
    response = http.post(CHAT, json={"model": "gpt-test", "messages": [{"role": "user", "content": text}]})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == f"echo: {text}"
    assert alpha.requests_to(CHAT)[0].json["messages"][0]["content"] == text


def test_unicode_model_name_is_404_model_not_found(http) -> None:
    response = http.post(CHAT, json={"model": "модель-🚀", "messages": [{"role": "user", "content": "x"}]})
    error = assert_envelope_a(response, 404, "invalid_request_error", code="model_not_found")
    assert "модель-🚀" in error["message"]


def test_very_long_model_name_is_404_model_not_found(http) -> None:
    response = http.post(CHAT, json={"model": "m" * 100_000, "messages": []})
    assert_envelope_a(response, 404, "invalid_request_error", code="model_not_found")


@pytest.mark.parametrize(
    "request_id",
    [b"\xff\xfe\xfd", b"a" * 200, "ид-запроса".encode(), b"has space", b"semi;colon"],
    ids=["invalid-utf8", "very-long", "cyrillic", "space", "semicolon"],
)
def test_odd_request_id_header_is_replaced_not_refused(http, alpha, request_id) -> None:
    response = http.post(
        CHAT,
        json={"model": "gpt-test", "messages": [{"role": "user", "content": "x"}]},
        headers=[(b"x-request-id", request_id)],
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"].startswith("req_")
    assert alpha.requests_to(CHAT)[0].headers["x-request-id"] == response.headers["x-request-id"]


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "garbage/;;;"],
)
def test_json_route_with_an_odd_content_type_is_never_a_500(http, content_type) -> None:
    body = orjson.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": "x"}]})
    response = http.post(CHAT, content=body, headers={"content-type": content_type})
    assert_no_traceback(response)


@pytest.mark.parametrize(
    "body",
    [
        b"not multipart at all",
        b'--x\r\nContent-Disposition: form-data; name="model"\r\n\r\ngpt-test\r\n',  # no closing boundary
        b"--x\r\nno header block",
        b"",
    ],
    ids=["not-multipart", "unterminated", "no-header-block", "empty"],
)
def test_malformed_multipart_is_400(http, body) -> None:
    response = http.post(
        "/v1/audio/transcriptions", content=body, headers={"content-type": "multipart/form-data; boundary=x"}
    )
    assert_envelope_a(response, 400, "invalid_request_error")


def test_multipart_without_boundary_is_400(http) -> None:
    response = http.post(
        "/v1/images/edits", content=b"--x--\r\n", headers={"content-type": "multipart/form-data"}
    )
    assert_envelope_a(response, 400, "invalid_request_error")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions/../../api/overview",
        "/v1/%00",
        "/v1/responses/%FF%FE",
        "/v1/models/%F0%9F%9A%80",
        "/v1/" + "a/" * 2000,
    ],
)
def test_odd_paths_are_never_a_500(http, path) -> None:
    assert_no_traceback(http.get(path))


# -- NUL and invalid UTF-8 in ids, query values and stored fields, on both storage backends ----------------

# Every model route with an id in its path, and the model routes that read query values.
ID_PATHS = [
    ("GET", "/v1/responses/{id}"),
    ("DELETE", "/v1/responses/{id}"),
    ("GET", "/v1/models/{id}"),
    ("GET", "/v1/videos/{id}"),
    ("DELETE", "/v1/videos/{id}"),
    ("GET", "/v1/videos/{id}/content"),
]
QUERY_PATHS = [
    ("GET", "/v1/videos?after={id}"),
    ("GET", "/v1/videos?order={id}"),
    ("GET", "/v1/models?after_id={id}"),
    ("GET", "/v1/videos/video_1/content?variant={id}"),
    ("GET", "/v1/realtime?client_secret={id}&model=gpt-test"),
]
UNSTORABLE = {"nul": "%00", "nul-inside": "resp_a%00b", "invalid-utf8": "%ff", "overlong-utf8": "%c0%80"}


@pytest.fixture
def storage_http(storage_url, tmp_path, upstreams, tenant_on) -> Iterator[httpx.Client]:
    """Raw HTTP with a tenant's key to a gateway of its own on each storage backend."""
    toml = gateway_toml(storage_url, *upstreams)
    with ThreadedGateway(write_config(tmp_path / "modelgate.toml", toml)) as running:
        yield tenant_on(running)


def test_nul_or_invalid_utf8_in_a_path_id_or_query_value_is_400_on_every_route(storage_http) -> None:
    for method, template in ID_PATHS + QUERY_PATHS:
        for label, value in UNSTORABLE.items():
            response = storage_http.request(method, template.format(id=value))
            assert response.status_code == 400, (method, template, label, response.text)
            assert_envelope_a(response, 400, "invalid_request_error")


def test_nul_in_a_query_value_on_messages_is_400_in_envelope_b(storage_http) -> None:
    response = storage_http.post(
        "/v1/messages?beta=%00",
        json={"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        headers={"anthropic-version": "2023-06-01"},
    )
    assert_envelope_b(response, 400, "invalid_request_error")


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        (CHAT, {"model": "gpt-test\u0000"}),
        (CHAT, {"user": "end-user\u0000"}),
        (CHAT, {"metadata": {"team\u0000": "a"}}),
        (CHAT, {"metadata": {"team": "a\u0000"}}),
        ("/v1/responses", {"previous_response_id": "resp_a\u0000"}),
        ("/v1/responses", {"conversation": {"id": "conv_a\u0000"}}),
        ("/v1/responses", {"safety_identifier": "\u0000"}),
    ],
    ids=["model", "user", "metadata-key", "metadata-value", "previous-response", "conversation", "safety-id"],
)
def test_nul_in_a_field_that_is_stored_or_looked_up_is_400(storage_http, alpha, path, fields) -> None:
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "x"}], "input": "x", **fields}
    response = storage_http.post(path, json=body)
    error = assert_envelope_a(response, 400, "invalid_request_error")
    assert "NUL" in error["message"]
    assert alpha.requests == []


def test_nul_in_prompt_text_is_forwarded_on_each_backend(storage_http, alpha) -> None:
    text = "before \u0000 after"
    response = storage_http.post(
        CHAT, json={"model": "gpt-test", "messages": [{"role": "user", "content": text}]}
    )
    assert response.status_code == 200, response.text
    assert alpha.requests_to(CHAT)[0].json["messages"][0]["content"] == text
