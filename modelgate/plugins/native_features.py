"""Features only native Messages providers offer: such requests keep only the native rows of their model.

Extended thinking (`thinking`) and prompt caching (`cache_control` on the request or on any block) cannot be
translated to chat completions, and `POST /v1/messages/count_tokens` has no chat counterpart. Native rows
are those whose provider has `native_messages`; when none is left → 400 (envelope B on these routes).
"""

from __future__ import annotations

from typing import Any

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext

_CACHE_CONTROL = "cache_control"
_CACHE_CONTROL_BYTES = b'"cache_control"'


def _marked(blocks: Any) -> bool:
    """A list of blocks with one carrying `cache_control`; a tool_result's own blocks count too."""
    if not isinstance(blocks, list):
        return False
    return any(
        isinstance(block, dict) and (block.get(_CACHE_CONTROL) is not None or _marked(block.get("content")))
        for block in blocks
    )


def _uses_prompt_caching(payload: dict[str, Any]) -> bool:
    # Only where the API reads the marker: tool inputs and schemas may well have a field of that name.
    if payload.get(_CACHE_CONTROL) is not None:
        return True
    if _marked(payload.get("system")) or _marked(payload.get("tools")):
        return True
    messages = payload.get("messages")
    return isinstance(messages, list) and any(
        isinstance(message, dict) and _marked(message.get("content")) for message in messages
    )


def native_feature_of(payload: dict[str, Any], body: bytes) -> str | None:
    """The native-only feature a Messages request uses ("extended thinking", "prompt caching"), or None."""
    thinking = payload.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        return "extended thinking"
    # The byte scan spares the walk through every block of the requests that cache nothing (most).
    if _CACHE_CONTROL_BYTES in body and _uses_prompt_caching(payload):
        return "prompt caching"
    return None


class NativeFeatures(Plugin):
    """Narrows the rows of thinking, caching and token-counting requests to the native providers."""

    name = "native_features"
    requires = frozenset({"body", "model", "payload", "route", "rows"})
    provides = frozenset({"rows"})
    essential = True

    def on_request(self, ctx: RequestContext) -> None:
        route = ctx.matched_route
        if route.counts_tokens:
            feature = "token counting"
        elif route.kind == "messages" and ctx.payload is not None:
            feature = native_feature_of(ctx.payload, ctx.body)
            if feature is None:
                return
        else:
            return
        native = [row for row in ctx.rows if row.upstream.native_messages]
        if native:
            ctx.rows = native
            return
        model = ctx.routed_model  # set by model routing: both routes name a model
        name = model.name
        if any(row.upstream.native_messages for row in model.rows):
            reason = f"none of the rows the 'provider' object left for model {name!r} is native"
        else:
            reason = f"model {name!r} has none"
        path = route.path
        raise InvalidRequest(f"{feature} is only available on the native providers of {path}; {reason}")
