"""Admission: the one step where a request takes what it needs from the shared counters, all or nothing.

The request id claim (`plugins.request_id`), the rate windows (`plugins.rate_limits`) and the reservations
on the balance and budgets (`plugins.billing_gate`) are recorded by their plugins in the request's
`AdmissionState` (proxy.pipeline.context); this step, right after the billing gate, asks the counters for
all of them at once (in Redis: one script, one round trip). A refusal is the error of the first plugin in
chain order that would have refused: 409 `request_in_progress`, then 429 with the window's headers, then
402; nothing is taken.
"""

from __future__ import annotations

import time

from modelgate.domain.accounts import BudgetAsks, refusal
from modelgate.domain.counters import Admitted, Counters, Refusal, WindowResult
from modelgate.domain.errors import RateLimited, RequestInProgress
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import AdmissionState, RequestContext


def pending(ctx: RequestContext) -> AdmissionState:
    """The request's admission record, for a step about to record an ask in it."""
    return ctx.admission


async def admit(counters: Counters, ctx: RequestContext) -> None:
    """Take everything the request recorded, or raise the refusal; once per request."""
    admission = ctx.admission
    if admission.asked and not admission.taken:
        result = await counters.admit_request(admission.claim, admission.windows, admission.money)
        _hold(ctx, admission, result)


def _hold(
    ctx: RequestContext,
    admission: AdmissionState,
    result: Admitted,
    budget_asks: BudgetAsks | None = None,
) -> None:
    """Record what the counters' answer holds for the request, or raise its refusal."""
    if result.refusal != Refusal.NONE:
        if budget_asks is not None and result.refusal == Refusal.MONEY and result.money_index > 0:
            ask = admission.money[result.money_index]  # a budget's (index 0 is the balance)
            budget_asks.record(ask.key, ask.amount, time.time(), True)
        raise _refusal(ctx, admission, result)
    admission.taken = True
    if admission.windows:
        _report_windows(ctx, admission, result)
    money = admission.money
    if money:
        admission.reserved_micros = money[0].amount
        reservations = admission.reservations
        for ask in money:  # usually one (the balance): a loop, not a generator to extend by
            reservations.append((ask.key, ask.amount))
        if admission.budgets:
            admission.charged_budgets.extend([(rule.id, start) for rule, start in admission.budgets])
            if budget_asks is not None:  # only requests under a budget pay for this
                at = time.time()
                for ask in money[1:]:
                    budget_asks.record(ask.key, ask.amount, at, False)


class Admission(Plugin):
    """Takes the request's claim, window places and reservations in one step (see the module)."""

    name = "admission"
    requires = frozenset({"response_headers"})
    provides = frozenset({"admission"})
    essential = True

    def __init__(self, counters: Counters, budget_asks: BudgetAsks | None = None) -> None:
        self._counters = counters
        self._budget_asks = budget_asks  # what each budget was asked, for the cabinet's meters

    async def on_request(self, ctx: RequestContext) -> None:
        # `admit` written out: every request passes here, and awaiting admit() would add a coroutine.
        admission = ctx.admission
        if admission.asked and not admission.taken:
            result = await self._counters.admit_request(admission.claim, admission.windows, admission.money)
            _hold(ctx, admission, result, self._budget_asks)


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


# Header values repeat (limits, remaining requests, seconds to reset): the small ones are formatted once,
# here, rather than by str() and an f-string on every answer.
_FORMATTED = 1024
_DECIMALS = tuple(str(number) for number in range(_FORMATTED))
_SECONDS = tuple(f"{number}s" for number in range(_FORMATTED))
_REQUEST_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
)
_TOKEN_HEADERS = ("x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")


def _report_windows(ctx: RequestContext, admission: AdmissionState, result: Admitted) -> None:
    """Answers carry the key's own windows; the token windows are kept to correct them to the real usage."""
    # Every admitted request runs this: indexes rather than slices and zip.
    results = result.windows
    key_rpm, key_tpm, first_tpm = admission.key_rpm, admission.key_tpm, admission.first_tpm
    if key_rpm:
        _report_window(ctx.response_headers, _REQUEST_HEADERS, key_rpm, results[0])
    count = len(results)
    if first_tpm < count:
        asks, token_windows = admission.windows, admission.token_windows
        for index in range(first_tpm, count):
            key, amount, _limit = asks[index]
            token_windows.append((key, results[index].second, amount))
        if key_tpm:
            _report_window(ctx.response_headers, _TOKEN_HEADERS, key_tpm, results[first_tpm])


def _report_window(
    headers: dict[str, str], names: tuple[str, str, str], limit: int, window: WindowResult
) -> None:
    limit_name, remaining_name, reset_name = names
    remaining = limit - window.used
    if remaining < 0:  # a conditional, not max(): several times cheaper
        remaining = 0
    reset = window.reset_seconds
    headers[limit_name] = _DECIMALS[limit] if limit < _FORMATTED else str(limit)
    headers[remaining_name] = _DECIMALS[remaining] if remaining < _FORMATTED else str(remaining)
    headers[reset_name] = _SECONDS[reset] if 0 <= reset < _FORMATTED else f"{reset}s"
