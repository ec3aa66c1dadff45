"""Routing rows: priority, weighted choice, failover before the first byte, cool-down, 502 and 503."""

from __future__ import annotations

import socket
import time

import pytest

from tests.fakes import Fault
from tests.integration.model_api.conftest import UPSTREAM_KEY, gateway_toml
from tests.integration.model_api.error_bodies import assert_envelope_a
from tests.support.gateway import ThreadedGateway, write_config

CHAT = "/v1/chat/completions"
BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "route me"}]}
FOREVER = -1
SHORT_TIMEOUT = 0.5


def closed_port() -> int:
    """A loopback port nobody listens on: connecting to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dead_provider_toml() -> str:
    """A provider on a closed port, a model whose first row is on it, and one whose only row is."""
    return f"""
[[providers]]
name = "dead"
kind = "openai"
base_url = "http://127.0.0.1:{closed_port()}/v1"
api_key = "{UPSTREAM_KEY}"
connect_timeout = 2.0

[[models]]
name = "dead-first"
kinds = ["chat"]
[[models.rows]]
provider = "dead"
priority = 0
[[models.rows]]
provider = "alpha"
priority = 1

[[models]]
name = "dead-only"
kinds = ["chat"]
[[models.rows]]
provider = "dead"
"""


# The module's gateways name the row's provider in their answers (off by default), which is how these tests
# see which row served.
EXPOSE_PROVIDER = """
[server]
expose_provider_header = true
"""


@pytest.fixture
def gateway(tmp_path, upstreams):
    toml = gateway_toml(f"sqlite:///{tmp_path / 'gw.db'}", *upstreams, extra=EXPOSE_PROVIDER)
    with ThreadedGateway(write_config(tmp_path / "modelgate.toml", toml)) as running:
        yield running


@pytest.fixture
def gateway_with(gateway_with):
    def start(extra: str = "", **options) -> ThreadedGateway:
        return gateway_with(extra=extra + EXPOSE_PROVIDER, **options)

    return start


def served_by(response) -> str:
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "echo: route me"
    return response.headers["x-modelgate-provider"]


def test_priority_0_row_serves_while_healthy(http, alpha, beta) -> None:
    assert served_by(http.post(CHAT, json=BODY)) == "alpha"
    assert len(alpha.requests_to(CHAT)) == 1
    assert beta.requests_to(CHAT) == []


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_failover_to_the_priority_1_row_on_upstream_status(http, alpha, beta, status) -> None:
    alpha.add_fault(CHAT, Fault(status=status))
    assert served_by(http.post(CHAT, json=BODY)) == "beta"
    assert len(alpha.requests_to(CHAT)) == 1
    [sent] = beta.requests_to(CHAT)
    assert sent.json["model"] == "gpt-upstream-b"


def test_failover_on_first_byte_timeout(gateway_with, tenant_on, alpha, beta) -> None:
    gateway = gateway_with(timeout=SHORT_TIMEOUT)
    http = tenant_on(gateway)
    alpha.add_fault(CHAT, Fault(hang=True))
    assert served_by(http.post(CHAT, json=BODY)) == "beta"
    assert len(alpha.requests_to(CHAT)) == 1


def test_failover_on_connection_refused(gateway_with, tenant_on, alpha) -> None:
    http = tenant_on(gateway_with(extra=dead_provider_toml()))
    assert served_by(http.post(CHAT, json={**BODY, "model": "dead-first"})) == "alpha"
    assert alpha.requests_to(CHAT)[0].json["model"] == "dead-first"


def test_streamed_request_fails_over_before_the_first_byte(http, alpha, beta) -> None:
    alpha.add_fault(CHAT, Fault(status=500))
    with http.stream("POST", CHAT, json={**BODY, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["x-modelgate-provider"] == "beta"
        body = response.read()
    assert b"route" in body and body.endswith(b"data: [DONE]\n\n")
    assert len(alpha.requests_to(CHAT)) == 1


def test_stream_broken_off_before_its_first_chunk_fails_over(http, alpha, beta) -> None:
    alpha.add_fault(CHAT, Fault(disconnect_after_chunks=0))  # 200 head, then the connection drops
    with http.stream("POST", CHAT, json={**BODY, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["x-modelgate-provider"] == "beta"
        body = response.read()
    assert body.endswith(b"data: [DONE]\n\n") and b'"error"' not in body
    assert len(alpha.requests_to(CHAT)) == 1


def test_upstream_400_on_a_streamed_request_is_a_json_error_not_a_stream(http, alpha, beta) -> None:
    alpha.add_fault(CHAT, Fault(status=400))
    response = http.post(CHAT, json={**BODY, "stream": True})
    assert_envelope_a(
        response, 400, "invalid_request_error", message="fake upstream 'alpha': injected HTTP 400"
    )
    assert beta.requests_to(CHAT) == []


def test_upstream_400_is_passed_on_with_its_status_and_message(http, alpha, beta) -> None:
    alpha.add_fault(
        CHAT,
        Fault(
            status=400,
            body={
                "error": {
                    "message": "Invalid 'temperature': must be at most 2.",
                    "type": "invalid_request_error",
                    "param": "temperature",
                    "code": None,
                }
            },
        ),
    )
    response = http.post(CHAT, json=BODY)
    assert_envelope_a(
        response, 400, "invalid_request_error", message="Invalid 'temperature': must be at most 2."
    )
    assert beta.requests_to(CHAT) == []  # the client's fault: no failover


def test_upstream_400_code_is_kept(http, alpha) -> None:
    alpha.add_fault(
        CHAT,
        Fault(
            status=400,
            body={
                "error": {
                    "message": "context too long",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        ),
    )
    response = http.post(CHAT, json=BODY)
    assert_envelope_a(
        response, 400, "invalid_request_error", code="context_length_exceeded", message="context too long"
    )


def test_every_row_answering_500_is_502_upstream_unavailable(http, alpha, beta) -> None:
    alpha.add_fault(CHAT, Fault(status=500))
    beta.add_fault(CHAT, Fault(status=500))
    assert_envelope_a(http.post(CHAT, json=BODY), 502, "server_error", code="upstream_unavailable")
    assert len(alpha.requests_to(CHAT)) == 1
    assert len(beta.requests_to(CHAT)) == 1


def test_connection_refused_on_every_row_is_502_upstream_unavailable(gateway_with, tenant_on) -> None:
    http = tenant_on(gateway_with(extra=dead_provider_toml()))
    response = http.post(CHAT, json={**BODY, "model": "dead-only"})
    assert_envelope_a(response, 502, "server_error", code="upstream_unavailable")


def test_first_byte_timeout_on_every_row_is_502_upstream_unavailable(
    gateway_with, tenant_on, alpha, beta
) -> None:
    http = tenant_on(gateway_with(timeout=SHORT_TIMEOUT))
    alpha.add_fault(CHAT, Fault(hang=True))
    beta.add_fault(CHAT, Fault(hang=True))
    assert_envelope_a(http.post(CHAT, json=BODY), 502, "server_error", code="upstream_unavailable")
    assert alpha.wait_cancelled(1) and beta.wait_cancelled(1)  # the gateway let go of both


def test_weighted_choice_between_equal_priority_rows_reaches_both(http, alpha, beta) -> None:
    seen: set[str] = set()
    for _ in range(200):
        seen.add(served_by(http.post(CHAT, json={**BODY, "model": "balanced"})))
        if seen == {"alpha", "beta"}:
            break
    assert seen == {"alpha", "beta"}


def test_row_is_skipped_after_failure_threshold_failures(http, alpha, beta) -> None:
    alpha.add_fault(CHAT, Fault(status=500), times=2)
    for _ in range(2):
        assert served_by(http.post(CHAT, json=BODY)) == "beta"
    assert len(alpha.requests_to(CHAT)) == 2
    assert served_by(http.post(CHAT, json=BODY)) == "beta"
    assert len(alpha.requests_to(CHAT)) == 2  # cooling down: not even tried
    assert len(beta.requests_to(CHAT)) == 3


def test_a_success_between_failures_keeps_the_row_in_rotation(http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(status=500))
    assert served_by(http.post(CHAT, json=BODY)) == "beta"
    assert served_by(http.post(CHAT, json=BODY)) == "alpha"
    alpha.add_fault(CHAT, Fault(status=500))
    assert served_by(http.post(CHAT, json=BODY)) == "beta"
    assert served_by(http.post(CHAT, json=BODY)) == "alpha"


def test_row_is_tried_again_when_the_cool_down_ends(gateway_with, tenant_on, alpha, beta) -> None:
    cooldown = 0.5
    http = tenant_on(gateway_with(cooldown_seconds=cooldown))
    alpha.add_fault(CHAT, Fault(status=500), times=2)
    for _ in range(2):
        assert served_by(http.post(CHAT, json=BODY)) == "beta"
    cooled_at = time.monotonic()
    assert served_by(http.post(CHAT, json=BODY)) == "beta"
    assert len(alpha.requests_to(CHAT)) == 2
    # The cool-down is a duration: letting it pass is the behaviour under test, not synchronisation.
    time.sleep(max(0.0, cooled_at + cooldown - time.monotonic()) + 0.05)
    assert served_by(http.post(CHAT, json=BODY)) == "alpha"
    assert len(alpha.requests_to(CHAT)) == 3


def test_every_row_cooling_down_is_503_upstream_unavailable(http, alpha, beta) -> None:
    alpha.add_fault(CHAT, Fault(status=500), times=FOREVER)
    beta.add_fault(CHAT, Fault(status=500), times=FOREVER)
    for _ in range(2):
        assert_envelope_a(http.post(CHAT, json=BODY), 502, "server_error", code="upstream_unavailable")
    tried = len(alpha.requests) + len(beta.requests)
    assert_envelope_a(http.post(CHAT, json=BODY), 503, "server_error", code="upstream_unavailable")
    assert len(alpha.requests) + len(beta.requests) == tried
