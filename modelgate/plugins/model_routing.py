"""Model routing: the model named by the request must exist and serve the route's request kind.

Unknown model, or a model that does not serve this kind → 404 `model_not_found`. The candidate rows are
left on the context for the provider filter and the forwarder.
"""

from __future__ import annotations

from modelgate.domain.errors import InvalidRequest, ModelNotFound
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.upstream.model_rows import ModelCatalog


def model_not_found(name: str) -> ModelNotFound:
    return ModelNotFound(f"The model `{name}` does not exist or you do not have access to it.")


class ModelRouting(Plugin):
    """Resolves `model` to its configured rows."""

    name = "model_routing"
    requires = frozenset({"route", "payload"})
    provides = frozenset({"model", "rows"})
    essential = True

    def __init__(self, catalog: ModelCatalog) -> None:
        self._catalog = catalog

    def on_request(self, ctx: RequestContext) -> None:
        route = ctx.matched_route
        if route.kind is None or route.has_id:
            return
        name = ctx.payload.get("model") if ctx.payload is not None else None
        if not isinstance(name, str) or not name:
            raise InvalidRequest("you must provide a model parameter (a non-empty string)")
        entry = self._catalog.get(name)
        if entry is None or route.kind not in entry.kinds:
            raise model_not_found(name)
        ctx.model = entry
        ctx.rows = list(entry.rows)
