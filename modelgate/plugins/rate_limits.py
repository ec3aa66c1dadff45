"""RPM and TPM limits per key and per organization: sliding 60-second windows, exact across processes
when the counters live in Redis.

The organization's windows use the plan's limits; the key's windows use the most specific policy rule's
override, else the plan's. TPM reserves the request's estimated tokens up front and is corrected to the
real usage when the answer is complete (batched with the settlements, off the request path). The admission
step (`plugins.admission`) takes the windows. Refusals are 429 `rate_limit_exceeded` with `retry-after`;
answers carry `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the key's windows. A request
whose reservation alone exceeds a TPM limit can never be admitted: its 429 says so, carries no retry hints and
`x-should-retry: false`, so SDKs do not retry it.
"""

from __future__ import annotations

from modelgate.config import Config
from modelgate.domain.counters import Counters
from modelgate.domain.errors import RateLimited
from modelgate.plugins.output_caps import ensure_estimate
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext

_NO_LIMITS = (0, 0)  # (rpm, tpm) of a key whose plan is not in the config


class RateLimits(Plugin):
    """Admits a request into its request and token windows, or stops it with 429."""

    name = "rate_limits"
    requires = frozenset(
        {"body", "body_stream", "bytes_sent", "decision", "key", "metering", "model", "payload", "route"}
    )
    provides = frozenset({"admission", "payload_changed"})

    def __init__(self, config: Config, counters: Counters) -> None:
        self._plan_limits = {plan.code: (plan.rpm, plan.tpm) for plan in config.plans}
        self._counters = counters

    def on_request(self, ctx: RequestContext) -> None:
        if ctx.model is None:
            return
        key, decision, admission = ctx.api_key, ctx.decision, ctx.admission
        plan_rpm, plan_tpm = self._plan_limits.get(key.plan_code, _NO_LIMITS)
        key_rpm = decision.rpm if decision is not None and decision.rpm is not None else plan_rpm
        key_tpm = decision.tpm if decision is not None and decision.tpm is not None else plan_tpm
        if not admission.max_output_tokens:  # usually filled in already (plugins.output_caps)
            ensure_estimate(ctx)
        tokens = admission.estimated_input_tokens + admission.max_output_tokens
        _refuse_if_it_never_fits(tokens, key_tpm, plan_tpm)
        if not (key_rpm or plan_rpm or key_tpm or plan_tpm):
            return
        # The windows this request counts in (a limit of 0 is none): the key's, then its organization's.
        # The admission step takes them all at once, or none (plugins.admission).
        asks = admission.windows
        if key_rpm:
            asks.append((key.rpm_window, 1, key_rpm))
        if plan_rpm:
            asks.append((key.org_rpm_window, 1, plan_rpm))
        admission.first_tpm = len(asks)  # the token windows follow the request windows
        if key_tpm:
            asks.append((key.tpm_window, tokens, key_tpm))
        if plan_tpm:
            asks.append((key.org_tpm_window, tokens, plan_tpm))
        admission.key_rpm, admission.key_tpm = key_rpm, key_tpm

    async def on_complete(self, ctx: RequestContext) -> None:
        token_windows = ctx.admission.token_windows
        if not token_windows:
            return
        usage = ctx.metering.usage
        if usage is not None:
            actual = usage.input_tokens + usage.output_tokens
        elif ctx.bytes_sent == 0:
            actual = 0
        else:
            return  # answered, but how much it used is unknown: the reservation stands
        for window, second, reserved in token_windows:
            if actual != reserved:
                await self._counters.adjust(window, second, actual - reserved)


def _refuse_if_it_never_fits(tokens: int, key_tpm: int, plan_tpm: int) -> None:
    """429 without retry hints when the reservation alone is over a TPM limit: waiting would not help."""
    limit = key_tpm if key_tpm and (not plan_tpm or key_tpm < plan_tpm) else plan_tpm  # the lower set one
    if limit and tokens > limit:
        raise RateLimited(
            f"This request needs {tokens} tokens, more than the TPM limit of {limit}; lower max_tokens or"
            " the prompt.",
            headers={"x-should-retry": "false"},  # openai and anthropic SDKs obey it; 429 alone is retried
        )
