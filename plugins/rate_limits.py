"""RPM and TPM limits per key and per organization: sliding 60-second windows, exact across processes
when the counters live in Redis.

The organization's windows use the plan's limits; the key's windows use the most specific policy rule's
override, else the plan's. TPM reserves the request's estimated tokens up front and is corrected to the
real usage when the answer is complete. Refusals are 429 `rate_limit_exceeded` with `retry-after`;
answers carry `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the key's windows.
"""

from __future__ import annotations

from config import Config
from plugins.base import Plugin
from proxy.billing.counters import Counters
from proxy.billing.prices import ensure_estimate
from proxy.context import RequestContext
from proxy.errors import RateLimited


class RateLimits(Plugin):
    """Admits a request into its request and token windows, or stops it with 429."""

    name = "rate_limits"

    def __init__(self, config: Config, counters: Counters) -> None:
        self._plans = {plan.code: plan for plan in config.plans}
        self._counters = counters

    async def on_request(self, ctx: RequestContext) -> None:
        if ctx.model is None:
            return
        key, decision = ctx.key, ctx.decision
        plan = self._plans.get(key.plan_code)
        plan_rpm, plan_tpm = (plan.rpm, plan.tpm) if plan else (0, 0)
        key_rpm = decision.rpm if decision is not None and decision.rpm is not None else plan_rpm
        key_tpm = decision.tpm if decision is not None and decision.tpm is not None else plan_tpm
        ensure_estimate(ctx)
        tokens = ctx.estimated_input_tokens + ctx.max_output_tokens
        headers = ctx.response_headers
        if key_rpm:
            result = await self._take(f"rpm:k:{key.id}", 1, key_rpm, "requests")
            headers["x-ratelimit-limit-requests"] = str(key_rpm)
            headers["x-ratelimit-remaining-requests"] = str(max(key_rpm - result.used, 0))
            headers["x-ratelimit-reset-requests"] = f"{result.reset_seconds}s"
        if plan_rpm:
            await self._take(f"rpm:o:{key.organization_id}", 1, plan_rpm, "requests")
        if key_tpm:
            result = await self._take(f"tpm:k:{key.id}", tokens, key_tpm, "tokens")
            ctx.token_windows.append((f"tpm:k:{key.id}", result.second, tokens))
            headers["x-ratelimit-limit-tokens"] = str(key_tpm)
            headers["x-ratelimit-remaining-tokens"] = str(max(key_tpm - result.used, 0))
            headers["x-ratelimit-reset-tokens"] = f"{result.reset_seconds}s"
        if plan_tpm:
            result = await self._take(f"tpm:o:{key.organization_id}", tokens, plan_tpm, "tokens")
            ctx.token_windows.append((f"tpm:o:{key.organization_id}", result.second, tokens))

    async def _take(self, window: str, amount: int, limit: int, unit: str):
        result = await self._counters.take(window, amount, limit)
        if not result.allowed:
            retry = max(result.reset_seconds, 1)
            raise RateLimited(
                f"Rate limit reached: {limit} {unit} per minute. Retry in {retry}s.",
                headers={
                    "retry-after": str(retry),
                    f"x-ratelimit-limit-{unit}": str(limit),
                    f"x-ratelimit-remaining-{unit}": str(max(limit - result.used, 0)),
                    f"x-ratelimit-reset-{unit}": f"{retry}s",
                },
            )
        return result

    async def on_complete(self, ctx: RequestContext) -> None:
        if not ctx.token_windows:
            return
        usage = ctx.usage
        actual = (
            usage.input_tokens + usage.output_tokens
            if usage is not None
            else (0 if ctx.bytes_sent == 0 else None)
        )
        for window, second, reserved in ctx.token_windows:
            if actual is not None and actual != reserved:
                await self._counters.adjust(window, second, actual - reserved)
