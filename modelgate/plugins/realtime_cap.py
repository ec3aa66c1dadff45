"""The realtime concurrency cap: at most the plan's `realtime_concurrency` open sessions per organization
(0 = no cap), counted across every gateway process when the counters live in Redis. Over the cap → 429
`rate_limit_exceeded`; the slot is given back when the session ends, however it ends.
"""

from __future__ import annotations

from collections.abc import Awaitable

from modelgate.config import Config
from modelgate.domain.accounts import org_tag
from modelgate.domain.counters import Counters
from modelgate.domain.errors import RateLimited
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.realtime.secrets import RealtimeClaim


class RealtimeCap(Plugin):
    """Holds one slot of the organization's realtime cap for each session."""

    name = "realtime_cap"
    requires = frozenset({"key", "model", "realtime"})
    essential = True

    def __init__(self, config: Config, counters: Counters) -> None:
        self._caps = {plan.code: plan.realtime_concurrency for plan in config.plans}
        self._counters = counters

    def on_request(self, ctx: RequestContext) -> Awaitable[None] | None:
        # A plain function: only a realtime session waits (for its slot).
        if ctx.realtime is None or ctx.model is None:
            return None
        return self._hold_slot(ctx, ctx.realtime)

    async def _hold_slot(self, ctx: RequestContext, claim: RealtimeClaim) -> None:
        cap = self._caps.get(ctx.api_key.plan_code, 0)
        if cap <= 0:
            return
        slot = f"rt:o:{org_tag(ctx.api_key.organization_id)}"
        if not await self._counters.acquire(slot, cap):
            raise RateLimited(
                f"Realtime concurrency cap reached: at most {cap} open realtime session(s) per organization. "
                "Close a session and retry."
            )
        claim.slot = slot

    def on_complete(self, ctx: RequestContext) -> Awaitable[None] | None:
        claim = ctx.realtime
        if claim is not None and claim.slot is not None:
            claim.slot, slot = None, claim.slot
            return self._counters.release(slot)
        return None
