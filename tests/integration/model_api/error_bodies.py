"""Exact checks of the model API's two error envelopes, as the description's tables give them."""

from __future__ import annotations

from typing import Any

import httpx


def assert_envelope_a(
    response: httpx.Response,
    status: int,
    error_type: str,
    code: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """`{"error": {"message", "type", "code"?}}`; the `code` key is absent when the table names none."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"], body
    error = body["error"]
    assert set(error) == ({"message", "type", "code"} if code else {"message", "type"}), error
    assert error["type"] == error_type
    if code:
        assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in error["message"]
    if message is not None:
        assert error["message"] == message
    return error


def assert_envelope_b(
    response: httpx.Response, status: int, error_type: str, message: str | None = None
) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"type", "error"}, body
    assert body["type"] == "error"
    error = body["error"]
    assert set(error) == {"type", "message"}, error
    assert error["type"] == error_type
    assert isinstance(error["message"], str) and error["message"]
    if message is not None:
        assert error["message"] == message
    return error
