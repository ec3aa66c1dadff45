"""A request, refused or failed, leaves no reference cycle holding its context behind.

A gateway process runs its garbage collector seldom (modelgate.server.freeze_startup_heap), so a request
whose context stayed in a cycle would keep its body and parsed payload in memory until the next collection:
a storm of refused requests with large prompts would grow the process by hundreds of megabytes.

The gateway runs in this process (ThreadedGateway); the collector is switched off meanwhile, and what a
collection then finds unreachable is kept (`gc.DEBUG_SAVEALL`) and looked through for request contexts.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelgate.proxy.pipeline.context import RequestContext
from tests.fakes import FakeUpstream, Fault
from tests.integration.ops.conftest import chat, ops_toml, scrape, wait_until
from tests.support.gateway import ThreadedGateway, register_tenant, write_config

BIG_PROMPT = "a long prompt " * 8_000  # ~110 KB: what a cycle would keep


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _contexts_in_cycles() -> int:
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    found = sum(1 for thing in gc.garbage if isinstance(thing, RequestContext))
    gc.garbage.clear()
    gc.set_debug(0)
    return found


def _answered(base_url: str, count: int) -> bool:
    """True once `count` requests went through the completion phase (metrics count them there)."""
    return scrape(base_url).value("modelgate_requests_total") >= count


def test_refused_and_failed_requests_leave_no_cycle_holding_their_context(
    tmp_path: Path, sqlite_url: str, upstream: FakeUpstream, collector_off: None
) -> None:
    fee = '[[plans]]\ncode = "pro"\nmonthly_fee = 49.0\n'  # unpaid until its invoice is marked paid
    config = write_config(tmp_path / "c.toml", ops_toml(sqlite_url, upstream, plans=fee))
    with ThreadedGateway(config) as gateway:
        funded = register_tenant(gateway.base_url)
        tight = register_tenant(gateway.base_url, plan="tight")
        unpaid = register_tenant(gateway.base_url, plan="pro", fund_usd=None)
        assert _contexts_in_cycles() == 0  # what registering left behind is not a request's

        statuses = [
            chat(gateway.base_url, None, text=BIG_PROMPT).status_code,  # no key
            chat(gateway.base_url, funded, model="no-such-model", text=BIG_PROMPT).status_code,
            chat(gateway.base_url, funded, text=BIG_PROMPT, stream="yes").status_code,
            chat(gateway.base_url, tight, text=BIG_PROMPT).status_code,
            chat(gateway.base_url, tight, text=BIG_PROMPT).status_code,  # over its 1 request a minute
            chat(gateway.base_url, unpaid, text=BIG_PROMPT).status_code,
        ]
        path = "/v1/chat/completions"
        upstream.add_fault(path, Fault(status=500))
        statuses.append(chat(gateway.base_url, funded, model="chat", text=BIG_PROMPT).status_code)
        upstream.add_fault(path, Fault(disconnect_after_chunks=2))  # the provider breaks off a stream
        broken = chat(gateway.base_url, funded, model="chat", text=BIG_PROMPT, stream=True)
        statuses.append(broken.status_code)
        upstream.add_fault(path, Fault(chunk_delay=0.5))  # the client leaves a stream after its first bytes
        statuses.append(_left_mid_stream(gateway.base_url, funded.api_key))
        statuses.append(chat(gateway.base_url, funded, text=BIG_PROMPT).status_code)  # served: a control
        assert statuses == [401, 404, 400, 200, 429, 402, 502, 200, 200, 200]
        assert wait_until(lambda: _answered(gateway.base_url, len(statuses)))

        assert _contexts_in_cycles() == 0


def _left_mid_stream(base_url: str, api_key: str) -> int:
    body = {"model": "chat", "messages": [{"role": "user", "content": BIG_PROMPT}], "stream": True}
    headers = {"authorization": f"Bearer {api_key}"}
    url = f"{base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as reply:
        next(reply.iter_raw())  # the first bytes, then the connection is closed
        return reply.status_code


def test_the_check_sees_a_context_kept_in_a_cycle(collector_off: None) -> None:
    # The test above can fail: a context in a cycle of its own is found.
    context = RequestContext.__new__(RequestContext)
    holder: dict[str, object] = {"context": context}
    holder["self"] = holder
    del context, holder
    assert _contexts_in_cycles() == 1
