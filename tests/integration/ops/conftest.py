"""Operations: metrics, access logs, tracing, config reload, readiness and several instances."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes import FakeUpstream
from tests.support.gateway import GatewayProcess, Tenant

UPSTREAM_KEY = "upstream-provider-secret-0123456789"
METRICS_TOKEN = "metrics-test-token-0123456789"


def ops_toml(
    storage_url: str,
    upstream: FakeUpstream | None = None,
    *,
    redis_url: str | None = None,
    server: str = "",
    logging: str = "",
    models: str = "",
    per_request_usd: float = 0.0,
    billing: str = "",
    plans: str = "",
) -> str:
    """A gateway with a mock model `echo` (and a `chat` model on `upstream` when given), both priced
    `per_request_usd`; plans free and tight (1 request a minute). `models` appends [[models]] tables,
    `billing` keys to [billing], `plans` [[plans]] tables."""
    redis = f'[redis]\nurl = "{redis_url}"\n' if redis_url else ""
    fake = (
        f"""
[[providers]]
name = "fake"
kind = "openai"
base_url = "{upstream.base_url}/v1"
api_key = "{UPSTREAM_KEY}"

[[models]]
name = "chat"
kinds = ["chat"]
[[models.rows]]
provider = "fake"
upstream_model = "gpt-4o-mini"
[models.prices]
per_request = {per_request_usd}
"""
        if upstream is not None
        else ""
    )
    return f"""
[server]
shutdown_grace_seconds = 10.0
{server}

[storage]
url = "{storage_url}"

{redis}
[billing]
ledger_flush_interval_seconds = 0.2
{billing}

[logging]
{logging}

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "echo"
kinds = ["chat"]
[[models.rows]]
provider = "mock"
[models.prices]
per_request = {per_request_usd}
{fake}
{models}

[[plans]]
code = "free"
rpm = 0
tpm = 0

[[plans]]
code = "tight"
rpm = 1
tpm = 0
{plans}
"""


def chat(
    base_url: str, tenant: Tenant | None, model: str = "echo", text: str = "hello", **extra
) -> httpx.Response:
    headers = {"authorization": f"Bearer {tenant.api_key}"} if tenant else {}
    body = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def model_ids(base_url: str, tenant: Tenant) -> set[str]:
    reply = httpx.get(
        f"{base_url}/v1/models", headers={"authorization": f"Bearer {tenant.api_key}"}, timeout=10
    )
    assert reply.status_code == 200, reply.text
    return {model["id"] for model in reply.json()["data"]}


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll an observable condition until it holds or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)  # polling interval of a bounded wait
    return condition()


class Scrape:
    """One /metrics answer, parsed: sample values by name and labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {family.name: family for family in text_string_to_metric_families(text)}

    def value(self, sample: str, **labels: str) -> float:
        """The sum of the samples called `sample` whose labels include `labels` (0 when none)."""
        return sum(
            s.value
            for family in self.families.values()
            for s in family.samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def samples(self, sample: str) -> list:
        return [s for family in self.families.values() for s in family.samples if s.name == sample]

    def has(self, sample: str) -> bool:
        return bool(self.samples(sample))


def scrape(base_url: str, token: str | None = None) -> Scrape:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    reply = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    return Scrape(reply.text)


def stop_and_collect(gateway: GatewayProcess, timeout: float = 30.0) -> str:
    """SIGTERM the gateway, expect a clean exit, and return everything it wrote (stderr included)."""
    gateway.terminate()
    try:
        code = gateway.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        gateway.kill()
        pytest.fail(
            f"gateway did not stop within {timeout}s; its output ends with:\n{gateway.output()[-8000:]}"
        )
    output = gateway.output()
    assert code == 0, output[-8000:]
    return output


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream("fake", api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ops.db'}"
