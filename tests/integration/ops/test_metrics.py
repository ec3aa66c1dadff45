"""GET /metrics: Prometheus text that follows successes, refusals and upstream failures."""

from __future__ import annotations

from pathlib import Path

import httpx

from modelgate.proxy.observability.metrics import GatewayMetrics
from modelgate.proxy.realtime.relay import RealtimeSessions
from tests.fakes import FakeUpstream, Fault
from tests.integration.ops.conftest import METRICS_TOKEN, Scrape, chat, ops_toml, scrape, wait_until
from tests.support.gateway import ThreadedGateway, register_tenant, write_config

CHAT_PATH = "/v1/chat/completions"
# A model whose first row is the fake upstream and whose second, failover row is the built-in mock.
DUO = """
[[models]]
name = "duo"
kinds = ["chat"]
[[models.rows]]
provider = "fake"
upstream_model = "gpt-4o-mini"
[[models.rows]]
provider = "mock"
priority = 1
"""


def test_counters_follow_successes_refusals_and_upstream_failures(
    tmp_path: Path, sqlite_url: str, upstream: FakeUpstream
) -> None:
    config = write_config(
        tmp_path / "m.toml", ops_toml(sqlite_url, upstream, models=DUO, per_request_usd=1.0)
    )
    with ThreadedGateway(config) as gateway:
        base = gateway.base_url
        rich = register_tenant(base)
        poor = register_tenant(base, fund_usd=0.5)
        tight = register_tenant(base, plan="tight")

        assert chat(base, rich).status_code == 200
        assert chat(base, rich, model="chat").status_code == 200
        assert chat(base, rich, model="chat", stream=True).status_code == 200
        assert chat(base, None).status_code == 401
        assert chat(base, poor).status_code == 402
        assert [chat(base, tight).status_code for _ in range(2)] == [200, 429]
        upstream.add_fault(CHAT_PATH, Fault(status=500))
        assert chat(base, rich, model="duo").status_code == 200  # failed over to the mock row
        upstream.add_fault(CHAT_PATH, Fault(status=503))
        assert chat(base, rich, model="chat").status_code == 502  # its only row failed

        metrics = scrape(base)

    requests = "modelgate_requests_total"
    assert metrics.value(requests, model="echo", row="mock/echo@mock", status="200") == 2
    assert metrics.value(requests, model="chat", row="fake/gpt-4o-mini@127.0.0.1", status="200") == 2
    assert metrics.value(requests, route="chat_completions", status="401") == 1
    assert metrics.value(requests, model="echo", status="402") == 1
    assert metrics.value(requests, model="echo", status="429") == 1
    assert metrics.value(requests, model="duo", row="mock/duo@mock", status="200") == 1
    assert metrics.value(requests, model="chat", row="", status="502") == 1

    rejections = "modelgate_rejections_total"
    assert metrics.value(rejections, status="401", reason="authentication") == 1
    assert metrics.value(rejections, status="402", reason="insufficient_balance") == 1
    assert metrics.value(rejections, status="429", reason="rate_limit") == 1
    assert metrics.value("modelgate_upstream_errors_total", provider="fake", reason="http_500") == 1
    assert metrics.value("modelgate_upstream_errors_total", provider="fake", reason="http_503") == 1
    assert metrics.value("modelgate_failovers_total", model="duo") == 1
    assert metrics.value("modelgate_tokens_total", model="chat", kind="output") > 0

    # Histograms: one observation per request, first bytes only for answers that came from upstream.
    assert metrics.value("modelgate_request_duration_seconds_count", model="echo") == 4
    assert metrics.value("modelgate_request_duration_seconds_bucket", model="chat", le="+Inf") == 3
    assert metrics.value("modelgate_time_to_first_byte_seconds_count", model="chat") == 2
    assert metrics.value("modelgate_time_to_first_byte_seconds_count", model="echo") == 2
    for gauge in (
        "modelgate_active_streams",
        "modelgate_realtime_sessions",
        "modelgate_requests_in_flight",
        "modelgate_ledger_queue_depth",
        "modelgate_ledger_flush_lag_seconds",
        "process_resident_memory_bytes",
    ):
        assert metrics.has(gauge), gauge
    assert metrics.value("modelgate_realtime_sessions") == 0
    assert 0 <= metrics.value("modelgate_ledger_flush_lag_seconds") < 10


