"""When providers fail, tenants are told only that the model is unavailable (502/503 upstream_unavailable,
in their envelope); which provider, host and row failed, and how, goes to the operator's log: one warning
line per failed attempt.
"""

from __future__ import annotations

import logging
import socket

import orjson
import pytest

from modelgate.domain.errors import SERVICE_UNAVAILABLE_MESSAGE, UPSTREAM_UNAVAILABLE_MESSAGE
from tests.fakes import Fault
from tests.integration.model_api.conftest import UPSTREAM_KEY
from tests.integration.model_api.error_bodies import assert_envelope_a, assert_envelope_b

CHAT = "/v1/chat/completions"
BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "hello there"}]}
MESSAGE = {"model": "claude-test", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
SHORT_TIMEOUT = 0.5
# Provider, host and upstream model names of the rows these tests fail; none may reach a tenant.
PROVIDER_DETAILS = ("alpha", "beta", "claude", "dead", "localhost", "127.0.0.1", "upstream", "Error", "Errno")


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="modelgate.forward")
    return caplog


def _attempt_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "modelgate.forward"]


def _tells_nothing_of_the_provider(message: str) -> None:
    assert message == UPSTREAM_UNAVAILABLE_MESSAGE
    assert not [detail for detail in PROVIDER_DETAILS if detail.lower() in message.lower()]


def test_a_refused_connection_is_a_neutral_502_and_a_log_line_naming_the_row(
    gateway_with, tenant_on, warnings
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nobody listens there
    extra = f"""
[[providers]]
name = "dead"
kind = "openai"
base_url = "http://127.0.0.1:{port}/v1"
api_key = "{UPSTREAM_KEY}"

[[models]]
name = "dead-only"
kinds = ["chat"]
[[models.rows]]
provider = "dead"
upstream_model = "dead-upstream"
"""
    http = tenant_on(gateway_with(extra=extra))
    error = assert_envelope_a(
        http.post(CHAT, json={**BODY, "model": "dead-only"}), 502, "server_error", code="upstream_unavailable"
    )

    _tells_nothing_of_the_provider(error["message"])
    [line] = _attempt_lines(warnings)
    assert "dead/dead-upstream@127.0.0.1" in line and "provider dead" in line
    assert "ConnectionRefusedError" in line
    assert UPSTREAM_KEY not in warnings.text


def test_every_row_answering_500_is_a_neutral_502_with_a_line_per_attempt(
    http, alpha, beta, warnings
) -> None:
    alpha.add_fault(CHAT, Fault(status=500))
    beta.add_fault(CHAT, Fault(status=500))
    error = assert_envelope_a(http.post(CHAT, json=BODY), 502, "server_error", code="upstream_unavailable")

    _tells_nothing_of_the_provider(error["message"])
    lines = _attempt_lines(warnings)
    assert len(lines) == 2
    assert "alpha/gpt-upstream-a@127.0.0.1" in lines[0] and "answered HTTP 500" in lines[0]
    assert "beta/gpt-upstream-b@localhost" in lines[1] and "answered HTTP 500" in lines[1]


def test_a_first_byte_timeout_on_every_row_is_a_neutral_502(
    gateway_with, tenant_on, alpha, beta, warnings
) -> None:
    http = tenant_on(gateway_with(timeout=SHORT_TIMEOUT))
    alpha.add_fault(CHAT, Fault(hang=True))
    beta.add_fault(CHAT, Fault(hang=True))
    error = assert_envelope_a(http.post(CHAT, json=BODY), 502, "server_error", code="upstream_unavailable")

    _tells_nothing_of_the_provider(error["message"])
    assert [("UpstreamTimeout" in line) for line in _attempt_lines(warnings)] == [True, True]
    assert alpha.wait_cancelled(1) and beta.wait_cancelled(1)


def test_rows_breaking_off_before_their_first_bytes_are_a_neutral_502(http, alpha, beta, warnings) -> None:
    alpha.add_fault(CHAT, Fault(disconnect_after_chunks=0))
    beta.add_fault(CHAT, Fault(disconnect_after_chunks=0))
    error = assert_envelope_a(
        http.post(CHAT, json={**BODY, "stream": True}), 502, "server_error", code="upstream_unavailable"
    )

    _tells_nothing_of_the_provider(error["message"])
    assert ["broke off" in line for line in _attempt_lines(warnings)] == [True, True]


def test_a_stream_broken_midway_ends_with_a_neutral_error_event(http, alpha, warnings) -> None:
    alpha.add_fault(CHAT, Fault(disconnect_after_chunks=2))
    with http.stream("POST", CHAT, json={**BODY, "stream": True}) as reply:
        raw = reply.read()

    last = orjson.loads(raw.strip().split(b"\n")[-1][6:])
    assert last["error"]["code"] == "upstream_unavailable"
    _tells_nothing_of_the_provider(last["error"]["message"])
    [line] = _attempt_lines(warnings)
    assert "alpha/gpt-upstream-a@127.0.0.1" in line and "broke off a stream" in line


def test_every_row_cooling_down_is_a_neutral_503(http, alpha, beta) -> None:
    alpha.add_fault(CHAT, Fault(status=500), times=-1)
    beta.add_fault(CHAT, Fault(status=500), times=-1)
    for _ in range(2):  # two failures each: both rows cool down
        http.post(CHAT, json=BODY)
    error = assert_envelope_a(http.post(CHAT, json=BODY), 503, "server_error", code="upstream_unavailable")
    assert error["message"] == SERVICE_UNAVAILABLE_MESSAGE


def test_a_native_messages_row_failing_is_a_neutral_502_in_envelope_b(http, claude, warnings) -> None:
    claude.add_fault("/v1/messages", Fault(status=500))
    reply = http.post("/v1/messages", json=MESSAGE, headers={"anthropic-version": "2023-06-01"})

    error = assert_envelope_b(reply, 502, "api_error")
    _tells_nothing_of_the_provider(error["message"])
    [line] = _attempt_lines(warnings)
    assert "claude/claude-upstream@127.0.0.1" in line


def test_a_providers_own_4xx_message_names_the_gateways_model(http, alpha) -> None:
    refusal = {
        "error": {
            "message": "The model `gpt-upstream-a` does not support tools.",
            "type": "invalid_request_error",
        }
    }
    alpha.add_fault(CHAT, Fault(status=400, body=refusal))
    error = assert_envelope_a(http.post(CHAT, json=BODY), 400, "invalid_request_error")
    assert error["message"] == "The model `gpt-test` does not support tools."
