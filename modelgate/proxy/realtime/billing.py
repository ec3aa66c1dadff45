"""Realtime sessions are billed per model response, as the session goes.

A response is reserved before it runs: at the client's `response.create` (not forwarded when the reservation
is refused), or at the upstream's `response.created` for one the server started by itself (server VAD;
cancelled upstream when refused). Each `response.done` settles its reservation to the cost of the usage it
reports, capped at the reservation, and writes that response's ledger row at once. Responses still running
when the session ends are released and recorded with what is known of them.

Worst case of one response: its output allowance (the response's `max_output_tokens`, else the session's,
else the model's `default_max_tokens`) plus an input bound. A realtime response re-reads the whole
conversation, which the gateway cannot count, so the bound is: the input and output tokens the previous
response reported (the conversation so far) + the text the client sent since, at 2 bytes a token like any
request body (audio appends excluded) + `default_max_tokens` for the turn's speech. A response that somehow
costs more is charged its reservation, never more, so the balance never goes below what the plan allows.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from modelgate.domain.accounts import Accounts
from modelgate.domain.errors import GatewayError
from modelgate.domain.ledger import CRASHED, LedgerWriter
from modelgate.domain.prices import ModelPrices
from modelgate.domain.usage import Usage, merge_usage
from modelgate.proxy.pipeline.context import RequestContext, entry_for

log = logging.getLogger("modelgate.realtime")

# Names of the output allowance: the GA realtime API, then the beta one.
_OUTPUT_CAPS = ("max_output_tokens", "max_response_output_tokens")
_AUDIO_APPEND = "input_audio_buffer.append"
# The status of a ledger row for a response the session's end cut short, by how the session ended.
_END_STATUS = {"client_closed": 499, "upstream_error": 502, "shutdown": 503}

T = TypeVar("T")


def _tokens(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def output_cap(options: dict | None) -> int | None:
    """The numeric output allowance a session or response object sets (`"inf"` or none: None)."""
    if isinstance(options, dict):
        for name in _OUTPUT_CAPS:
            cap = _tokens(options.get(name))
            if cap is not None:
                return cap
    return None


def realtime_usage(reported: dict) -> Usage:
    """A `response.done` usage object as Usage: realtime's `input_token_details` (cached, audio and image
    tokens, the cached ones' own audio and image) and `output_token_details` (audio) are read by
    merge_usage, so each is charged at its rate."""
    usage = Usage()
    merge_usage(usage, reported)
    return usage


def error_event(error: GatewayError, client_event_id: str | None = None) -> dict:
    """An OpenAI realtime `error` event for a gateway refusal."""
    return {
        "type": "error",
        "event_id": "event_" + secrets.token_hex(8),
        "error": {
            "type": error.type_a,
            "code": error.code,
            "message": error.message,
            "param": None,
            "event_id": client_event_id,
        },
    }


@dataclass(slots=True)
class ResponseHold:
    """What one response holds until it is done: `amount` on the balance and on each policy budget."""

    amount: int
    counters: tuple[str, ...]  # the balance counter, then one per budget
    budgets: tuple[tuple[str, float], ...]  # (rule id, period start) charged with the response's cost
    event_id: str | None = None  # of the client's response.create (upstream errors name it)
    row_id: str | None = None  # its admission in the ledger (see `SessionBilling._hold`)


async def hold_response(accounts: Accounts, ctx: RequestContext, amount: int) -> ResponseHold:
    """Reserve `amount` on the organization's balance and every budget that applies, or raise 402."""
    key = ctx.api_key
    await accounts.reserve_balance(key.organization_id, key.plan_code, amount, key.balance_counter)
    counters, budgets = [key.balance_counter], []
    try:
        if ctx.decision is not None and ctx.decision.budget_rules:
            now = time.time()
            for rule in ctx.decision.budget_rules:
                counter, start = await accounts.reserve_budget(rule, amount, now)
                counters.append(counter)
                budgets.append((rule.id, start))
    except BaseException:
        for counter in counters:
            await accounts.settle(counter, amount, 0)
        raise
    return ResponseHold(amount, tuple(counters), tuple(budgets))


async def settle_response(accounts: Accounts, hold: ResponseHold, cost: int) -> None:
    amount = hold.amount
    await accounts.settle_all([(counter, amount) for counter in hold.counters], cost, hold.row_id)


