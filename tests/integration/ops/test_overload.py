"""Overload degrades, not collapses: past `server.max_open_requests` a new request is answered 503 with
`retry-after` at once, in its route's envelope, while the open streams carry on to their end; /readyz says
the process is at capacity until a place is free again."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from tests.fakes import FakeUpstream, Fault
from tests.integration.ops.conftest import chat, ops_toml, scrape
from tests.support.gateway import ThreadedGateway, register_tenant, write_config

CHAT_PATH = "/v1/chat/completions"
CAP = 2


def test_past_the_cap_new_requests_get_503_at_once_while_open_streams_continue(
    tmp_path: Path, sqlite_url: str, upstream: FakeUpstream
) -> None:
    config = write_config(
        tmp_path / "m.toml", ops_toml(sqlite_url, upstream, server=f"max_open_requests = {CAP}")
    )
    with ThreadedGateway(config) as gateway, ExitStack() as streams:
        base = gateway.base_url
        tenant = register_tenant(base)
        auth = {"authorization": f"Bearer {tenant.api_key}"}
        upstream.add_fault(CHAT_PATH, Fault(hold_before_last_chunk="g"), times=CAP)
        held = []
        for _ in range(CAP):
            response = streams.enter_context(
                httpx.stream(
                    "POST",
                    f"{base}{CHAT_PATH}",
                    json={"model": "chat", "stream": True, "messages": [{"role": "user", "content": "a b"}]},
                    headers=auth,
                    timeout=30,
                )
            )
            assert response.status_code == 200
            chunks = response.iter_raw()
            held.append((response, next(chunks), chunks))
        assert upstream.wait_active_streams(CAP)

        started = time.monotonic()
        refused = chat(base, tenant)  # the mock model: no upstream connection involved
        refused_in = time.monotonic() - started
        messages = httpx.post(
            f"{base}/v1/messages",
            json={"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": tenant.api_key, "anthropic-version": "2023-06-01"},
            timeout=30,
        )
        ready = httpx.get(f"{base}/readyz", timeout=5)

        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "upstream_unavailable"
        assert refused_in < 1.0  # answered at once, not queued behind the open streams
        assert messages.status_code == 503
        assert messages.headers["retry-after"] == "1"
        assert messages.json()["type"] == "error"  # envelope B on /v1/messages
        assert messages.json()["error"]["type"] == "api_error"
        assert ready.status_code == 503
        assert ready.json()["checks"]["capacity"].startswith("at capacity")
        assert len(upstream.requests_to(CHAT_PATH)) == CAP

        upstream.release("g")
        for _response, first, chunks in held:  # the open streams run to their end, whole
            assert (first + b"".join(chunks)).endswith(b"data: [DONE]\n\n")
        streams.close()

        assert chat(base, tenant).status_code == 200  # a place is free again
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        rejected = scrape(base).value("modelgate_rejections_total", status="503", reason="overloaded")
        assert rejected == 2
