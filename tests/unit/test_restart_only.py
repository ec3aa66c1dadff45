"""Which settings a config reload leaves for a restart (modelgate/reload.py): the running value is kept and
the change is named, so the operator's warning says what did not apply."""

from __future__ import annotations

import dataclasses

from modelgate.config.schema import Config, ServerConfig
from modelgate.reload import keep_restart_only


def _with_server(**changes: object) -> Config:
    return dataclasses.replace(Config(), server=dataclasses.replace(ServerConfig(), **changes))


def test_a_change_of_trusted_proxies_waits_for_a_restart_and_is_named() -> None:
    running = _with_server(trusted_proxies=("10.0.0.0/8",))
    loaded = _with_server(trusted_proxies=("192.168.0.0/16",), keepalive_timeout_seconds=5.0)

    applied, ignored = keep_restart_only(running, loaded)

    assert ignored == ["server.trusted_proxies"]
    assert applied.server.trusted_proxies == ("10.0.0.0/8",)
    assert applied.server.keepalive_timeout_seconds == 5.0  # a reloadable setting of the same section applies


def test_a_reload_that_changes_only_reloadable_settings_keeps_nothing_back() -> None:
    running = _with_server(trusted_proxies=("10.0.0.0/8",))
    loaded = _with_server(trusted_proxies=("10.0.0.0/8",), max_connections=10)

    applied, ignored = keep_restart_only(running, loaded)

    assert ignored == []
    assert applied == loaded