def response_worst_case(prices: ModelPrices, cap: int | None, context_tokens: int, text_bytes: int) -> int:
    """The most one response can cost (see the module docstring for the input bound)."""
    default = prices.default_max_tokens
    return prices.worst_case(context_tokens + text_bytes // 2 + default, cap or default)


async def check_one_response(accounts: Accounts, ctx: RequestContext) -> None:
    """402 before the upgrade unless the organization can afford one response now; holds nothing."""
    if ctx.model is None or ctx.key is None:
        return
    session = ctx.realtime.secret.session if ctx.realtime is not None else {}
    opening = len(orjson.dumps(session)) if session else 0
    worst = response_worst_case(ctx.model.prices, output_cap(session), 0, opening)
    hold = await hold_response(accounts, ctx, worst)
    await settle_response(accounts, hold, 0)


class SessionBilling:
    """Reserves, settles and records each response of one realtime session."""

    def __init__(self, accounts: Accounts, ledger: LedgerWriter, ctx: RequestContext) -> None:
        self._accounts = accounts
        self._ledger = ledger
        self._ctx = ctx
        self._pending: deque[ResponseHold] = deque()  # client-reserved, not yet announced by upstream
        self._running: dict[str, ResponseHold] = {}  # by response id
        self._refused: set[str] = set()  # server-started responses cancelled for want of balance
        self._numbers = itertools.count(1)
        self._holds = itertools.count(1)
        self._session_cap: int | None = None
        self._context_tokens = 0  # the conversation so far, as the last response reported it
        self._text_bytes = 0  # client text since the last response (audio appends excluded)
        self._operations: set[asyncio.Task] = set()
        ctx.metering.usage = Usage()
        ctx.metering.cost_micros = 0

    @property
    def running(self) -> tuple[str, ...]:
        """Ids of the responses started and not done."""
        return tuple(self._running)

    @property
    def in_flight(self) -> bool:
        """Whether a response is reserved and not done (started, or asked for and not announced yet)."""
        return bool(self._running or self._pending)

    def open_with(self, session: dict) -> None:
        """The session options the gateway itself sends upstream as the session opens."""
        self._watch_session(session)
        self._text_bytes += len(orjson.dumps(session))

    def _watch_session(self, session: Any) -> None:
        if isinstance(session, dict) and any(name in session for name in _OUTPUT_CAPS):
            self._session_cap = output_cap(session)  # "inf" lifts an earlier numeric cap

    def _worst_case(self, response: Any) -> int:
        cap = output_cap(response) or self._session_cap
        return response_worst_case(self._ctx.routed_model.prices, cap, self._context_tokens, self._text_bytes)

    # -- client to upstream -----------------------------------------------------------------------------

    async def from_client(self, text: str) -> dict | None:
        """A client text frame on its way upstream: None to forward it, or the error event to answer with.

        Every frame is parsed (orjson reads base64 audio about as fast as one substring search over it): a
        substring test could be fooled into letting a `response.create` pass unreserved.
        """
        event = _parse(text)
        kind = event.get("type")
        if kind == _AUDIO_APPEND:  # most frames: audio, counted in the turn's allowance, not as text
            return None
        self._text_bytes += len(text)
        if kind == "session.update":
            self._watch_session(event.get("session"))
        elif kind == "response.create":
            return await self._guarded(self._reserve_asked(event))
        return None

    async def _reserve_asked(self, event: dict) -> dict | None:
        client_event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        try:
            hold = await self._hold(self._worst_case(event.get("response")))
        except GatewayError as refusal:
            self._record_refusal(str(next(self._numbers)), refusal)
            return error_event(refusal, client_event_id)
        hold.event_id = client_event_id
        self._pending.append(hold)
        return None

    # -- upstream to client -----------------------------------------------------------------------------

    async def from_upstream(self, text: str, outcome: str = "completed") -> tuple[dict, dict] | None:
        """An upstream text frame on its way to the client: None to pass it on as it is, or a refused
        server-started response's (cancel event for upstream, error event for the client)."""
        event = _parse(text)
        kind = event.get("type")
        if kind == "response.created":
            return await self._guarded(self._created(event.get("response")))
        if kind == "response.done":
            await self._guarded(self._done(event.get("response"), outcome))
        elif kind == "error":
            await self._guarded(self._upstream_refused(event.get("error")))
        return None

    async def _hold(self, amount: int) -> ResponseHold:
        """Reserve one response, then journal it in the ledger: should the process die before the response
        is done, its row is charged what the live counter settled for it (nothing when it settled none)."""
        ctx = self._ctx
        hold = await hold_response(self._accounts, ctx, amount)
        row_key = ctx.row.key if ctx.row else None
        request_id = f"{ctx.request_id}:held-{next(self._holds)}"
        crash = entry_for(
            ctx, None, 0, 0, CRASHED, request_id=request_id, budgets=hold.budgets, row_key=row_key
        )
        hold.row_id = self._ledger.admit(crash)
        return hold

    def _guarded(self, operation: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """Run a reservation or settlement to its end even if the relay is cancelled meanwhile (the session
        ending), so nothing is left held or settled without its ledger row; `end` waits for it."""
        task = asyncio.ensure_future(operation)
        self._operations.add(task)
        task.add_done_callback(self._operations.discard)
        return asyncio.shield(task)

    async def _created(self, response: Any) -> tuple[dict, dict] | None:
        response_id = _response_id(response)
        if response_id is None or response_id in self._running:
            return None
        if self._pending:
            self._running[response_id] = self._pending.popleft()
            return None
        try:  # started by the server itself (server VAD)
            hold = await self._hold(self._worst_case(response))
        except GatewayError as refusal:
            self._refused.add(response_id)
            self._record_refusal(response_id, refusal)
            return {"type": "response.cancel", "response_id": response_id}, error_event(refusal)
        self._running[response_id] = hold
        return None

    async def _done(self, response: Any, outcome: str) -> None:
        response_id = _response_id(response) or str(next(self._numbers))
        reported = response.get("usage") if isinstance(response, dict) else None
        usage = realtime_usage(reported) if isinstance(reported, dict) else None
        if response_id in self._refused:
            self._refused.discard(response_id)  # its refusal is recorded; nothing was reserved to charge
            return
        hold = self._running.pop(response_id, None)
        if hold is None and self._pending:  # an upstream that does not announce responses
            hold = self._pending.popleft()
        if hold is None:
            hold = await self._hold_unannounced(response_id, usage)
        if usage is not None:
            self._context_tokens = usage.input_tokens + usage.output_tokens
            self._text_bytes = 0
        await self._finish(hold, response_id, usage, 200, outcome)

    async def _hold_unannounced(self, response_id: str, usage: Usage | None) -> ResponseHold:
        """A response.done of a response never announced: reserve its cost now, if the balance allows."""
        cost = min(self._ctx.routed_model.prices.cost(usage), self._worst_case(None)) if usage else 0
        if cost == 0:
            return ResponseHold(0, (), ())
        try:
            return await self._hold(cost)
        except GatewayError:
            log.warning(
                "realtime session %s: response %s was never announced and its cost %d is over the balance;"
                " not charged",
                self._ctx.request_id,
                response_id,
                cost,
            )
            return ResponseHold(0, (), ())

    async def _upstream_refused(self, error: Any) -> None:
        """The upstream rejected a client's response.create: its reservation is released."""
        event_id = error.get("event_id") if isinstance(error, dict) else None
        if event_id is None:
            return
        for hold in self._pending:
            if hold.event_id == event_id:
                self._pending.remove(hold)
                await settle_response(self._accounts, hold, 0)
                if hold.row_id is not None:
                    self._ledger.withdraw(hold.row_id)
                return

    # -- the end ------------------------------------------------------------------------------------------

    async def end(self, outcome: str) -> None:
        """The session ended: responses still running are released and recorded (no usage known: free)."""
        if self._operations:
            await asyncio.gather(*self._operations, return_exceptions=True)
        running, self._running = self._running, {}
        pending, self._pending = list(self._pending), deque()
        holds = [*running.items(), *((str(next(self._numbers)), hold) for hold in pending)]
        for response_id, hold in holds:
            await self._finish(hold, response_id, None, _END_STATUS.get(outcome, 499), outcome)

    async def _finish(
        self, hold: ResponseHold, response_id: str, usage: Usage | None, status: int, outcome: str
    ) -> None:
        """Settle one response to the cost of its usage (capped at its reservation) and write its row."""
        ctx = self._ctx
        cost = ctx.routed_model.prices.cost(usage) if usage is not None else 0
        if cost > hold.amount:
            log.warning(
                "realtime session %s: response %s cost %d, more than its reservation %d; charged %d",
                ctx.request_id,
                response_id,
                cost,
                hold.amount,
                hold.amount,
            )
            cost = hold.amount
        await settle_response(self._accounts, hold, cost)
        self._write(response_id, usage, cost, status, outcome, hold.budgets, hold.row_id)
        metering = ctx.metering  # the session's totals (zeroed when it opened)
        if usage is not None:
            total = metering.usage
            if total is None:
                total = metering.usage = Usage()
            total.input_tokens += usage.input_tokens
            total.cached_input_tokens += usage.cached_input_tokens
            total.output_tokens += usage.output_tokens
        metering.cost_micros = (metering.cost_micros or 0) + cost

    def _record_refusal(self, response_id: str, refusal: GatewayError) -> None:
        self._write(response_id, None, 0, refusal.status, "refused", ())

    def _write(
        self,
        response_id: str,
        usage: Usage | None,
        cost: int,
        status: int,
        outcome: str,
        budgets: tuple[tuple[str, float], ...],
        row_id: str | None = None,
    ) -> None:
        ctx = self._ctx
        request_id = f"{ctx.request_id}:{response_id}"
        row_key = ctx.row.key if ctx.row else None
        self._ledger.add(
            entry_for(
                ctx,
                usage,
                cost,
                status,
                outcome,
                request_id=request_id,
                budgets=budgets,
                row_key=row_key,
                row_id=row_id,
            )
        )


def _parse(text: str) -> dict:
    try:
        event = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return event if isinstance(event, dict) else {}


def _response_id(response: Any) -> str | None:
    response_id = response.get("id") if isinstance(response, dict) else None
    return response_id if isinstance(response_id, str) and response_id else None
