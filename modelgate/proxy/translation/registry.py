"""The translators known to the forwarder, by (route name, provider kind)."""

from __future__ import annotations

from modelgate.proxy.translation.base import Translator

_REGISTRY: dict[tuple[str, str], Translator] = {}
# A provider flagged `native_messages` serves these routes itself, whatever its wire kind.
_MESSAGES_ROUTES = frozenset({"messages", "messages_count_tokens"})


def register(route_name: str, upstream_kind: str, translator: Translator) -> None:
    """Make a translator known (called once at import of each translation module)."""
    _REGISTRY[(route_name, upstream_kind)] = translator


def translator_for(route_name: str, upstream_kind: str, native_messages: bool = False) -> Translator | None:
    """The translator for a route on a provider kind, or None when no translation is needed."""
    if native_messages and route_name in _MESSAGES_ROUTES:
        return None
    return _REGISTRY.get((route_name, upstream_kind))
