"""Config reload on SIGHUP: new models without a restart, in-flight streams untouched, bad files refused."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from tests.fakes import FakeUpstream, Fault
from tests.integration.ops.conftest import (
    chat,
    model_ids,
    ops_toml,
    scrape,
    stop_and_collect,
    wait_until,
)
from tests.support.gateway import GatewayProcess, register_tenant

# Polling /v1/models writes an access line per poll; "warning" keeps the gateway's output to the point.
QUIET = 'level = "warning"'
SECOND = """
[[models]]
name = "second"
kinds = ["chat"]
[[models.rows]]
provider = "fake"
upstream_model = "gpt-4o"
"""


def _hangup(gateway: GatewayProcess) -> None:
    assert gateway.process is not None
    gateway.process.send_signal(signal.SIGHUP)


def _refusals(gateway: GatewayProcess) -> float:
    return scrape(gateway.base_url).value("modelgate_config_reloads_total", result="refused")


def test_sighup_adds_a_model_while_a_stream_in_flight_completes(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    config = tmp_path / "reload.toml"
    storage = f"sqlite:///{tmp_path / 'reload.db'}"
    config.write_text(ops_toml(storage, upstream, logging=QUIET))
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    try:
        tenant = register_tenant(gateway.base_url)
        assert "second" not in model_ids(gateway.base_url, tenant)
        upstream.add_fault("/v1/chat/completions", Fault(hold_before_last_chunk="reload"))
        body = {"model": "chat", "stream": True, "messages": [{"role": "user", "content": "a b c d"}]}
        with httpx.stream(
            "POST",
            f"{gateway.base_url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {tenant.api_key}"},
            timeout=30,
        ) as held:
            assert held.status_code == 200
            chunks = held.iter_bytes()
            assert b"chat.completion.chunk" in next(chunks)
            assert upstream.wait_held("reload", timeout=10)

            config.write_text(ops_toml(storage, upstream, logging=QUIET, models=SECOND))
            _hangup(gateway)
            assert wait_until(lambda: "second" in model_ids(gateway.base_url, tenant), timeout=10)
            assert chat(gateway.base_url, tenant, model="second").status_code == 200

            upstream.release("reload")
            rest = b"".join(chunks)
        assert rest.rstrip().endswith(b"data: [DONE]")
        assert chat(gateway.base_url, tenant, model="chat").status_code == 200
        assert scrape(gateway.base_url).value("modelgate_config_reloads_total", result="applied") == 1
        stop_and_collect(gateway)
    finally:
        gateway.kill()


def test_an_invalid_config_on_sighup_is_refused_and_the_running_one_kept(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    config = tmp_path / "reload.toml"
    good = ops_toml(f"sqlite:///{tmp_path / 'reload.db'}", upstream, logging=QUIET)
    config.write_text(good)
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    try:
        tenant = register_tenant(gateway.base_url)
        broken = good + SECOND.replace('provider = "fake"', 'provider = "missing"')
        config.write_text(broken)
        _hangup(gateway)
        assert wait_until(lambda: _refusals(gateway) == 1, timeout=10)

        assert model_ids(gateway.base_url, tenant) >= {"echo", "chat"}
        assert "second" not in model_ids(gateway.base_url, tenant)
        assert chat(gateway.base_url, tenant, model="chat").status_code == 200
        output = stop_and_collect(gateway)
    finally:
        gateway.kill()
    assert "CONFIG RELOAD REFUSED" in output
    assert "unknown provider 'missing'" in output


def test_storage_changes_on_sighup_wait_for_a_restart_while_the_rest_applies(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    config = tmp_path / "reload.toml"
    config.write_text(ops_toml(f"sqlite:///{tmp_path / 'reload.db'}", upstream, logging=QUIET))
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    try:
        tenant = register_tenant(gateway.base_url)
        moved = ops_toml(f"sqlite:///{tmp_path / 'elsewhere.db'}", upstream, logging=QUIET, models=SECOND)
        config.write_text(moved)
        _hangup(gateway)
        assert wait_until(lambda: "second" in model_ids(gateway.base_url, tenant), timeout=10)
        # The key lives in the running storage only: still found, so the old storage is still in use.
        assert chat(gateway.base_url, tenant, model="second").status_code == 200
        output = stop_and_collect(gateway)
    finally:
        gateway.kill()
    assert "storage changed, which only a restart applies" in output
    assert not (tmp_path / "elsewhere.db").exists()


def test_sighup_to_the_parent_reloads_every_worker(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = tmp_path / "workers.toml"
    storage = f"sqlite:///{tmp_path / 'workers.db'}"
    config.write_text(ops_toml(storage, upstream, logging=QUIET))
    gateway = GatewayProcess(config, cwd=tmp_path, workers=2).start()
    try:
        tenant = register_tenant(gateway.base_url)

        pids: set[str] = set()

        def both_workers_answered() -> bool:
            # A SIGHUP that reached a worker before it served would be lost; wait until both serve.
            pids.update(s.labels["pid"] for s in scrape(gateway.base_url).samples("modelgate_worker_info"))
            return len(pids) == 2

        assert wait_until(both_workers_answered, timeout=10)

        config.write_text(ops_toml(storage, upstream, logging=QUIET, models=SECOND))
        _hangup(gateway)
        # Each request is a new connection, which SO_REUSEPORT hands to either worker.
        assert wait_until(
            lambda: all("second" in model_ids(gateway.base_url, tenant) for _ in range(20)), timeout=10
        )
        stop_and_collect(gateway)
    finally:
        gateway.kill()
