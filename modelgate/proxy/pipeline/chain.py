"""What a plugin is: a small object with phase hooks, modelled on a proxy filter chain.

Phases, in order, as in a proxy's filter chain (Envoy's decode/encode filters):

- `on_request(ctx)`: may stop the chain by raising a GatewayError;
- `on_response_head(ctx, head)`: the upstream answered; may change `head.status` and `head.headers`;
- `on_chunk(ctx, chunk) -> bytes`: each piece of the answer (a whole answer is one piece), returning the
  bytes to pass on: the same bytes to observe only, others to rewrite, b"" to hold them back (the later
  steps see nothing of them until they are released); cheap, and never buffering a stream; raising
  `StreamCut` ends a stream (a GatewayError refuses a whole answer);
  (a streamed answer's pieces go through `stream_step(ctx)`, made once its head is in: `on_chunk` bound to
  the request unless the plugin has a step of the stream's own, or none for a stream it has nothing to do
  with);
- `on_end(ctx, tail) -> bytes`: a streamed answer ended; returns `tail` (what the earlier steps released)
  followed by whatever this step still held;
- `on_stream_error(ctx, error) -> bytes`: the provider broke off a stream whose bytes reached the client;
  the bytes that end it for the client (an error event in the route's format);
- `on_complete(ctx)`: always called, success or failure, so plugins can release what they reserved.

Each plugin says which fields of the request context it reads that another part fills in (`requires`) and
which it fills in (`provides`), every one of them (tests/unit/test_plugin_declarations.py reads the plugins'
source to keep the lists complete); building a chain refuses an order in which a step would read what only
a later step, or none, provides. Fields the handler gives (GIVEN), the forwarder records once a row answers
(ANSWERED) or whose resting value means "nothing recorded" (RESTING) need no earlier step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import ClassVar

from modelgate.proxy.pipeline.context import AnswerHead, RequestContext

# What the model API's handler puts on every context before the first step runs.
GIVEN = frozenset({"request", "request_id", "started"})
# What the forwarder and the handler record once the request phase is over (a row's attempts, its answer,
# the status and outcome): the response and completion phases read them with no earlier step providing them
# (a response step that sets one, such as `outcome`, still lists it in `provides`).
ANSWERED = frozenset(
    {
        "row",
        "credential",
        "attempts",
        "row_failures",
        "answer",
        "answered_status",
        "status",
        "outcome",
        "error",
        "bytes_sent",
        "first_byte_at",
    }
)
# Fields whose resting value says that nothing was recorded (no policy rules apply, no ask, no usage yet, no
# content hit, no header to add): a step reads them whether or not a step that records them ran before it,
# since the steps that do may be switched off (policy, rate limits, billing, metering).
RESTING = frozenset(
    {"policy", "decision", "admission", "metering", "content_hits", "payload_changed", "response_headers"}
)
_CONTEXT_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestContext))


class StreamCut(Exception):
    """Raised by a response step to end a streamed answer now: `closing` (an error event in the route's
    format) goes out last and the provider's stream is let go. The step sets `ctx.outcome` first."""

    def __init__(self, closing: bytes) -> None:
        super().__init__("stream cut by a response step")
        self.closing = closing


class ChainOrderError(ValueError):
    """A plugin list in which a step reads what only a later step (or none) provides."""


# A request or completion hook: a coroutine function when it waits, a plain function when it never does (the
# chain then calls it without creating a coroutine; the request phase is the hot path).
PhaseHook = Callable[[RequestContext], Awaitable[None] | None]
# One step of one streamed answer: each piece in, the bytes to pass on out (as `on_chunk`, its request bound).
StreamStep = Callable[[bytes], bytes]
# What a plugin makes of a streamed answer once its head is in: its step, or None (nothing to do with it).
StreamStepMaker = Callable[[RequestContext], StreamStep | None]


class Plugin:
    """Base class: override only the hooks a plugin needs; the chain skips the rest.

    `on_request` and `on_complete` may be overridden by an `async def` or a plain `def`: both fit the
    base signature, and the chain awaits what a hook returns only when it returned an awaitable."""

    name: ClassVar[str] = ""
    # Essential plugins keep the model API correct and safe; the config may not switch them off.
    essential: ClassVar[bool] = False
    # Context fields this step needs filled in by an earlier one, and those it fills in for later ones.
    requires: ClassVar[frozenset[str]] = frozenset()
    provides: ClassVar[frozenset[str]] = frozenset()
    # Hooks it overrides that do nothing as this plugin was built (e.g. tracing switched off): the chain
    # leaves them out, sparing every request their calls.
    idle_hooks: frozenset[str] = frozenset()

    def on_request(self, ctx: RequestContext) -> Awaitable[None] | None:
        return None

    def on_response_head(self, ctx: RequestContext, head: AnswerHead) -> None:
        return None

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        return chunk

    def stream_step(self, ctx: RequestContext) -> StreamStep | None:
        """This streamed answer's step for each of its pieces, made once its head is in (after
        `on_response_head`), or None when the plugin has nothing to do with this stream: the relay then
        never calls it. A plugin with per-stream state returns that state's own method, saving a call a
        piece; by default, `on_chunk` with the request bound."""
        return partial(self.on_chunk, ctx)

    def on_end(self, ctx: RequestContext, tail: bytes) -> bytes:
        return tail

    def on_stream_error(self, ctx: RequestContext, error: BaseException) -> bytes:
        return b""

    def on_complete(self, ctx: RequestContext) -> Awaitable[None] | None:
        return None


def _overrides(plugin: Plugin, hook: str) -> bool:
    return getattr(type(plugin), hook) is not getattr(Plugin, hook) and hook not in plugin.idle_hooks


class PluginChain:
    """The ordered plugins, with one pre-computed list per phase so unused hooks cost nothing.

    A plugin may define `on_request` / `on_complete` as plain functions when they never wait: the chain
    calls those without creating a coroutine (the request phase is the hot path), and awaits only the
    awaitables the others return.
    """

    __slots__ = (
        "chunk_hooks",
        "complete_hooks",
        "end_hooks",
        "head_hooks",
        "plugins",
        "request_hooks",
        "stream_error_hooks",
        "stream_steps",
    )

    def __init__(self, plugins: list[Plugin]) -> None:
        check_order(plugins)
        self.plugins = tuple(plugins)
        self.request_hooks: tuple[PhaseHook, ...] = tuple(
            p.on_request for p in plugins if _overrides(p, "on_request")
        )
        self.head_hooks = tuple(p.on_response_head for p in plugins if _overrides(p, "on_response_head"))
        self.chunk_hooks = tuple(p.on_chunk for p in plugins if _overrides(p, "on_chunk"))
        self.stream_steps: tuple[StreamStepMaker, ...] = tuple(
            p.stream_step for p in plugins if _overrides(p, "on_chunk")
        )
        self.end_hooks = tuple(p.on_end for p in plugins if _overrides(p, "on_end"))
        self.stream_error_hooks = tuple(
            p.on_stream_error for p in plugins if _overrides(p, "on_stream_error")
        )
        self.complete_hooks: tuple[PhaseHook, ...] = tuple(
            p.on_complete for p in plugins if _overrides(p, "on_complete")
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.plugins)


def check_order(plugins: Sequence[Plugin | type[Plugin]]) -> None:
    """Raise ChainOrderError unless every step's `requires` is provided by a step before it (or given)."""
    provided = set(GIVEN | ANSWERED | RESTING)
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
