"""The translators known to the forwarder, by (route name, provider kind)."""

from __future__ import annotations

from modelgate.proxy.translation.base import Translator

_REGISTRY: dict[tuple[str, str], Translator] = {}
# A provider flagged `native_messages` serves these routes itself, whatever its wire kind.
_MESSAGES_ROUTES = frozenset({"messages", "messages_count_tokens"})


def register(route_name: str, upstream_kind: str, translator: Translator) -> None:
    """Make a translator known (called once at import of each translation module)."""
    _REGISTRY[(route_name, upstream_kind)] = translator


def translator_for(
    route_name: str, upstream_kind: str, native_messages: bool = False, native_responses: bool = True
) -> Translator | None:
    """The translator for a route on a provider kind, or None when no translation is needed.

    An OpenAI-kind host speaks the Responses API unless its dialect says otherwise (`native_responses`:
    Bedrock Converse, Gemini and Vertex take chat completions only)."""
    if native_messages and route_name in _MESSAGES_ROUTES:
        return None
    if native_responses and route_name == "responses" and upstream_kind == "openai":
        return None
    return _REGISTRY.get((route_name, upstream_kind))
