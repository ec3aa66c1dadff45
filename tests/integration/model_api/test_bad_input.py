"""Hostile or odd input never gets a 500 or a traceback: it is either served or refused with a 4xx in the
route's envelope."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.integration.model_api.error_bodies import assert_envelope_a

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
