"""Realtime sessions are billed per model response, as the session goes.

A response is reserved before it runs: at the client's `response.create` (not forwarded when the reservation
is refused), or at the upstream's `response.created` for one the server started by itself (server VAD;
cancelled upstream when refused). Each `response.done` settles its reservation to the cost of the usage it
reports and writes that response's ledger row at once. Responses still running when the session ends are
released and recorded with what is known of them.

Worst case of one response: its output allowance (the response's `max_output_tokens`, else the session's, else
the model's `default_max_tokens`) plus an input bound. A realtime response re-reads the whole conversation,
which the gateway cannot count, so the bound is: the input and output tokens the previous response reported
(the conversation so far) + the text the client sent since, at 2 bytes a token like any request body + the
audio it appended since (`input_audio_buffer.append`: its decoded size in the session's input format, at the
model's audio input token rate, domain.charges.audio_input_tokens; a clear empties the buffer's count, and a
response's `response.done` consumes the audio committed before it was reserved) + `default_max_tokens` for the
turn's speech. The charge follows the rules of every request (modelgate/domain/charges.py): a response whose
reported usage costs more is charged in full, its row records the excess over the reservation (counted,
audited, logged), and the balance may fall below its floor by it; usage beyond the physical bound (the context
window plus the response's cap) is charged at that bound. Should the process die mid-response, the journal
charges the estimate of its prompt (the conversation so far and the text since, ~4 bytes a token).
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
from modelgate.domain.charges import Charge, charge_row, charge_usage, prompt_estimate, realtime_reservation
from modelgate.domain.errors import GatewayError
from modelgate.domain.ledger import CRASHED, LedgerRow, LedgerWriter
from modelgate.domain.overruns import Overrun, OverrunReport
from modelgate.domain.usage import Usage, merge_usage
from modelgate.proxy.pipeline.context import RequestContext, content_action
from modelgate.proxy.state.keys import KeyRecord
from modelgate.proxy.upstream.model_rows import ModelEntry

log = logging.getLogger("modelgate.realtime")

# Names of the output allowance: the GA realtime API, then the beta one.
_OUTPUT_CAPS = ("max_output_tokens", "max_response_output_tokens")
_AUDIO_APPEND = "input_audio_buffer.append"
# Units of appended audio (domain.charges.AUDIO_UNITS_PER_SECOND) per byte, by input format: the beta API's
# `input_audio_format`, the GA API's `audio.input.format.type` (PCM16 at 24 kHz, G.711 at 8 kHz).
_AUDIO_UNITS_PER_BYTE = {
    "pcm16": 1,
    "audio/pcm": 1,
    "g711_ulaw": 6,
    "g711_alaw": 6,
    "audio/pcmu": 6,
    "audio/pcma": 6,
}
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


def decoded_size(audio: str) -> int:
    """The byte length of base64 `audio`, without decoding it: 3 bytes per 4 characters, less the padding."""
    return len(audio) * 3 // 4 - audio.endswith("=") - audio.endswith("==")


def input_audio_format(session: dict) -> str | None:
    """The input audio format a session object sets, if it sets one (beta or GA shape)."""
    name = session.get("input_audio_format")
    audio = session.get("audio")
    if isinstance(audio, dict):
        given = audio.get("input")
        given = given.get("format") if isinstance(given, dict) else None
        if isinstance(given, dict):
            name = given.get("type")
    return name if isinstance(name, str) else None


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
    cap: int = 0  # its output allowance: with the context window, the physical bound of its usage
    audio: int = 0  # units of committed audio it was reserved with: those its response.done consumes


async def hold_response(accounts: Accounts, ctx: RequestContext, amount: int) -> ResponseHold:
    """Reserve `amount` on the organization's balance and every budget that applies, or raise 402."""
    key = ctx.key
    assert key is not None  # billed only once its key is known (plugins.billing_gate)
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


async def check_one_response(accounts: Accounts, ctx: RequestContext) -> None:
    """402 before the upgrade unless the organization can afford one response now; holds nothing."""
    if ctx.model is None or ctx.key is None:
        return
    session = ctx.realtime.secret.session if ctx.realtime is not None else {}
    opening = len(orjson.dumps(session)) if session else 0
    worst = realtime_reservation(ctx.model.prices, output_cap(session), 0, opening)
    hold = await hold_response(accounts, ctx, worst)
    await settle_response(accounts, hold, 0)


