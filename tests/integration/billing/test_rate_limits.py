"""RPM/TPM limits: 429 with retry-after and consistent x-ratelimit headers, exact across processes."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import anthropic
import httpx
import openai
import orjson
import pytest

from modelgate.storage import open_database
from tests.integration.billing.conftest import billing_toml
from tests.integration.ops.conftest import scrape, wait_until
from tests.support.gateway import GatewayProcess, ThreadedGateway, register_tenant


def _post(gateway, tenant, body: dict, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}{path}",
        content=orjson.dumps(body),
        timeout=30,
        headers={"authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
    )


CHAT = {"model": "metered", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def test_requests_past_the_rpm_limit_get_429_with_retry_after(start_gateway) -> None:
    gateway = start_gateway(rpm=3)
    tenant = register_tenant(gateway.base_url)
    assert [_post(gateway, tenant, CHAT).status_code for _ in range(3)] == [200, 200, 200]
    refused = _post(gateway, tenant, CHAT)
    assert refused.status_code == 429
    assert refused.json() == {
        "error": {
            "message": refused.json()["error"]["message"],
            "type": "rate_limit_error",
            "code": "rate_limit_exceeded",
        }
    }
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"


def test_rate_limit_errors_on_messages_use_envelope_b(single_backend_gateway) -> None:
    gateway = single_backend_gateway(rpm=1)
    tenant = register_tenant(gateway.base_url)
    body = {"model": "metered", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    assert _post(gateway, tenant, body, "/v1/messages").status_code == 200
    refused = _post(gateway, tenant, body, "/v1/messages")
    assert refused.status_code == 429
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "rate_limit_error"


def test_rate_limit_headers_count_down_consistently(single_backend_gateway) -> None:
    gateway = single_backend_gateway(rpm=5, tpm=100_000)
    tenant = register_tenant(gateway.base_url)
    remaining = []
    for _ in range(3):
        reply = _post(gateway, tenant, CHAT)
        assert reply.headers["x-ratelimit-limit-requests"] == "5"
        assert reply.headers["x-ratelimit-limit-tokens"] == "100000"
        assert reply.headers["x-ratelimit-reset-requests"].endswith("s")
        remaining.append(int(reply.headers["x-ratelimit-remaining-requests"]))
    assert remaining == [4, 3, 2]


def _estimate(body: dict) -> int:
    """The gateway's up-front token estimate: body bytes / 2 + 1, plus the output allowance."""
    return len(orjson.dumps(body)) // 2 + 1 + body["max_tokens"]


def test_tpm_is_corrected_to_the_real_usage_of_a_stream(start_gateway) -> None:
    tpm = 10_000
    gateway = start_gateway(tpm=tpm)
    tenant = register_tenant(gateway.base_url)
    streamed = {
        "model": "metered",
        "stream": True,
        "max_tokens": 500,
        "messages": [{"role": "user", "content": "one two three"}],
    }
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/v1/chat/completions",
        content=orjson.dumps(streamed),
        headers={"authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
        timeout=30,
    ) as reply:
        assert int(reply.headers["x-ratelimit-remaining-tokens"]) == tpm - _estimate(streamed)
        body = reply.read()
    # The gateway asked upstream for usage; the client, who did not, never sees the usage-only chunk.
    assert b'"usage"' not in body
    assert body.rstrip().endswith(b"data: [DONE]")
    # Mock usage: 3 words + 3 per message in, "echo: one two three" = 4 words out.
    actual = 6 + 4
    second = _post(gateway, tenant, CHAT)
    assert int(second.headers["x-ratelimit-remaining-tokens"]) == tpm - actual - _estimate(CHAT)


def test_a_client_that_asks_for_stream_usage_still_gets_it(single_backend_gateway) -> None:
    gateway = single_backend_gateway(tpm=10_000)
    tenant = register_tenant(gateway.base_url)
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    reply = _post(gateway, tenant, body)
    assert b'"usage"' in reply.content


def _model_requests_logged(caplog: pytest.LogCaptureFixture) -> list[dict]:
    """The access-log lines of model API requests: one per request that reached the gateway."""
    return [r.fields for r in caplog.records if r.name == "modelgate.access" and hasattr(r, "fields")]


def _refused_once(
    caplog: pytest.LogCaptureFixture, gateway: ThreadedGateway, call, error: type[Exception]
) -> httpx.Response:
    """Make an SDK call that fails with `error`; the access log shows whether the SDK retried it."""
    with pytest.raises(error) as refused:
        call()
    # An answer goes out before its request's completion phase writes the access line: read the log once
    # no request is in the gateway any more.
    assert wait_until(lambda: scrape(gateway.base_url).value("modelgate_requests_in_flight") == 0)
    assert [line["status"] for line in _model_requests_logged(caplog)] == [429]  # no retry reached us
    return refused.value.response


