"""The request's `provider` object: `only` (provider names) and `host` keep only matching rows.

Invalid values, unknown names or no matching row → 400 in envelope A (also on /v1/messages, as the spec
says). The object is removed before the request is forwarded.
"""

from __future__ import annotations

from modelgate.domain.errors import InvalidProviderObject
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.upstream.model_rows import ModelCatalog

_KNOWN_FIELDS = frozenset({"only", "host"})


class ProviderFilter(Plugin):
    """Applies and strips the `provider` object."""

    name = "provider_filter"
    requires = frozenset({"body_stream", "model", "payload", "rows"})
    provides = frozenset({"payload_changed", "rows"})
    essential = True

    def __init__(self, catalog: ModelCatalog) -> None:
        self._catalog = catalog

    def on_request(self, ctx: RequestContext) -> None:
        payload = ctx.payload
        # A multipart body cannot carry the object (and is relayed as it came).
        if payload is None or "provider" not in payload or ctx.body_stream is not None:
            return
        spec = payload.pop("provider")
        ctx.payload_changed = True
        if not isinstance(spec, dict):
            raise InvalidProviderObject("'provider' must be an object with 'only' and/or 'host'")
        unknown = set(spec) - _KNOWN_FIELDS
        if unknown:
            raise InvalidProviderObject(f"unknown field(s) in 'provider': {', '.join(sorted(unknown))}")
        only = spec.get("only")
        if only is not None:
            names = [only] if isinstance(only, str) else only
            if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
                raise InvalidProviderObject(
                    "'provider.only' must be a provider name or a non-empty list of names"
                )
            unknown_names = [n for n in names if n not in self._catalog.provider_names]
            if unknown_names:
                raise InvalidProviderObject(
                    f"'provider.only' names unknown provider(s): {', '.join(unknown_names)}"
                )
            wanted = set(names)
            ctx.rows = [r for r in ctx.rows if r.provider in wanted]
        host = spec.get("host")
        if host is not None:
            if not isinstance(host, str) or not host:
                raise InvalidProviderObject("'provider.host' must be a non-empty host name")
            if host not in self._catalog.host_names:
                raise InvalidProviderObject(f"'provider.host' names an unknown host: {host}")
            ctx.rows = [r for r in ctx.rows if r.host == host]
        if not ctx.rows:
            model = ctx.model.name if ctx.model else payload.get("model")
            raise InvalidProviderObject(f"no routing row of model {model!r} matches the 'provider' object")
