"""Fixtures for the model API: real fake upstreams, the real gateway on loopback, a registered tenant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import FakeUpstream
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

UPSTREAM_KEY = "upstream-secret-key"


def gateway_toml(storage_url: str, primary: FakeUpstream, secondary: FakeUpstream, anthropic: FakeUpstream,
                 *, extra: str = "") -> str:
    """Two OpenAI-kind providers on distinct hosts (127.0.0.1 / localhost), one Anthropic-kind, and mock."""
    return f"""
[storage]
url = "{storage_url}"

[routing]
cooldown_seconds = 30.0
failure_threshold = 2

[[providers]]
name = "alpha"
kind = "openai"
base_url = "{primary.base_url}/v1"
api_key = "{UPSTREAM_KEY}"
connect_timeout = 2.0
first_byte_timeout = 3.0
read_timeout = 3.0

[[providers]]
name = "beta"
kind = "openai"
base_url = "{secondary.base_url.replace('127.0.0.1', 'localhost')}/v1"
api_key = "{UPSTREAM_KEY}"
connect_timeout = 2.0
first_byte_timeout = 3.0
read_timeout = 3.0

[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{anthropic.base_url}"
api_key = "{UPSTREAM_KEY}"

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "gpt-test"
kinds = ["chat", "completions", "responses"]
[[models.rows]]
provider = "alpha"
upstream_model = "gpt-upstream-a"
priority = 0
[[models.rows]]
provider = "beta"
upstream_model = "gpt-upstream-b"
priority = 1

[[models]]
name = "balanced"
kinds = ["chat"]
[[models.rows]]
provider = "alpha"
weight = 1.0
[[models.rows]]
provider = "beta"
weight = 1.0

[[models]]
name = "embed-test"
kinds = ["embeddings"]
[[models.rows]]
provider = "alpha"

[[models]]
name = "decider"
kinds = ["decisions"]
[[models.rows]]
provider = "alpha"

[[models]]
name = "claude-test"
kinds = ["messages"]
[[models.rows]]
provider = "claude"
upstream_model = "claude-upstream"

[[models]]
name = "mock-chat"
kinds = ["chat", "completions", "embeddings", "responses", "decisions"]
[[models.rows]]
provider = "mock"

[[plans]]
code = "free"
rpm = 0
tpm = 0
{extra}
"""


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream, FakeUpstream]]:
    with FakeUpstream("alpha", api_key=UPSTREAM_KEY) as a, FakeUpstream("beta", api_key=UPSTREAM_KEY) as b, \
            FakeUpstream("claude", api_key=UPSTREAM_KEY) as c:
        yield a, b, c


@pytest.fixture
def alpha(upstreams) -> FakeUpstream:
    return upstreams[0]


@pytest.fixture
def beta(upstreams) -> FakeUpstream:
    return upstreams[1]


@pytest.fixture
def claude(upstreams) -> FakeUpstream:
    return upstreams[2]


@pytest.fixture
def gateway(tmp_path: Path, upstreams) -> Iterator[ThreadedGateway]:
    config = write_config(tmp_path / "modelgate.toml",
                          gateway_toml(f"sqlite:///{tmp_path / 'gw.db'}", *upstreams))
    with ThreadedGateway(config) as running:
        yield running


@pytest.fixture
def tenant(gateway: ThreadedGateway) -> Tenant:
    return register_tenant(gateway.base_url)
