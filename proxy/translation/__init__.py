"""Wire-format translation between the route the client called and the kind of provider a row is on.

`translator_for(route_name, upstream_kind)` returns None when the row speaks the route's format natively.
"""

from __future__ import annotations

from proxy.translation.base import StreamTranslator, Translator

_REGISTRY: dict[tuple[str, str], Translator] = {}


def register(route_name: str, upstream_kind: str, translator: Translator) -> None:
    """Make a translator known (called once at import of each translation module)."""
    _REGISTRY[(route_name, upstream_kind)] = translator


def translator_for(route_name: str, upstream_kind: str) -> Translator | None:
    """The translator for a route on a provider kind, or None when no translation is needed."""
    return _REGISTRY.get((route_name, upstream_kind))


__all__ = ["StreamTranslator", "Translator", "register", "translator_for"]
