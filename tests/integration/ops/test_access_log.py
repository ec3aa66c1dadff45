"""Structured logs: one JSON access line per model API request, with no secret and no prompt in them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx
import orjson
import pytest

from tests.fakes import FakeUpstream
from tests.integration.ops.conftest import UPSTREAM_KEY, chat, ops_toml, stop_and_collect, wait_until
from tests.support.gateway import GatewayProcess, ThreadedGateway, register_tenant, write_config


def _json_lines(output: str) -> list[dict]:
    lines = [line for line in output.splitlines() if line.strip()]
    return [orjson.loads(line) for line in lines]  # every line the gateway writes is one JSON object


def test_access_log_is_one_json_line_per_request_without_secrets_or_prompts(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    config = tmp_path / "log.toml"
    config.write_text(
        ops_toml(f"sqlite:///{tmp_path / 'log.db'}", upstream, logging='level = "info"', per_request_usd=0.25)
    )
    prompt = "PROMPT-SENTINEL-" + os.urandom(8).hex()
    wrong_secret = "sk-" + os.urandom(24).hex()
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    try:
        tenant = register_tenant(gateway.base_url)
        served = chat(gateway.base_url, tenant, model="chat", text=prompt)
        streamed = chat(gateway.base_url, tenant, model="chat", text=prompt, stream=True)
        refused = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            json={"model": "chat", "messages": [{"role": "user", "content": prompt}]},
            headers={"authorization": f"Bearer {wrong_secret}"},
            timeout=30,
        )
        assert (served.status_code, streamed.status_code, refused.status_code) == (200, 200, 401)
        output = stop_and_collect(gateway)
    finally:
        gateway.kill()

    access = {
        line["request_id"]: line for line in _json_lines(output) if line["logger"] == "modelgate.access"
    }
    assert len(access) == 3
    line = access[served.headers["x-request-id"]]
    assert line["level"] == "info"
    assert line["method"] == "POST" and line["path"] == "/v1/chat/completions"
    assert line["organization_id"].startswith("org") and line["key_id"] == tenant.key_id
    assert (line["model"], line["row"], line["provider"]) == ("chat", "fake/gpt-4o-mini@127.0.0.1", "fake")
    assert line["status"] == 200 and line["attempts"] == 1 and line["stream"] is False
    assert 0 < line["ttfb_ms"] <= line["latency_ms"]
    assert line["input_tokens"] > 0 and line["output_tokens"] > 0
    assert line["cost_micros"] == 250_000

    stream_line = access[streamed.headers["x-request-id"]]
    assert stream_line["stream"] is True and stream_line["status"] == 200
    assert 0 < stream_line["ttfb_ms"] <= stream_line["latency_ms"]
    assert stream_line["output_tokens"] > 0

    refused_line = access[refused.headers["x-request-id"]]
    assert refused_line["status"] == 401 and refused_line["error"] == "authentication_error"
    assert refused_line["key_id"] is None and refused_line["organization_id"] is None

    for secret in (tenant.api_key, wrong_secret, UPSTREAM_KEY, prompt):
        assert secret not in output


@pytest.mark.parametrize("log_prompts", [False, True])
def test_request_bodies_are_logged_at_debug_only_with_log_prompts(
    tmp_path: Path, sqlite_url: str, caplog: pytest.LogCaptureFixture, log_prompts: bool
) -> None:
    toml = ops_toml(sqlite_url, logging=f'level = "debug"\nlog_prompts = {str(log_prompts).lower()}')
    caplog.set_level(logging.DEBUG, logger="modelgate.access")
    prompt = "PROMPT-SENTINEL-" + os.urandom(8).hex()
    with ThreadedGateway(write_config(tmp_path / "p.toml", toml)) as gateway:
        tenant = register_tenant(gateway.base_url)
        reply = chat(gateway.base_url, tenant, text=prompt)
        request_id = reply.headers["x-request-id"]
        # Read afresh each time: the line is written in the completion phase, after the answer went out.
        assert wait_until(
            lambda: any(
                r.name == "modelgate.access" and getattr(r, "request_id", None) == request_id
                for r in list(caplog.records)
            )
        )

    bodies = [r for r in caplog.records if r.name == "modelgate.access" and hasattr(r, "body")]
    if log_prompts:
        assert [r.levelno for r in bodies] == [logging.DEBUG]
        assert prompt in bodies[0].body and bodies[0].request_id == request_id
    else:
        assert bodies == []
        assert not any(prompt in r.getMessage() or prompt in str(vars(r)) for r in caplog.records)
