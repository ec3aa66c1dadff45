"""A config reload (SIGHUP) applies new connection deadlines to the connections opened after it."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.integration.edge.conftest import SLACK, edge_toml
from tests.integration.ops.conftest import wait_until
from tests.support.gateway import GatewayProcess
from tests.support.raw_http import connect, read_until_closed


def test_a_reloaded_header_timeout_applies_to_new_connections(tmp_path: Path) -> None:
    config = tmp_path / "reload.toml"
    storage = f"sqlite:///{tmp_path / 'reload.db'}"
    config.write_text(edge_toml(storage, header=30.0, keepalive=30.0))
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    try:
        with connect(gateway.port) as sock:
            assert read_until_closed(sock, 1.0)[1] is None  # 30 s to send a head: still open

        config.write_text(edge_toml(storage, header=0.5, keepalive=30.0))
        gateway.process.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "config reloaded" in gateway.output(), timeout=10)

        with connect(gateway.port) as sock:
            data, closed_after = read_until_closed(sock, 0.5 + SLACK)
        assert closed_after is not None and data == b""
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        gateway.kill()