def test_active_streams_gauge_counts_a_stream_while_it_is_relayed(
    tmp_path: Path, sqlite_url: str, upstream: FakeUpstream
) -> None:
    config = write_config(tmp_path / "s.toml", ops_toml(sqlite_url, upstream))
    with ThreadedGateway(config) as gateway:
        tenant = register_tenant(gateway.base_url)
        upstream.add_fault(CHAT_PATH, Fault(hold_before_last_chunk="gauge"))
        body = {"model": "chat", "stream": True, "messages": [{"role": "user", "content": "a b c"}]}
        with httpx.stream(
            "POST",
            f"{gateway.base_url}{CHAT_PATH}",
            json=body,
            headers={"authorization": f"Bearer {tenant.api_key}"},
            timeout=30,
        ) as reply:
            chunks = reply.iter_bytes()
            next(chunks)
            assert upstream.wait_held("gauge", timeout=10)
            during = scrape(gateway.base_url)
            upstream.release("gauge")
            assert b"".join(chunks).rstrip().endswith(b"data: [DONE]")

        assert during.value("modelgate_active_streams") == 1
        assert during.value("modelgate_requests_in_flight") == 1
        assert wait_until(lambda: scrape(gateway.base_url).value("modelgate_active_streams") == 0)
        assert scrape(gateway.base_url).value("modelgate_requests_in_flight") == 0


def test_ledger_queue_drains_to_zero_after_a_flush(tmp_path: Path, sqlite_url: str) -> None:
    config = write_config(tmp_path / "l.toml", ops_toml(sqlite_url))
    with ThreadedGateway(config) as gateway:
        tenant = register_tenant(gateway.base_url)
        assert [chat(gateway.base_url, tenant).status_code for _ in range(3)] == [200] * 3
        assert wait_until(lambda: scrape(gateway.base_url).value("modelgate_ledger_queue_depth") == 0)


def test_metrics_token_is_required_when_configured(tmp_path: Path, sqlite_url: str) -> None:
    toml = ops_toml(sqlite_url, server=f'metrics_token = "{METRICS_TOKEN}"')
    with ThreadedGateway(write_config(tmp_path / "t.toml", toml)) as gateway:
        url = f"{gateway.base_url}/metrics"
        missing = httpx.get(url, timeout=10)
        wrong = httpx.get(url, headers={"authorization": f"Bearer {METRICS_TOKEN}x"}, timeout=10)
        scheme = httpx.get(url, headers={"authorization": f"Basic {METRICS_TOKEN}"}, timeout=10)

        assert (missing.status_code, wrong.status_code, scheme.status_code) == (401, 401, 401)
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert "modelgate_requests" not in missing.text
        assert scrape(gateway.base_url, token=METRICS_TOKEN).has("modelgate_worker_info")
        assert httpx.get(f"{gateway.base_url}/healthz", timeout=10).status_code == 200


def test_metrics_are_open_without_a_token(tmp_path: Path, sqlite_url: str) -> None:
    with ThreadedGateway(write_config(tmp_path / "o.toml", ops_toml(sqlite_url))) as gateway:
        assert scrape(gateway.base_url).has("modelgate_worker_info")
        assert scrape(gateway.base_url).value("modelgate_listen_queue_connections") == 0  # every one taken


def test_realtime_sessions_gauge_counts_the_open_sessions() -> None:
    metrics, sessions = GatewayMetrics(), RealtimeSessions()
    metrics.watch_realtime(sessions)
    client = object()  # stands in for the WebSocket of an open session

    sessions.add(client)
    during = Scrape(metrics.render().decode())
    sessions.discard(client)
    after = Scrape(metrics.render().decode())

    assert (during.value("modelgate_realtime_sessions"), after.value("modelgate_realtime_sessions")) == (1, 0)
