"""Output caps: a request's `max_tokens` (and the route's other cap fields) checked against its model.

A cap that is not a positive integer, or exceeds the model's `max_context_tokens`, is refused with 400;
a request that names none gets the model's default, sent upstream (billing/caps.py). This step is
essential: the check holds also where the rate-limit and billing plugins, which reserve by the cap, are
switched off.
"""

from __future__ import annotations

from modelgate.billing.caps import ensure_estimate
from modelgate.plugins.base import Plugin
from modelgate.proxy.context import RequestContext


class OutputCaps(Plugin):
    """400 on an output cap the model cannot honour; fills in the token estimate the later steps reserve."""

    name = "output_caps"
    essential = True

    def on_request(self, ctx: RequestContext) -> None:  # never waits: the chain calls it directly
        ensure_estimate(ctx)
