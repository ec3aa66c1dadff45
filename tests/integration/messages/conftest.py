"""Fixtures for /v1/messages and its translations: a real gateway before real fakes of both wire kinds.

Models: `gpt-translated` (OpenAI-kind rows only), `claude-native` (Anthropic-kind rows only; chat and
Responses translated), `mixed`
(an OpenAI-kind row first, an Anthropic-kind fallback), `compat-native` (an OpenAI-kind provider flagged
`native_messages`), `chat-only` (no `messages` kind).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.fakes import FakeUpstream
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

UPSTREAM_KEY = "upstream-secret-key"
CLAUDE_DEFAULT_MAX_TOKENS = 1234


def gateway_toml(storage_url: str, oai: FakeUpstream, anth: FakeUpstream, compat: FakeUpstream) -> str:
    return f"""
[storage]
url = "{storage_url}"

[routing]
cooldown_seconds = 30.0
failure_threshold = 2

[[providers]]
name = "openai"
kind = "openai"
base_url = "{oai.base_url}/v1"
api_key = "{UPSTREAM_KEY}"
first_byte_timeout = 5.0
read_timeout = 5.0

[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{anth.base_url}"
api_key = "{UPSTREAM_KEY}"
first_byte_timeout = 5.0
read_timeout = 5.0

[[providers]]
name = "compat"
kind = "openai"
base_url = "{compat.base_url}/v1"
api_key = "{UPSTREAM_KEY}"
native_messages = true

[[models]]
name = "gpt-translated"
kinds = ["messages", "chat"]
[[models.rows]]
provider = "openai"
upstream_model = "gpt-upstream"

[[models]]
name = "claude-native"
kinds = ["messages", "chat", "responses"]
default_max_tokens = {CLAUDE_DEFAULT_MAX_TOKENS}
[[models.rows]]
provider = "claude"
upstream_model = "claude-upstream"

[[models]]
name = "mixed"
kinds = ["messages", "chat"]
[[models.rows]]
provider = "openai"
upstream_model = "gpt-upstream"
priority = 0
[[models.rows]]
provider = "claude"
upstream_model = "claude-upstream"
priority = 1

[[models]]
name = "compat-native"
kinds = ["messages"]
[[models.rows]]
provider = "compat"
upstream_model = "compat-upstream"

[[models]]
name = "chat-only"
kinds = ["chat"]
[[models.rows]]
provider = "openai"

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


@pytest.fixture
def oai() -> Iterator[FakeUpstream]:
    """The OpenAI-kind fake (chat completions)."""
    with FakeUpstream("oai", api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture
def anth() -> Iterator[FakeUpstream]:
    """The Anthropic-kind fake (Messages)."""
    with FakeUpstream("anth", api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture
def compat() -> Iterator[FakeUpstream]:
    """An OpenAI-kind provider that also serves Messages natively."""
    with FakeUpstream("compat", api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture
def gateway(tmp_path: Path, oai, anth, compat) -> Iterator[ThreadedGateway]:
    toml = gateway_toml(f"sqlite:///{tmp_path / 'gw.db'}", oai, anth, compat)
    with ThreadedGateway(write_config(tmp_path / "modelgate.toml", toml)) as running:
        yield running


@pytest.fixture
def tenant(gateway: ThreadedGateway) -> Tenant:
    return register_tenant(gateway.base_url)


@pytest.fixture
def claude_sdk(gateway: ThreadedGateway, tenant: Tenant) -> Iterator[anthropic.Anthropic]:
    """The official anthropic SDK pointed at the gateway; no retries, short timeout so a hang fails."""
    with anthropic.Anthropic(
        base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0, timeout=10
    ) as sdk:
        yield sdk


@pytest.fixture
def openai_sdk(gateway: ThreadedGateway, tenant: Tenant) -> Iterator[openai.OpenAI]:
    """The official openai SDK pointed at the gateway; no retries."""
    with openai.OpenAI(
        base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0, timeout=10
    ) as sdk:
        yield sdk


@pytest.fixture
def http(gateway: ThreadedGateway, tenant: Tenant) -> Iterator[httpx.Client]:
    """Raw HTTP with the tenant's key in `x-api-key`, as Anthropic clients send it."""
    headers = {"x-api-key": tenant.api_key, "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=gateway.base_url, timeout=10, headers=headers) as raw:
        yield raw
