"""What a plugin is: a small object with phase hooks, modelled on a proxy filter chain.

Phases, in order: `on_request` (may stop the chain by raising a GatewayError), `on_response_head` (the
upstream answered), `on_chunk` (each relayed chunk; must be cheap and never buffer), `on_complete`
(always called, success or failure, so plugins can release what they reserved).
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from modelgate.proxy.context import RequestContext


class Plugin:
    """Base class: override only the hooks a plugin needs; the chain skips the rest."""

    name: ClassVar[str] = ""
    # Essential plugins keep the model API correct and safe; the config may not switch them off.
    essential: ClassVar[bool] = False

    async def on_request(self, ctx: RequestContext) -> None:
        return None

    def on_response_head(self, ctx: RequestContext, status: int, headers: Any) -> None:
        return None

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> None:
        return None

    async def on_complete(self, ctx: RequestContext) -> None:
        return None


def _overrides(plugin: Plugin, hook: str) -> bool:
    return getattr(type(plugin), hook) is not getattr(Plugin, hook)


class PluginChain:
    """The ordered plugins, with one pre-computed list per phase so unused hooks cost nothing.

    A plugin may define `on_request` / `on_complete` as plain functions when they never wait: the chain
    calls those without creating a coroutine (the request phase is the hot path).
    """

    __slots__ = ("chunk_hooks", "complete_hooks", "head_hooks", "plugins", "request_hooks")

    def __init__(self, plugins: list[Plugin]) -> None:
        self.plugins = tuple(plugins)
        self.request_hooks = _phase(plugins, "on_request")
        self.head_hooks = tuple(p.on_response_head for p in plugins if _overrides(p, "on_response_head"))
        self.chunk_hooks = tuple(p.on_chunk for p in plugins if _overrides(p, "on_chunk"))
        self.complete_hooks = _phase(plugins, "on_complete")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.plugins)


def _phase(plugins: list[Plugin], hook: str) -> tuple[tuple[Any, bool], ...]:
    """(bound hook, whether it must be awaited) for every plugin that overrides `hook`."""
    return tuple(
        (getattr(p, hook), inspect.iscoroutinefunction(getattr(type(p), hook)))
        for p in plugins
        if _overrides(p, hook)
    )
