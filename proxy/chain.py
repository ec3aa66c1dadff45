"""What a plugin is: a small object with phase hooks, modelled on a proxy filter chain.

Phases, in order: `on_request` (may stop the chain by raising a GatewayError), `on_response_head` (the
upstream answered), `on_chunk` (each relayed chunk; must be cheap and never buffer), `on_complete`
(always called, success or failure, so plugins can release what they reserved).

Each plugin says which fields of the request context it reads that an earlier step fills in (`requires`)
and which it fills in for later steps (`provides`); building a chain refuses an order in which a step
would read what only a later step, or none, provides.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any, ClassVar

from modelgate.proxy.context import RequestContext

# What the model API's handler puts on every context before the first step runs.
GIVEN = frozenset({"request", "request_id", "started"})
_CONTEXT_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestContext))


class ChainOrderError(ValueError):
    """A plugin list in which a step reads what only a later step (or none) provides."""


class Plugin:
    """Base class: override only the hooks a plugin needs; the chain skips the rest."""

    name: ClassVar[str] = ""
    # Essential plugins keep the model API correct and safe; the config may not switch them off.
    essential: ClassVar[bool] = False
    # Context fields this step needs filled in by an earlier one, and those it fills in for later ones.
    requires: ClassVar[frozenset[str]] = frozenset()
    provides: ClassVar[frozenset[str]] = frozenset()

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
        check_order(plugins)
        self.plugins = tuple(plugins)
        self.request_hooks = _phase(plugins, "on_request")
        self.head_hooks = tuple(p.on_response_head for p in plugins if _overrides(p, "on_response_head"))
        self.chunk_hooks = tuple(p.on_chunk for p in plugins if _overrides(p, "on_chunk"))
        self.complete_hooks = _phase(plugins, "on_complete")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.plugins)


def check_order(plugins: Sequence[Plugin | type[Plugin]]) -> None:
    """Raise ChainOrderError unless every step's `requires` is provided by a step before it (or given)."""
    provided = set(GIVEN)
    for index, plugin in enumerate(plugins):
        unknown = sorted((plugin.requires | plugin.provides) - _CONTEXT_FIELDS)
        if unknown:
            raise ChainOrderError(f"plugin {plugin.name} names no field of the request context: {unknown}")
        missing = sorted(plugin.requires - provided)
        if missing:
            later = {f: other.name for other in plugins[index + 1 :] for f in other.provides}
            needs = ", ".join(
                f"{f} (provided by {later[f]}, later in the chain)"
                if f in later
                else f"{f} (provided by no step)"
                for f in missing
            )
            raise ChainOrderError(f"plugin {plugin.name} runs before what it needs: {needs}")
        provided |= plugin.provides


def _phase(plugins: list[Plugin], hook: str) -> tuple[tuple[Any, bool], ...]:
    """(bound hook, whether it must be awaited) for every plugin that overrides `hook`."""
    return tuple(
        (getattr(p, hook), inspect.iscoroutinefunction(getattr(type(p), hook)))
        for p in plugins
        if _overrides(p, hook)
    )