_RETRY_HINTS = ("retry-after", "retry-after-ms", "x-ratelimit-reset-tokens", "x-ratelimit-reset-requests")


def test_a_request_over_the_tpm_limit_on_its_own_is_refused_once_without_retry_hints(
    start_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelgate.access")
    gateway = start_gateway(tpm=1000)
    tenant = register_tenant(gateway.base_url)
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=2)
    reply = _refused_once(
        caplog,
        gateway,
        lambda: client.chat.completions.create(
            model="metered", messages=[{"role": "user", "content": "hi"}], max_tokens=5000
        ),
        openai.RateLimitError,
    )
    assert not [name for name in _RETRY_HINTS if name in reply.headers]
    error = reply.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
    assert "more than the TPM limit of 1000" in error["message"]
    assert "lower max_tokens" in error["message"]
    assert _post(gateway, tenant, {**CHAT, "max_tokens": 900}).status_code == 200  # one that fits passes


def test_a_messages_request_over_the_tpm_limit_is_not_retried_by_the_anthropic_sdk(
    single_backend_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelgate.access")
    gateway = single_backend_gateway(tpm=1000)
    tenant = register_tenant(gateway.base_url)
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=2)
    reply = _refused_once(
        caplog,
        gateway,
        lambda: client.messages.create(
            model="metered", max_tokens=5000, messages=[{"role": "user", "content": "hi"}]
        ),
        anthropic.RateLimitError,
    )
    assert "retry-after" not in reply.headers
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    assert "more than the TPM limit of 1000" in body["error"]["message"]


def _two_process_config(tmp_path: Path, storage_url: str, redis_url: str) -> Path:
    path = tmp_path / "shared.toml"
    path.write_text(billing_toml(storage_url, redis_url, rpm=10, flush_interval=0.2))
    return path


def test_two_gateway_processes_share_one_rpm_limit_and_one_ledger(
    tmp_path: Path, pg_server_url: str, redis_url: str
) -> None:
    config = _two_process_config(tmp_path, pg_server_url, redis_url)
    with GatewayProcess(config, cwd=tmp_path) as first, GatewayProcess(config, cwd=tmp_path) as second:
        tenant = register_tenant(first.base_url)
        statuses = [_post((first, second)[i % 2], tenant, CHAT).status_code for i in range(20)]
        first.terminate()
        second.terminate()
        assert first.wait(timeout=30) == 0 and second.wait(timeout=30) == 0
    assert statuses.count(200) == 10
    assert statuses.count(429) == 10

    async def served() -> int:
        db = await open_database(pg_server_url)
        try:
            return await db.fetchval(
                "SELECT COUNT(*) FROM usage_ledger l JOIN users u ON u.organization_id = l.organization_id"
                " WHERE u.email = $1 AND l.status = 200",
                tenant.email,
            )
        finally:
            await db.close()

    assert asyncio.run(served()) == 10


def _dead_redis_gateway(tmp_path: Path, fail_open: bool):
    from tests.support.gateway import ThreadedGateway, free_port, write_config

    toml = billing_toml(f"sqlite:///{tmp_path / 'dead.db'}", f"redis://127.0.0.1:{free_port()}/0", rpm=5)
    toml = toml.replace("[redis]\n", f"[redis]\nfail_open = {'true' if fail_open else 'false'}\n")
    return ThreadedGateway(write_config(tmp_path / "dead.toml", toml))


def test_with_redis_down_and_fail_closed_requests_get_503(tmp_path: Path) -> None:
    with _dead_redis_gateway(tmp_path, fail_open=False) as gateway:
        tenant = register_tenant(gateway.base_url)
        reply = _post(gateway, tenant, CHAT)
        assert reply.status_code == 503
        assert reply.json()["error"]["code"] == "upstream_unavailable"
        ready = httpx.get(f"{gateway.base_url}/readyz", timeout=10)
        assert ready.status_code == 503
        assert ready.json()["checks"]["redis"].startswith("unavailable")


def test_with_redis_down_and_fail_open_requests_pass_without_limits(tmp_path: Path) -> None:
    with _dead_redis_gateway(tmp_path, fail_open=True) as gateway:
        tenant = register_tenant(gateway.base_url)
        assert [_post(gateway, tenant, CHAT).status_code for _ in range(7)] == [200] * 7
