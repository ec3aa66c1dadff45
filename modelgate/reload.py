"""Config reload on SIGHUP: re-read the same file, build a new runtime, swap it in without dropping requests.

Providers, models and their rows, plans and prices, limits, plugins, routing, cabinet settings, tokens and
the log level follow the file. Settings read once at start (storage, Redis, listening address, workers,
ledger batching, log format, tracing) keep their running values, with a warning that a restart applies
them. A file that does not validate is refused as a whole, loudly, and the running config stays.

The reload is synchronous on the event loop (reading a small file, building clients that connect lazily),
so no request ever sees half of it: a request runs on the runtime current when it arrived.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from modelgate.config import Config, ConfigError, load_config
from modelgate.config.loader import EMBEDDED_SOURCE
from modelgate.plugins import chain_plugins
from modelgate.proxy.observability.logs import set_log_level
from modelgate.runtime import build_runtime

if TYPE_CHECKING:
    from modelgate.gateway import Gateway

log = logging.getLogger("modelgate.reload")

# Section -> the settings of it that only a restart applies (None: the whole section).
RESTART_ONLY: dict[str, tuple[str, ...] | None] = {
    # trusted_proxies: the middleware and the front read it when the server starts.
    "server": ("host", "port", "workers", "shutdown_grace_seconds", "model_api_front", "trusted_proxies"),
    "storage": None,
    "redis": None,
    "billing": (
        "ledger_flush_interval_seconds",
        "ledger_batch_size",
        "ledger_max_queue",
        "spool_dir",
        "spool_fsync",
        "spool_fsync_interval_seconds",
    ),
    "logging": ("json",),
    "tracing": None,
}


def keep_restart_only(running: Config, loaded: Config) -> tuple[Config, list[str]]:
    """`loaded` with the running values of the restart-only settings, and the names of those it changed."""
    kept: dict[str, object] = {}
    ignored: list[str] = []
    for section, names in RESTART_ONLY.items():
        old, new = getattr(running, section), getattr(loaded, section)
        if old == new:
            continue
        if names is None:
            kept[section] = old
            ignored.append(section)
            continue
        differing = [name for name in names if getattr(old, name) != getattr(new, name)]
        if differing:
            kept[section] = dataclasses.replace(new, **{name: getattr(old, name) for name in differing})
            ignored.extend(f"{section}.{name}" for name in differing)
    return (dataclasses.replace(loaded, **kept) if kept else loaded), ignored


class Reloader:
    """Reloads the gateway's config file; `reload` is the SIGHUP handler."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def reload(self) -> bool:
        """Apply the config file as it is now; False (and the running config kept) when it is refused."""
        gateway = self._gateway
        running = gateway.config
        if gateway.shutting_down:
            log.warning("config reload ignored: the gateway is shutting down")
            return False
        if running.source.startswith("<") and running.source != EMBEDDED_SOURCE:
            log.warning("config reload ignored: the config was not read from a file (%s)", running.source)
            return False
        try:
            loaded = load_config(
                None if running.source == EMBEDDED_SOURCE else running.source, chain=chain_plugins()
            )
        except ConfigError as error:
            return self._refuse(running.source, error.problems)
        config, ignored = keep_restart_only(running, loaded)
        try:
            runtime = build_runtime(config, gateway)
        except Exception as exc:  # the loader validated the file; this would be a gateway bug
            log.exception("config reload failed while building the new config")
            return self._refuse(running.source, [f"{running.source}: {exc}"])
        if ignored:
            log.warning(
                "config reload: %s changed, which only a restart applies; keeping the running values",
                ", ".join(ignored),
                extra={"restart_required": ignored},
            )
        gateway.swap(runtime)
        if config.logging.level != running.logging.level:
            set_log_level(config.logging.level)
        gateway.metrics.config_reloads.labels("applied").inc()
        log.info(
            "config reloaded from %s: %d providers, %d models, %d plans",
            config.source,
            len(config.providers),
            len(config.models),
            len(config.plans),
        )
        return True

    def _refuse(self, source: str, problems: list[str]) -> bool:
        self._gateway.metrics.config_reloads.labels("refused").inc()
        log.error(
            "CONFIG RELOAD REFUSED: %s has %d problem(s); still serving the previous config:\n  %s",
            source,
            len(problems),
            "\n  ".join(problems),
            extra={"problems": problems},
        )
        return False
