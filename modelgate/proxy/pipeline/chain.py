"""What a plugin is: a small object with phase hooks, modelled on a proxy filter chain.

Phases, in order, as in a proxy's filter chain (Envoy's decode/encode filters):

- `on_request(ctx)`: may stop the chain by raising a GatewayError;
- `on_response_head(ctx, head)`: the upstream answered; may change `head.status` and `head.headers`;
- `on_chunk(ctx, chunk) -> bytes`: each piece of the answer (a whole answer is one piece), returning the
  bytes to pass on: the same bytes to observe only, others to rewrite, b"" to hold them back (the later
  steps see nothing of them until they are released); cheap, and never buffering a stream; raising
  `StreamCut` ends a stream (a GatewayError refuses a whole answer);
- `on_end(ctx, tail) -> bytes`: a streamed answer ended; returns `tail` (what the earlier steps released)
  followed by whatever this step still held;
- `on_stream_error(ctx, error) -> bytes`: the provider broke off a stream whose bytes reached the client;
  the bytes that end it for the client (an error event in the route's format);
- `on_complete(ctx)`: always called, success or failure, so plugins can release what they reserved.

Each plugin says which fields of the request context it reads that an earlier step fills in (`requires`)
and which it fills in for later steps (`provides`); building a chain refuses an order in which a step
would read what only a later step, or none, provides.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any, ClassVar

from modelgate.proxy.pipeline.context import AnswerHead, RequestContext

# What the model API's handler puts on every context before the first step runs.
GIVEN = frozenset({"request", "request_id", "started"})
_CONTEXT_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestContext))


class StreamCut(Exception):
    """Raised by a response step to end a streamed answer now: `closing` (an error event in the route's
    format) goes out last and the provider's stream is let go. The step sets `ctx.outcome` first."""

    def __init__(self, closing: bytes) -> None:
        super().__init__("stream cut by a response step")
        self.closing = closing


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

    def on_response_head(self, ctx: RequestContext, head: AnswerHead) -> None:
        return None

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        return chunk

    def on_end(self, ctx: RequestContext, tail: bytes) -> bytes:
        return tail

    def on_stream_error(self, ctx: RequestContext, error: BaseException) -> bytes:
        return b""

    async def on_complete(self, ctx: RequestContext) -> None:
        return None


def _overrides(plugin: Plugin, hook: str) -> bool:
    return getattr(type(plugin), hook) is not getattr(Plugin, hook)


class PluginChain:
    """The ordered plugins, with one pre-computed list per phase so unused hooks cost nothing.

    A plugin may define `on_request` / `on_complete` as plain functions when they never wait: the chain
    calls those without creating a coroutine (the request phase is the hot path).
    """

    __slots__ = (
        "chunk_hooks",
        "complete_hooks",
        "end_hooks",
        "head_hooks",
        "plugins",
        "request_hooks",
        "stream_error_hooks",
    )

    def __init__(self, plugins: list[Plugin]) -> None:
        check_order(plugins)
        self.plugins = tuple(plugins)
        self.request_hooks = _phase(plugins, "on_request")
        self.head_hooks = tuple(p.on_response_head for p in plugins if _overrides(p, "on_response_head"))
        self.chunk_hooks = tuple(p.on_chunk for p in plugins if _overrides(p, "on_chunk"))
        self.end_hooks = tuple(p.on_end for p in plugins if _overrides(p, "on_end"))
        self.stream_error_hooks = tuple(
            p.on_stream_error for p in plugins if _overrides(p, "on_stream_error")
        )
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
