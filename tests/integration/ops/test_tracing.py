"""Optional OpenTelemetry tracing: off by default, a clear config error when enabled without the packages,
and request, upstream and storage spans when it is on (that last test needs the `otel` extra)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelgate.config import ConfigError, TracingConfig, load_config
from modelgate.config import loader as config_loader
from modelgate.gateway import Gateway
from tests.fakes import FakeUpstream
from tests.integration.ops.conftest import chat, ops_toml
from tests.support.gateway import ThreadedGateway, register_tenant, write_config
from tests.support.span_capture import captured_spans

MISSING = (
    "tracing.enabled: tracing needs OpenTelemetry, which is not installed: pip install 'modelgate[otel]'"
)


def test_tracing_is_off_by_default() -> None:
    assert load_config(None, env={}).tracing == TracingConfig(enabled=False, service_name="modelgate")


async def test_a_gateway_on_the_defaults_builds_no_tracer(tmp_path: Path, sqlite_url: str) -> None:
    gateway = await Gateway.start(write_config(tmp_path / "off.toml", ops_toml(sqlite_url)))
    try:
        assert gateway.tracer is None
        assert gateway.chain.names[0] == "tracing"  # present in the chain, and a no-op
    finally:
        await gateway.stop()


def test_enabled_tracing_without_opentelemetry_is_a_config_error(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_loader, "_opentelemetry_installed", lambda: False)
    path = tmp_path / "otel.toml"
    path.write_text(ops_toml(sqlite_url) + '\n[tracing]\nenabled = true\nservice_name = "gw"\n')

    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})

    assert [p.removeprefix(f"{path}: ") for p in refused.value.problems] == [
        MISSING + " (opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http), or set enabled = false"
    ]


# The real CLI in a process where the OpenTelemetry packages cannot be imported, installed here or not.
_WITHOUT_OPENTELEMETRY = (
    "import sys; sys.modules['opentelemetry'] = None; "
    "from modelgate.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_serve_refuses_to_start_with_tracing_on_and_opentelemetry_missing(
    tmp_path: Path, sqlite_url: str
) -> None:
    path = tmp_path / "otel.toml"
    path.write_text(ops_toml(sqlite_url) + "\n[tracing]\nenabled = true\n")

    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OPENTELEMETRY, "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert MISSING in done.stderr
    assert "refusing to start on an invalid config" in done.stderr


@pytest.fixture(scope="module")
def span_exporter() -> Iterator:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the `otel` extra is not installed")
    with captured_spans() as exporter:  # the gateway keeps the provider the process installed
        yield exporter


def test_enabled_tracing_records_request_upstream_and_storage_spans(
    tmp_path: Path, sqlite_url: str, upstream: FakeUpstream, span_exporter
) -> None:
    toml = ops_toml(sqlite_url, upstream) + "\n[tracing]\nenabled = true\n"
    with ThreadedGateway(write_config(tmp_path / "on.toml", toml)) as gateway:
        tenant = register_tenant(gateway.base_url)
        span_exporter.clear()
        reply = chat(gateway.base_url, tenant, model="chat")
        assert reply.status_code == 200

    spans = span_exporter.get_finished_spans()
    request_id = reply.headers["x-request-id"]
    (request,) = [s for s in spans if s.attributes.get("modelgate.request_id") == request_id]
    assert request.name == "POST /v1/chat/completions"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["modelgate.row"] == "fake/gpt-4o-mini@127.0.0.1"
    children = [s for s in spans if s.parent is not None and s.parent.span_id == request.context.span_id]
    assert "upstream fake" in {s.name for s in children}
    assert any(s.name.startswith("db ") for s in children)  # the key lookup
