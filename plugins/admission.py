"""Admission: the one step where a request takes what it needs from the shared counters, all or nothing.

The request id claim (`plugins.request_id`), the rate windows (`plugins.rate_limits`) and the reservations
on the balance and budgets (`plugins.billing_gate`) are recorded by their plugins in the request's
`AdmissionState` (proxy.pipeline.context); this step, right after the billing gate, asks the counters for
all of them at once (in Redis: one script, one round trip). A refusal is the error of the first plugin in
chain order that would have refused: 409 `request_in_progress`, then 429 with the window's headers, then
402; nothing is taken.
"""

from __future__ import annotations

from modelgate.domain.accounts import refusal
from modelgate.domain.counters import Admitted, Counters, Refusal
from modelgate.domain.errors import RateLimited, RequestInProgress
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import AdmissionState, RequestContext


def pending(ctx: RequestContext) -> AdmissionState:
    """The request's admission record, for a step about to record an ask in it."""
    return ctx.admission


async def admit(counters: Counters, ctx: RequestContext) -> None:
    """Take everything the request recorded, or raise the refusal; once per request."""
    admission = ctx.admission
    if not admission.asked or admission.taken:
        return
    windows = admission.windows
    result = await counters.admit_request(admission.claim, windows, admission.money)
    if result.refusal != Refusal.NONE:
        raise _refusal(ctx, admission, result)
    admission.taken = True
    if windows:
        _report_windows(ctx, admission, result)
    money = admission.money
    if money:
        admission.reserved_micros = money[0].amount
        reservations = admission.reservations
        for ask in money:  # usually one (the balance): a loop, not a generator to extend by
            reservations.append((ask.key, ask.amount))
        if admission.budgets:
            admission.charged_budgets.extend([(rule.id, start) for rule, start in admission.budgets])


class Admission(Plugin):
    """Takes the request's claim, window places and reservations in one step (see the module)."""

    name = "admission"
    provides = frozenset({"admission"})
    essential = True

    def __init__(self, counters: Counters) -> None:
        self._counters = counters

    async def on_request(self, ctx: RequestContext) -> None:
        if ctx.admission.asked:
            await admit(self._counters, ctx)


def _refusal(ctx: RequestContext, admission: AdmissionState, result: Admitted) -> Exception:
    if result.refusal == Refusal.CLAIM:
        return RequestInProgress(f"a request with id {ctx.request_id} is already in progress")
    if result.refusal == Refusal.WINDOW:
        refused = len(result.windows) - 1
        last = result.windows[refused]
        _window, _amount, limit = admission.windows[refused]
        unit = "tokens" if refused >= admission.first_tpm else "requests"
        retry = max(last.reset_seconds, 1)
        return RateLimited(
            f"Rate limit reached: {limit} {unit} per minute. Retry in {retry}s.",
            headers={
                "retry-after": str(retry),
                f"x-ratelimit-limit-{unit}": str(limit),
                f"x-ratelimit-remaining-{unit}": str(max(limit - last.used, 0)),
                f"x-ratelimit-reset-{unit}": f"{retry}s",
            },
        )
    index = result.money_index
    return refusal(result.money_outcome, admission.budgets[index - 1][0] if index > 0 else None)


def _report_windows(ctx: RequestContext, admission: AdmissionState, result: Admitted) -> None:
    """Answers carry the key's own windows; the token windows are kept to correct them to the real usage."""
    headers = ctx.response_headers
    results = result.windows
    key_rpm, key_tpm, first_tpm = admission.key_rpm, admission.key_tpm, admission.first_tpm
    if key_rpm:
        window = results[0]
        headers["x-ratelimit-limit-requests"] = str(key_rpm)
        headers["x-ratelimit-remaining-requests"] = str(max(key_rpm - window.used, 0))
        headers["x-ratelimit-reset-requests"] = f"{window.reset_seconds}s"
    if first_tpm < len(results):
        for (key, amount, _limit), window in zip(
            admission.windows[first_tpm:], results[first_tpm:], strict=True
        ):
            admission.token_windows.append((key, window.second, amount))
        if key_tpm:
            window = results[first_tpm]
            headers["x-ratelimit-limit-tokens"] = str(key_tpm)
            headers["x-ratelimit-remaining-tokens"] = str(max(key_tpm - window.used, 0))
            headers["x-ratelimit-reset-tokens"] = f"{window.reset_seconds}s"
