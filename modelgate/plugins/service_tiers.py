"""Service tiers: a request that asks for a tier (`service_tier`: OpenAI's `priority` / `flex` / `scale`,
Anthropic's) is served only when its model's price sheet prices that tier — else 400 naming it, before
anything is reserved or sent, so no tier is ever charged at the default rates. `auto`, `default` and
`standard` are the sheet's own rates (the answer's `service_tier` then says which rates apply).
"""

from __future__ import annotations

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext


class ServiceTiers(Plugin):
    """400 on a `service_tier` the model's price sheet does not price."""

    name = "service_tiers"
    requires = frozenset({"model", "payload"})
    essential = True  # the charge of a tier is only right when its prices are known

    def on_request(self, ctx: RequestContext) -> None:
        payload = ctx.payload
        if ctx.model is None or payload is None:
            return
        tier = payload.get("service_tier")
        if tier is None or ctx.model.prices.prices_tier(tier):
            return
        if not isinstance(tier, str):
            raise InvalidRequest("Invalid 'service_tier': expected a string.")
        raise InvalidRequest(
            f"Invalid 'service_tier': {tier!r} is not priced for model {ctx.model.name!r};"
            f" ask for one it prices or leave it out."
        )