class SessionBilling:
    """Reserves, settles and records each response of one realtime session."""

    def __init__(
        self,
        accounts: Accounts,
        ledger: LedgerWriter,
        ctx: RequestContext,
        overruns: OverrunReport | None = None,
    ) -> None:
        self._accounts = accounts
        self._ledger = ledger
        self._overruns = overruns
        self._ctx = ctx
        self._pending: deque[ResponseHold] = deque()  # client-reserved, not yet announced by upstream
        self._running: dict[str, ResponseHold] = {}  # by response id
        self._refused: set[str] = set()  # server-started responses cancelled for want of balance
        self._numbers = itertools.count(1)
        self._holds = itertools.count(1)
        self._session_cap: int | None = None
        self._context_tokens = 0  # the conversation so far, as the last response reported it
        self._text_bytes = 0  # client text since the last response (audio appends excluded)
        self._audio_scale = 1  # units of audio per appended byte (the session's input format; PCM16 at first)
        self._buffered = 0  # units of audio appended to the input buffer since its last commit or clear
        self._committed = 0  # units of audio committed and not consumed by a response yet
        self._commits_sent = 0  # the client's commits upstream has not confirmed yet
        self._operations: set[asyncio.Task] = set()
        key, model = ctx.key, ctx.model
        assert key is not None and model is not None  # a session is billed once both are known
        self._key: KeyRecord = key
        self._model: ModelEntry = model
        self._total = ctx.metering.usage = Usage()  # the session's usage, summed over its responses
        self._cost = ctx.metering.cost_micros = 0

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
        if not isinstance(session, dict):
            return
        if any(name in session for name in _OUTPUT_CAPS):
            self._session_cap = output_cap(session)  # "inf" lifts an earlier numeric cap
        scale = _AUDIO_UNITS_PER_BYTE.get(input_audio_format(session) or "")
        if scale is not None:  # audio appended before keeps the units it was counted in
            self._audio_scale = scale

    def _cap(self, response: Any) -> int:
        """A response's output allowance: its own cap, else the session's, else the model's default."""
        return output_cap(response) or self._session_cap or self._model.prices.default_max_tokens

    def _worst_case(self, cap: int) -> int:
        audio = self._committed + self._buffered
        return realtime_reservation(self._model.prices, cap, self._context_tokens, self._text_bytes, audio)

    def _commit(self) -> None:
        """The input buffer becomes a conversation item: its audio waits for the response that reads it."""
        self._committed += self._buffered
        self._buffered = 0

    # -- client to upstream -----------------------------------------------------------------------------

    async def from_client(self, text: str) -> dict | None:
        """A client text frame on its way upstream: None to forward it, or the error event to answer with.

        Every frame is parsed (orjson reads base64 audio about as fast as one substring search over it): a
        substring test could be fooled into letting a `response.create` pass unreserved.
        """
        event = _parse(text)
        kind = event.get("type")
        if kind == _AUDIO_APPEND:  # most frames: audio, counted by its decoded size, not as text
            audio = event.get("audio")
            if isinstance(audio, str):
                self._buffered += decoded_size(audio) * self._audio_scale
            return None
        self._text_bytes += len(text)
        if kind == "input_audio_buffer.commit":
            self._commits_sent += 1
            self._commit()
        elif kind == "input_audio_buffer.clear":
            self._buffered = 0
        elif kind == "session.update":
            self._watch_session(event.get("session"))
        elif kind == "response.create":
            return await self._guarded(self._reserve_asked(event))
        return None

    async def _reserve_asked(self, event: dict) -> dict | None:
        client_event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        try:
            hold = await self._hold(self._cap(event.get("response")))
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
        elif kind == "input_audio_buffer.committed":
            if self._commits_sent:  # the client's own commit, counted when it was sent
                self._commits_sent -= 1
            else:  # committed by the server itself (server VAD)
                self._commit()
        elif kind == "error":
            self._commit_refused(event.get("error"))
            await self._guarded(self._upstream_refused(event.get("error")))
        return None

    async def _hold(self, cap: int) -> ResponseHold:
        """Reserve one response of output allowance `cap`, then journal it in the ledger: should the process
        die before the response is done, its row is charged what the live counter settled for it, else the
        estimate of its prompt (domain.charges)."""
        ctx = self._ctx
        amount = self._worst_case(cap)
        hold = await hold_response(self._accounts, ctx, amount)
        hold.cap = cap
        hold.audio = self._committed
        prompt = self._context_tokens + prompt_estimate(self._text_bytes)
        cost = self._model.prices.prompt_cost(prompt)
        request_id = f"{ctx.request_id}:held-{next(self._holds)}"
        hold.row_id = row_id = self._ledger.new_row_id(time.time())
        over = cost - amount if cost > amount else 0
        self._ledger.admit_row(
            self._row(row_id, request_id, 0, CRASHED, None, cost, hold.budgets, over, prompt)
        )
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
            hold = await self._hold(self._cap(response))
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
            self._committed = max(self._committed - hold.audio, 0)  # now in the conversation it reported
        await self._finish(hold, response_id, usage, 200, outcome)

    async def _hold_unannounced(self, response_id: str, usage: Usage | None) -> ResponseHold:
        """A response.done of a response never announced: reserve its bound now if the balance allows; else
        it is charged all the same (the provider billed it), past the balance."""
        if usage is None:
            return ResponseHold(0, (), ())
        try:
            return await self._hold(self._cap(None))
        except GatewayError:
            log.warning(
                "realtime session %s: response %s was never announced and the balance cannot cover it;"
                " charged its usage past the balance",
                self._ctx.request_id,
                response_id,
            )
            return ResponseHold(0, (self._key.balance_counter,), (), cap=self._cap(None))

    def _commit_refused(self, error: Any) -> None:
        """An upstream error refusing a client's commit (`input_audio_buffer_commit_empty`): no
        `input_audio_buffer.committed` answers that commit, so the next one is the server's own."""
        code = error.get("code") if isinstance(error, dict) else None
        if self._commits_sent and isinstance(code, str) and code.startswith("input_audio_buffer_commit"):
            self._commits_sent -= 1

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
        """Settle one response to the cost of its usage (domain.charges: the truth, past its reservation
        too) and write its row."""
        ctx = self._ctx
        model = self._model
        charge = Charge(0)
        if usage is not None:
            charge_usage(charge, model.prices, usage, hold.amount, model.config.max_context_tokens, hold.cap)
        cost = charge.cost_micros or 0
        await settle_response(self._accounts, hold, cost)
        request_id = f"{ctx.request_id}:{response_id}"
        self._ledger.add_row(
            self._row(
                hold.row_id or self._ledger.new_row_id(time.time()),
                request_id,
                status,
                outcome,
                usage,
                cost,
                hold.budgets,
                charge.over_reservation_micros,
                0,
                charge.usage_implausible,
            ),
            hold.row_id is not None,
        )
        if charge.over_reservation_micros or charge.usage_implausible:
            self._report_overrun(request_id, hold.amount, charge)
        if usage is not None:
            total = self._total
            total.input_tokens += usage.input_tokens
            total.cached_input_tokens += usage.cached_input_tokens
            total.output_tokens += usage.output_tokens
        self._cost += cost
        ctx.metering.cost_micros = self._cost

    def _report_overrun(self, request_id: str, reserved: int, charge: Charge) -> None:
        if self._overruns is None:
            return
        key = self._key
        self._overruns.report(
            Overrun(
                key.organization_id,
                key.id,
                key.system_id,
                self._ctx.route.name if self._ctx.route is not None else "realtime",
                self._model.name,
                request_id,
                reserved,
                charge.cost_micros or 0,
                charge.over_reservation_micros,
                charge.usage_implausible,
                charge.reported_cost_micros,
            )
        )

    def _record_refusal(self, response_id: str, refusal: GatewayError) -> None:
        ctx = self._ctx
        self._ledger.add_row(
            self._row(
                self._ledger.new_row_id(time.time()),
                f"{ctx.request_id}:{response_id}",
                refusal.status,
                "refused",
                None,
                0,
                (),
            ),
            False,
        )

    def _row(
        self,
        row_id: str,
        request_id: str,
        status: int,
        outcome: str,
        usage: Usage | None,
        cost: int,
        budgets: tuple[tuple[str, float], ...],
        over: int = 0,
        estimated_input: int = 0,
        implausible: bool = False,
    ) -> LedgerRow:
        """A ledger row of one response of this session (domain.charges.charge_row)."""
        ctx = self._ctx
        key = self._key
        return charge_row(
            row_id,
            key.organization_id,
            key.id,
            key.system_id,
            self._model.name,
            ctx.row.key if ctx.row else None,
            request_id,
            status,
            outcome,
            usage,
            cost,
            time.time(),
            budgets,
            content_action(ctx.content_hits) if ctx.content_hits else "",
            over,
            implausible,
            estimated_input,
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
