"""An operator's cap on connections to a provider (`pool_size`): a request over it waits at most
`pool_wait_timeout`, then fails over to the next row or gets 503 with `retry-after` — never an unbounded
wait — and the pool's metrics show the connections in use, the waiting requests and the waits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx

from tests.fakes import Fault
from tests.integration.model_api.error_bodies import assert_envelope_a
from tests.integration.ops.conftest import scrape, wait_until

CHAT = "/v1/chat/completions"
WAIT = 0.3  # pool_wait_timeout of the capped provider
ONE_CONNECTION = f"pool_size = 1\npool_wait_timeout = {WAIT}"
# The gateways name the row's provider in their answers (off by default), which is how these tests see which
# row served.
EXPOSE_PROVIDER = """
[server]
expose_provider_header = true
"""
ALPHA_ONLY = """
[[models]]
name = "alpha-only"
kinds = ["chat"]
[[models.rows]]
provider = "alpha"
upstream_model = "gpt-upstream-a"
"""


def body(model: str = "gpt-test", *, stream: bool = False) -> dict:
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": "one two"}]}


@contextmanager
def stream_held_on(http: httpx.Client, alpha, model: str = "gpt-test") -> Iterator[httpx.Response]:
    """A stream from alpha that holds its only connection until the test releases gate "g"."""
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="g"))
    with http.stream("POST", CHAT, json=body(model, stream=True)) as response:
        assert response.status_code == 200
        assert response.headers["x-modelgate-provider"] == "alpha"
        assert alpha.wait_held("g")
        yield response


def test_a_request_over_the_cap_fails_over_after_pool_wait_timeout(gateway_with, tenant_on, alpha, beta):
    gateway = gateway_with(alpha_options=ONE_CONNECTION, extra=EXPOSE_PROVIDER + ALPHA_ONLY)
    http = tenant_on(gateway)
    with stream_held_on(http, alpha) as held:
        started = time.monotonic()
        over = http.post(CHAT, json=body())
        waited = time.monotonic() - started
        assert over.status_code == 200, over.text
        assert over.headers["x-modelgate-provider"] == "beta"
        assert WAIT <= waited < WAIT + 2.0
        metrics = scrape(gateway.base_url)
        alpha.release("g")
        assert held.read().endswith(b"data: [DONE]\n\n")
    assert len(alpha.requests_to(CHAT)) == 1  # the provider never saw the request that found no connection
    assert metrics.value("modelgate_upstream_connections", upstream="alpha", state="in_use") == 1
    assert metrics.value("modelgate_upstream_pool_limit", upstream="alpha") == 1
    assert metrics.value("modelgate_upstream_pool_wait_timeouts_total", upstream="alpha") == 1
    assert metrics.value("modelgate_upstream_pool_wait_seconds_count", upstream="alpha") == 1
    assert metrics.value("modelgate_upstream_pool_wait_seconds_sum", upstream="alpha") >= WAIT
    assert metrics.value("modelgate_upstream_errors_total", provider="alpha", reason="pool_full") == 1
    uncapped = [s for s in metrics.samples("modelgate_upstream_pool_limit") if s.labels["upstream"] == "beta"]
    assert uncapped == []  # beta has no pool_size: no cap to report


def test_a_full_pool_is_not_a_failing_provider_so_its_row_does_not_cool_down(
    gateway_with, tenant_on, alpha, beta
):
    # failure_threshold is 2: two real failures would take alpha out of rotation for 30 s.
    http = tenant_on(gateway_with(alpha_options=ONE_CONNECTION, extra=EXPOSE_PROVIDER))
    with stream_held_on(http, alpha) as held:
        assert [http.post(CHAT, json=body()).headers["x-modelgate-provider"] for _ in range(2)] == [
            "beta",
            "beta",
        ]
        alpha.release("g")
        held.read()
    assert http.post(CHAT, json=body()).headers["x-modelgate-provider"] == "alpha"


def test_with_no_other_row_a_request_over_the_cap_gets_503_with_retry_after(gateway_with, tenant_on, alpha):
    http = tenant_on(gateway_with(alpha_options=ONE_CONNECTION, extra=EXPOSE_PROVIDER + ALPHA_ONLY))
    with stream_held_on(http, alpha, "alpha-only") as held:
        started = time.monotonic()
        refused = http.post(CHAT, json=body("alpha-only"))
        waited = time.monotonic() - started
        alpha.release("g")
        held.read()
    assert_envelope_a(refused, 503, "server_error", "upstream_unavailable")
    assert refused.headers["retry-after"] == "1"
    assert WAIT <= waited < WAIT + 2.0


def test_a_waiting_request_is_a_metric_and_takes_the_connection_freed_within_its_wait(
    gateway_with, tenant_on, alpha
):
    gateway = gateway_with(
        alpha_options="pool_size = 1\npool_wait_timeout = 30", extra=EXPOSE_PROVIDER + ALPHA_ONLY
    )
    http = tenant_on(gateway)

    def waiting() -> float:
        return scrape(gateway.base_url).value("modelgate_upstream_pool_waiting", upstream="alpha")

    with ThreadPoolExecutor(1) as pool, stream_held_on(http, alpha, "alpha-only") as held:
        queued = pool.submit(http.post, CHAT, json=body("alpha-only"))
        assert wait_until(lambda: waiting() == 1)
        alpha.release("g")
        held.read()
        served = queued.result(timeout=10)
    assert served.status_code == 200, served.text
    metrics = scrape(gateway.base_url)
    assert metrics.value("modelgate_upstream_pool_waiting", upstream="alpha") == 0
    assert metrics.value("modelgate_upstream_pool_wait_seconds_count", upstream="alpha") == 1
    assert metrics.value("modelgate_upstream_pool_wait_timeouts_total", upstream="alpha") == 0
    assert metrics.value("modelgate_upstream_connections", upstream="alpha", state="idle") == 1
    assert len(alpha.requests_to(CHAT)) == 2  # one kept-alive connection served both, in turn
