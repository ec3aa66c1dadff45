"""Billing and limits through the real gateway: both storage backends, in-process and Redis counters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import ThreadedGateway, write_config

OPERATOR_TOKEN = "operator-test-token-0123456789"


def billing_toml(
    storage_url: str,
    redis_url: str | None,
    *,
    rpm: int = 0,
    tpm: int = 0,
    per_request_usd: float = 0.0,
    output_per_mtok: float = 0.0,
    input_per_mtok: float = 0.0,
    credit_limit: float = 0.0,
    flush_interval: float = 0.2,
    abandoned_calls: str = "finish",
    billing_extra: str = "",
    extra: str = "",
) -> str:
    redis = f'[redis]\nurl = "{redis_url}"\n' if redis_url else ""
    return f"""
[server]
operator_token = "{OPERATOR_TOKEN}"

[storage]
url = "{storage_url}"

{redis}
[billing]
ledger_flush_interval_seconds = {flush_interval}
abandoned_calls = "{abandoned_calls}"
{billing_extra}

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "metered"
kinds = ["chat", "completions", "embeddings", "messages"]
default_max_tokens = 50
[[models.rows]]
provider = "mock"
[models.prices]
per_request = {per_request_usd}
input_per_mtok = {input_per_mtok}
output_per_mtok = {output_per_mtok}

[[models]]
name = "other"
kinds = ["chat"]
[[models.rows]]
provider = "mock"

[[plans]]
code = "free"
rpm = {rpm}
tpm = {tpm}

[[plans]]
code = "pro"  # a fee: its first invoice is open (unpaid) until the operator marks it paid
monthly_fee = 49.0
rpm = {rpm}
tpm = {tpm}

[[plans]]
code = "enterprise"
credit_limit = {credit_limit}
self_service = true  # tests register on it themselves; by default a credit plan is assigned by the operator
rpm = {rpm}
tpm = {tpm}
{extra}
"""


@pytest.fixture(params=["sqlite", "postgres"])
def billing_storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'billing.db'}"
    return request.getfixturevalue("pg_server_url")


@pytest.fixture(params=["in-process", "redis"])
def counters_redis(request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("redis_url") if request.param == "redis" else None


@pytest.fixture
def start_gateway(tmp_path: Path, billing_storage: str, counters_redis: str | None):
    """Start a gateway with a billing config; stopped at the end of the test."""
    running: list[ThreadedGateway] = []

    def start(**options) -> ThreadedGateway:
        config = write_config(
            tmp_path / f"billing{len(running)}.toml", billing_toml(billing_storage, counters_redis, **options)
        )
        gateway = ThreadedGateway(config).start()
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        gateway.stop()


@pytest.fixture
def single_backend_gateway(tmp_path: Path) -> Iterator:
    """One SQLite, in-process gateway for behaviours that do not depend on the backends."""
    running: list[ThreadedGateway] = []

    def start(**options) -> ThreadedGateway:
        config = write_config(
            tmp_path / f"single{len(running)}.toml",
            billing_toml(f"sqlite:///{tmp_path / 'single.db'}", None, **options),
        )
        gateway = ThreadedGateway(config).start()
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        gateway.stop()
