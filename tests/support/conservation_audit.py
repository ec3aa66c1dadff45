"""The invariants of money conservation, checked on what the clients saw, what storage and Redis hold, and
what the balance watch sampled. Each check returns its findings (empty: the invariant holds) with numbers.

What is counted (the precise contract the checks hold the gateway to):

- A call is *admitted* when its client received a success head (2xx; 101 for a realtime session) — whether
  it then read the answer to the end (completed), closed it early (client_cut) or saw it end early
  (server_cut). An admitted chat call has exactly one ledger row with its `x-request-id`; so has a minted
  realtime client secret (cost 0: minting generates nothing).
- A call refused before forwarding (4xx head), or failed upstream before the first byte (5xx head), or
  with no head at all, has at most one row, and costs nothing.
- A realtime session writes one row per response it was asked for, with request id `<session id>:<response
  id>`: a `response.done` the client received has its row with the output tokens it reported; a
  response.create refused for balance has a cost-0 row. No row with the session's own id costs anything.
- A chat call admitted before its process was SIGKILLed has exactly one row too (its completed row, or its
  admission charged as `crashed` at the next start: README, the ledger's write-ahead spool). Calls under
  way at the kill (not ended `KILL_GRACE` seconds before it) are exempt from the token checks (a crashed
  row charges the prompt only, as documented); one that saw no head has at most one row; a realtime
  session has at most one row per response.create (responses are not journaled). They are listed in the
  summary.
- A background response created (queued, usage null) is charged the final usage the provider reports for it,
  once: one row, or — when the process following it stopped or died — its journal's crash row (the prompt
  estimate) and the adopting process's row of the rest; Σ of its rows' tokens is the reported usage and Σ of
  their costs that usage at the model's prices.
- A call whose client left after sending it (abandoned) is read to its end by the gateway and charged the
  usage the provider reported (or, cut by a graceful stop, the estimate of its prompt, said on its row); one
  refused before forwarding costs nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import orjson

from tests.support.conservation_mix import (
    OVERRUNNING,
    SDK_PLAIN,
    SILENT,
    AbandonedCall,
    BackgroundCall,
    ChatCall,
    RealtimeCall,
)
from tests.support.conservation_traffic import (
    ABANDONED,
    ADMITTED,
    CLIENT_CUT,
    COMPLETED,
    CallRecord,
    Tenant,
    TrafficLog,
)
from tests.support.money_books import BalanceWatch, Books, LedgerRow, RedisMoney

# A call that ended this shortly before its process was SIGKILLed may not have reached the ledger queue yet
# (the gateway notices a client's close a moment after the client made it).
KILL_GRACE = 0.25


@dataclass(frozen=True, slots=True)
class MicroPrices:
    """A model's prices in whole micro-units: per request and per token of each kind."""

    per_request: int
    input: int
    cached_input: int
    output: int

    def cost(self, row: LedgerRow) -> int:
        uncached = max(row.input_tokens - row.cached_input_tokens, 0)
        tokens = uncached * self.input + row.cached_input_tokens * self.cached_input
        return self.per_request + tokens + row.output_tokens * self.output


@dataclass(frozen=True, slots=True)
class Opening:
    """An organization's money before the mix: stored balance and last balance event."""

    balance_micros: int
    credit_seq: int


@dataclass(slots=True)
class Evidence:
    """Everything the checks read."""

    seed: int
    tenants: list[Tenant]
    openings: list[Opening]
    log: TrafficLog
    books: list[Books]
    redis: list[RedisMoney] | None
    watch: BalanceWatch
    prices: MicroPrices
    settled: bool
    released_after: float | None = None  # seconds after settling until Redis held no reservation


def in_flight_at_kill(record: CallRecord) -> bool:
    generation = record.generation
    if generation is None or not generation.killed or generation.signalled_at is None:
        return False
    return record.ended_at >= generation.signalled_at - KILL_GRACE


def _rows_by_request(books: Books) -> dict[str, list[LedgerRow]]:
    found: dict[str, list[LedgerRow]] = {}
    for row in books.rows:
        found.setdefault(row.request_id, []).append(row)
    return found


def _session_rows(rows: dict[str, list[LedgerRow]], session_id: str) -> list[LedgerRow]:
    prefix = f"{session_id}:"
    return [row for request_id, found in rows.items() if request_id.startswith(prefix) for row in found]


# -- conservation -----------------------------------------------------------------------------------------


def conservation_in_storage(ev: Evidence) -> list[str]:
    """opening + Σ balance events - Σ ledger costs == closing balance, per organization."""
    findings = []
    for tenant, opening, books in zip(ev.tenants, ev.openings, ev.books, strict=True):
        events = sum(e.amount_micros for e in books.events_after(opening.credit_seq))
        expected = opening.balance_micros + events - books.spent_micros
        if expected != books.balance_micros:
            findings.append(
                f"org{tenant.index}: opening {opening.balance_micros} + events {events} - ledger "
                f"{books.spent_micros} ({len(books.rows)} rows) = {expected}, but the stored balance is "
                f"{books.balance_micros} (difference {books.balance_micros - expected:+d})"
            )
    return findings


def events_match_what_was_sent(ev: Evidence) -> list[str]:
    """Every answered top-up and adjustment is one balance event of its amount; no other event appeared."""
    findings = []
    for tenant, opening, books in zip(ev.tenants, ev.openings, ev.books, strict=True):
        events = list(books.events_after(opening.credit_seq))
        unanswered = 0
        for change in ev.log.changes:
            if change.operation.organization != tenant.index or change.skipped.startswith("the adjust"):
                continue
            # No answer, or 503 while storage had no primary (a failover): applied or not, at most once.
            if change.status is None or change.status == 503:
                unanswered += 1
                continue
            if not 200 <= change.status < 300:
                findings.append(
                    f"org{tenant.index}: {change.kind} {change.operation.amount_micros} → {change.status}"
                )
                continue
            match = [e for e in events if change.reference in (e.id, e.reference_id)]
            if len(match) != 1:
                findings.append(
                    f"org{tenant.index}: {change.kind} of {change.operation.amount_micros} "
                    f"({change.reference}) has {len(match)} balance events"
                )
                continue
            event = match[0]
            events.remove(event)
            sign = -1 if change.kind == "debit" else 1
            if change.kind != "set" and event.amount_micros != sign * change.operation.amount_micros:
                findings.append(
                    f"org{tenant.index}: {change.kind} of {change.operation.amount_micros} was recorded as "
                    f"{event.amount_micros}"
                )
        if len(events) > unanswered:
            findings.append(
                f"org{tenant.index}: {len(events)} balance events nobody sent (or sent without an answer: "
                f"{unanswered}): {[(e.kind, e.amount_micros) for e in events]}"
            )
    return findings


def live_counters_match_storage(ev: Evidence) -> list[str]:
    """Once settled, each Redis counter holds the stored balance and no reservation."""
    findings = []
    if ev.redis is None:
        return findings
    for tenant, books, live in zip(ev.tenants, ev.books, ev.redis, strict=True):
        if live.balance is None:
            findings.append(f"org{tenant.index}: no Redis counter (fields {live.raw})")
            continue
        if live.balance != books.balance_micros:
            crashed = sum(row.cost_micros for row in books.rows if row.outcome == "crashed")
            findings.append(
                f"org{tenant.index}: Redis balance {live.balance} != stored balance {books.balance_micros} "
                f"(difference {live.balance - books.balance_micros:+d}; rows charged as crashed: {crashed} µ)"
            )
    return findings


def no_reservation_left_held(ev: Evidence) -> list[str]:
    findings = []
    if ev.redis is None:
        return findings
    killed = [g.name for g in _killed_generations(ev)]
    for tenant, live in zip(ev.tenants, ev.redis, strict=True):
        if live.reserved:
            findings.append(
                f"org{tenant.index}: {live.reserved} µ still reserved after every request ended and the "
                f"wait for a dead process's reservations to be released (SIGKILLed: {killed})"
            )
    return findings


def _killed_generations(ev: Evidence):
    return [r.ended for r in ev.log.restarts if r.ended is not None and r.ended.killed]


def balance_never_below_the_floor(ev: Evidence) -> list[str]:
    """No sampled balance went below -credit limit (less what operators debited) by more than what was
    charged over reservations (a provider billing past its cap is charged in full: docs/billing.md)."""
    findings = []
    if ev.watch.samples < 10:
        findings.append(f"only {ev.watch.samples} samples were taken (errors: {ev.watch.errors[:3]})")
    if ev.log.outages:
        return findings + _floor_through_outages(ev)
    for tenant, watched, books in zip(ev.tenants, ev.watch.organizations, ev.books, strict=True):
        over = books.over_reservation_micros
        for name, point in (
            ("stored balance", watched.stored),
            ("Redis balance", watched.live),
            ("Redis balance - reserved", watched.live_headroom),
        ):
            if point.margin is not None and point.margin + over < 0:
                findings.append(
                    f"org{tenant.index}: {name} {point.value} below its floor {point.floor} by more than the "
                    f"{over} µ charged over reservations (credit limit {tenant.credit_limit_micros}) at "
                    f"{point.seconds:.1f} s"
                )
    return findings


# A degraded-mode gateway reads its headroom every heartbeat (modelgate/domain/redis_counters.py: 5 s);
# one more second of slack for the sampling and the stop itself.
READING_INTERVAL = 6.0


def _floor_through_outages(ev: Evidence) -> list[str]:
    """The floor with Redis outages (degraded mode), per docs/deploy.md "Redis outages": until the first
    outage began, as without one (only overruns O may take a balance past its floor); from then on, past it
    by at most the documented bound A_before + A_after + O. Both A terms are bounded by the headroom H Redis
    showed in the reading interval before the outage: what Redis admitted then fits in it (A_before ≤ H),
    and A_after ≤ Σ_p S_p ≤ H_read ≤ H; so a sample may lie up to O + 2H below its floor."""
    findings = []
    stops = [o.stopped_at for o in ev.log.outages if o.stopped_at and o.served_from_shares]
    first = min(stops, default=float("inf"))
    for tenant, watched, books in zip(ev.tenants, ev.watch.organizations, ev.books, strict=True):
        over = books.over_reservation_micros
        read = sum(watched.highest_headroom(stop - READING_INTERVAL, stop) for stop in stops)
        worst: dict[str, tuple[int, int, float, int]] = {}  # by balance: (past the bound, margin, at, bound)
        for at, name, margin in watched.margins:
            bound = over + (2 * read if at >= first else 0)
            if margin + bound < 0 and (name not in worst or margin + bound < worst[name][0]):
                worst[name] = (margin + bound, margin, at, bound)
        for name, (_, margin, at, bound) in worst.items():
            when = "after the outage began" if at >= first else "before any outage"
            findings.append(
                f"org{tenant.index}: {name} {-margin} µ below its floor {when}, past the bound {bound} µ "
                f"(O = {over} µ charged over reservations, headroom read before the outages H = {read} µ)"
            )
    return findings


def overruns_charged_and_marked(ev: Evidence) -> list[str]:
    """Only calls to the provider that ignores its cap are charged over their reservation; each such row is
    marked with the excess (less than its cost) and costs its reported tokens; none is implausible (the echo
    stays far below the context window). And the mix had some: a run with none proves nothing."""
    findings = []
    marked = 0
    for record in ev.log.calls:
        if isinstance(record.operation, (RealtimeCall, BackgroundCall)):
            continue
        rows = _rows_by_request(ev.books[record.operation.organization]).get(record.request_id, [])
        for row in rows:
            if row.usage_implausible:
                findings.append(f"{_label(record)}: marked implausible ({row})")
            if not row.over_reservation_micros:
                continue
            marked += 1
            if record.operation.behaviour != OVERRUNNING:
                findings.append(
                    f"{_label(record)}: charged {row.over_reservation_micros} µ over its reservation"
                )
            if not 0 < row.over_reservation_micros < row.cost_micros or row.cost_micros != ev.prices.cost(
                row
            ):
                findings.append(f"{_label(record)}: over-reservation row inconsistent: {row}")
    if not marked:
        findings.append("no call was charged over its reservation: the mix did not exercise overruns")
    return findings


# -- rows and tokens ----------------------------------------------------------------------------------------


def one_row_per_admitted_request(ev: Evidence) -> list[str]:
    findings = []
    for record in ev.log.calls:
        if isinstance(record.operation, (BackgroundCall, AbandonedCall)):
            continue  # late usage: `late_usage_charged`
        rows = _rows_by_request(ev.books[record.operation.organization])
        own = rows.get(record.request_id, [])
        label = _label(record)
        if isinstance(record.operation, RealtimeCall):
            findings += _realtime_rows(record, rows, own, label)
            continue
        if record.result in ADMITTED:  # a SIGKILL too leaves exactly one row (its admission, `crashed`)
            if len(own) != 1:
                findings.append(f"{label}: admitted ({record.result}, {record.status}) but {len(own)} rows")
        elif in_flight_at_kill(record):  # no head: it may have been admitted, then cut by the kill
            if len(own) > 1:
                findings.append(f"{label}: {len(own)} rows")
        elif len(own) > 1 or any(row.cost_micros for row in own):
            costs = [row.cost_micros for row in own]
            findings.append(
                f"{label}: not admitted ({record.result}, {record.status}) but rows costing {costs}"
            )
    return findings


def _realtime_rows(
    record: CallRecord, rows: dict[str, list[LedgerRow]], own: list[LedgerRow], label: str
) -> list[str]:
    findings = []
    minted = rows.get(record.mint_request_id or "", [])
    if record.mint_status == 200 and len(minted) != 1 and not in_flight_at_kill(record):
        findings.append(f"{label}: its client secret was minted (200) but has {len(minted)} rows")
    if any(row.cost_micros for row in minted):
        findings.append(f"{label}: minting its secret cost {[r.cost_micros for r in minted]}")
    if any(row.cost_micros for row in own):
        findings.append(f"{label}: rows with the session's own id cost {[r.cost_micros for r in own]}")
    responses = _session_rows(rows, record.request_id)
    if record.status != 101:
        if responses:
            findings.append(
                f"{label}: never upgraded ({record.status}) but has {len(responses)} response rows"
            )
        return findings
    if in_flight_at_kill(record):
        if len(responses) > record.creates_sent:
            findings.append(
                f"{label}: {len(responses)} response rows for {record.creates_sent} response.create"
            )
        return findings
    done = len(record.responses_done)
    if record.result in (COMPLETED, CLIENT_CUT):
        if len(responses) != record.creates_sent:
            findings.append(
                f"{label}: {record.creates_sent} response.create sent ({done} done, {record.refusals} "
                f"refused) but {len(responses)} response rows"
            )
    elif not done <= len(responses) <= record.creates_sent:
        findings.append(
            f"{label}: cut by the gateway after {record.creates_sent} response.create ({done} done) but "
            f"{len(responses)} response rows"
        )
    return findings


def every_delivered_token_charged(ev: Evidence) -> list[str]:
    """Full reads are charged the upstream's completion tokens; cut answers at least what they delivered;
    every admitted row costs exactly its tokens at the model's prices."""
    findings = []
    for record in ev.log.calls:
        if in_flight_at_kill(record) or record.result not in ADMITTED:
            continue
        if isinstance(record.operation, (BackgroundCall, AbandonedCall)):
            continue  # late usage: `late_usage_charged`
        rows = _rows_by_request(ev.books[record.operation.organization])
        label = _label(record)
        if isinstance(record.operation, RealtimeCall):
            findings += _realtime_tokens(record, rows, label, ev.prices)
            continue
        own = rows.get(record.request_id, [])
        if len(own) != 1:
            continue  # reported by the row count
        row = own[0]
        findings += _chat_tokens(record, row, label)
        if row.cost_micros != ev.prices.cost(row):
            findings.append(
                f"{label}: charged {row.cost_micros} µ for {row.input_tokens} in / {row.cached_input_tokens} "
                f"cached / {row.output_tokens} out, which cost {ev.prices.cost(row)} µ"
            )
    return findings


def late_usage_charged(ev: Evidence) -> list[str]:
    """Background responses are charged their final reported usage once (over one row, or a crash row and
    the rest); abandoned calls their provider's usage (or the prompt estimate, said so). And the mix had
    both, charged: a run without proves nothing."""
    findings = []
    followed = read_on = 0
    for record in ev.log.calls:
        operation = record.operation
        if not isinstance(operation, (BackgroundCall, AbandonedCall)) or in_flight_at_kill(record):
            continue
        own = _rows_by_request(ev.books[operation.organization]).get(record.request_id, [])
        label = _label(record)
        if isinstance(operation, BackgroundCall):
            if record.result != COMPLETED:
                if any(row.cost_micros for row in own) and record.result not in ADMITTED:
                    findings.append(f"{label}: not created ({record.status}) but charged {own}")
                continue
            if record.reported_input is None or record.reported_output is None:
                findings.append(f"{label}: created, but its final usage was never reported ({record.error})")
                continue
            findings += _background_rows(record, own, label, ev.prices)
            followed += 1
            continue
        if record.result != ABANDONED:
            continue  # answered before its client left: an ordinary call
        charged = [row for row in own if row.outcome != "refused"]
        if len(own) != 1:
            findings.append(f"{label}: abandoned after sending, {len(own)} rows")
            continue
        for row in charged:
            if row.cost_micros != ev.prices.cost(row):
                findings.append(
                    f"{label}: charged {row.cost_micros} µ, its tokens cost {ev.prices.cost(row)} µ"
                )
            if row.usage_estimated:
                continue  # cut by a graceful stop: its prompt's estimate
            if row.output_tokens != record.expected_output:
                findings.append(
                    f"{label}: the provider reported {record.expected_output} output tokens, the ledger has "
                    f"{row.output_tokens} ({row})"
                )
            else:
                read_on += 1
    if not followed:
        findings.append("no background response was followed to its charge: the mix did not exercise them")
    if not read_on:
        findings.append("no abandoned call was read on and charged its usage: the mix did not exercise them")
    return findings


def _background_rows(record: CallRecord, own: list[LedgerRow], label: str, prices: MicroPrices) -> list[str]:
    """One row of the final usage; or the journal's crash row and the adopter's row of the rest."""
    input_tokens, output_tokens = record.reported_input or 0, record.reported_output or 0
    bill = prices.cost(LedgerRow(record.request_id, 200, "completed", input_tokens, 0, output_tokens, 0))
    split = len(own) == 2 and any(row.outcome in ("crashed", "background") for row in own)
    if len(own) != 1 and not split:
        return [f"{label}: {len(own)} rows ({[row.outcome for row in own]}) for one background response"]
    charged = (
        sum(row.input_tokens for row in own),
        sum(row.output_tokens for row in own),
        sum(row.cost_micros for row in own),
    )
    if charged != (input_tokens, output_tokens, bill):
        return [
            f"{label}: the provider reported {input_tokens} in / {output_tokens} out ({bill} µ); its rows "
            f"charged {charged[0]} in / {charged[1]} out ({charged[2]} µ): {own}"
        ]
    return []


def _chat_tokens(record: CallRecord, row: LedgerRow, label: str) -> list[str]:
    call: ChatCall = record.operation
    # A streamed delta is at least one token; a whole JSON answer without usage can only be estimated.
    delivered = max(1, record.content_events) if call.style != SDK_PLAIN else 1
    if record.result == COMPLETED and call.behaviour != SILENT:
        upstream = record.reported_output if record.reported_output is not None else record.expected_output
        if row.output_tokens != upstream:
            return [
                f"{label}: read to the end; upstream reported {upstream} output tokens, ledger has "
                f"{row.output_tokens}"
            ]
        return []
    if call.behaviour == OVERRUNNING and call.cap is not None:
        # Cut short, its estimate is held to the cap the provider ignored (docs/billing.md); the default cap
        # is above any echo of the mix.
        delivered = min(delivered, call.cap * call.n)
    if row.output_tokens < delivered:
        return [
            f"{label}: {record.result} after {record.content_events} content deltas, ledger output tokens "
            f"{row.output_tokens}"
        ]
    return []


def _realtime_tokens(
    record: CallRecord, rows: dict[str, list[LedgerRow]], label: str, prices: MicroPrices
) -> list[str]:
    findings = []
    for response_id, output in record.responses_done:
        found = rows.get(f"{record.request_id}:{response_id}", [])
        if len(found) != 1:
            findings.append(
                f"{label}: response {response_id} (done, {output} output tokens) has {len(found)} rows"
            )
            continue
        row = found[0]
        if row.output_tokens != output:
            findings.append(
                f"{label}: response {response_id} reported {output} output tokens, ledger has "
                f"{row.output_tokens}"
            )
        if row.cost_micros != prices.cost(row):
            findings.append(
                f"{label}: response {response_id} charged {row.cost_micros} µ, its tokens cost "
                f"{prices.cost(row)} µ"
            )
    return findings


def _timing(restart) -> str:
    ended = restart.ended
    if ended is None or ended.signalled_at is None or ended.ended_at is None:
        return ""
    return f" (down {ended.ended_at - ended.signalled_at:.2f} s after the signal)"


def _label(record: CallRecord) -> str:
    operation = record.operation
    where = record.generation.name if record.generation else "no gateway"
    if isinstance(operation, ChatCall):
        shape = f"{operation.behaviour}/{operation.style} cap={operation.cap} n={operation.n}"
    elif isinstance(operation, BackgroundCall):
        shape = f"background response cap={operation.cap}"
    elif isinstance(operation, AbandonedCall):
        shape = f"abandoned chat cap={operation.cap}"
    else:
        shape = f"realtime x{operation.responses}{' leaving early' if operation.leave_early else ''}"
    return f"{record.request_id} (org{operation.organization}, {shape}, {where})"


# -- the summary --------------------------------------------------------------------------------------------


def _outage_line(ev: Evidence, outage) -> str:
    stop, back = outage.stopped_at, outage.started_at or float("inf")
    during = Counter(r.result for r in ev.log.calls if stop <= r.started_at < back)
    degraded = f"{outage.degraded_at - stop:.1f} s" if outage.degraded_at else "never"
    reconciled = f"{outage.reconciled_at - outage.started_at:.1f} s" if outage.reconciled_at else "never"
    read = [w.highest_headroom(stop - READING_INTERVAL, stop) for w in ev.watch.organizations]
    after = [min((m for at, _, m in w.margins if at >= stop), default=None) for w in ev.watch.organizations]
    if not outage.served_from_shares:
        return (
            f"{outage.failed} killed{f' ({outage.note})' if outage.note else ''}, a replica promoted "
            f"{back - stop:.1f} s later, every gateway on it {reconciled} after; calls started meanwhile: "
            f"{dict(sorted(during.items()))}; lowest margin from the kill on: {after}"
        )
    return (
        f"Redis outage of {back - stop:.1f} s: degraded after {degraded}, reconciled {reconciled} after "
        f"Redis's return; calls started in it: {dict(sorted(during.items()))}; headroom read before it by "
        f"org: {read}; lowest margin from then on: {after}"
    )


def summary(ev: Evidence) -> str:
    """The run in numbers, for the report and every assertion message."""
    lines = [f"seed {ev.seed} (replay: MODELGATE_CONSERVATION_SEED={ev.seed}); settled: {ev.settled}"]
    if ev.redis is not None:
        released = "never" if ev.released_after is None else f"{ev.released_after:.1f} s after settling"
        lines.append(f"Redis reservations all released: {released}")
    outcomes = Counter(record.result for record in ev.log.calls)
    lines.append(
        f"calls: {dict(sorted(outcomes.items()))}; timed out: {len(ev.log.timed_out)}; "
        f"failed in the client: {len(ev.log.failed)}"
    )
    sessions = [r for r in ev.log.calls if isinstance(r.operation, RealtimeCall) and r.status == 101]
    lines.append(
        f"realtime: {len(sessions)} sessions upgraded, {sum(r.creates_sent for r in sessions)} "
        f"response.create sent, {sum(len(r.responses_done) for r in sessions)} done, "
        f"{sum(r.refusals for r in sessions)} refused"
    )
    late = Counter(
        (type(r.operation).__name__, r.result)
        for r in ev.log.calls
        if isinstance(r.operation, (BackgroundCall, AbandonedCall))
    )
    lines.append(f"late usage (kind, result): {dict(sorted(late.items()))}")
    for restart in ev.log.restarts:
        ended = restart.ended.name if restart.ended else "?"
        how = "SIGKILL" if restart.operation.hard else "SIGTERM"
        problem = f"; {restart.ended.stop_problem}" if restart.ended and restart.ended.stop_problem else ""
        lines.append(
            f"{how} {ended} with {restart.busy_at_signal} requests under way{_timing(restart)}{problem}"
        )
    for outage in ev.log.outages:
        lines.append(_outage_line(ev, outage))
    served = Counter(r.generation.name if r.generation else "none" for r in ev.log.calls)
    lines.append(f"calls by gateway process: {dict(sorted(served.items()))}")
    exempt = [r for r in ev.log.calls if in_flight_at_kill(r)]
    with_rows = sum(
        1
        for r in exempt
        if _rows_by_request(ev.books[r.operation.organization]).get(r.request_id)
        or _session_rows(_rows_by_request(ev.books[r.operation.organization]), r.request_id)
    )
    lines.append(
        f"under way at a SIGKILL (exempt from token checks): {len(exempt)}, of which {with_rows} have rows: "
        f"{[r.request_id for r in exempt][:12]}"
    )
    changes = Counter((c.kind, c.status, c.skipped[:20]) for c in ev.log.changes)
    lines.append(f"balance changes (kind, status, skipped): {dict(changes)}")
    for tenant, opening, books in zip(ev.tenants, ev.openings, ev.books, strict=True):
        events = sum(e.amount_micros for e in books.events_after(opening.credit_seq))
        live = ev.redis[tenant.index] if ev.redis is not None else None
        watched = ev.watch.organizations[tenant.index]
        lines.append(
            f"org{tenant.index} (credit {tenant.credit_limit_micros}): opening {opening.balance_micros}, "
            f"events {events:+d}, ledger {books.spent_micros} in {len(books.rows)} rows, closing "
            f"{books.balance_micros}; lowest stored margin {watched.stored.margin}"
            + (
                f"; Redis b={live.balance} r={live.reserved}, lowest margin {watched.live.margin}"
                if live
                else ""
            )
        )
    for tenant, books in zip(ev.tenants, ev.books, strict=True):
        outcomes = Counter(row.outcome for row in books.rows)
        costs = Counter()
        for row in books.rows:
            costs[row.outcome] += row.cost_micros
        lines.append(
            f"org{tenant.index} rows by outcome (count, µ): "
            + ", ".join(f"{name} {outcomes[name]}/{costs[name]}" for name in sorted(outcomes))
        )
    for tenant, books in zip(ev.tenants, ev.books, strict=True):
        over = [row for row in books.rows if row.over_reservation_micros]
        lines.append(
            f"org{tenant.index} charged over reservations: {len(over)} rows, "
            f"{books.over_reservation_micros} µ over"
        )
    lines.append(f"balance samples: {ev.watch.samples}, sampling errors: {len(ev.watch.errors)}")
    return "\n".join(lines)


CHECKS = {
    "conservation in storage": conservation_in_storage,
    "balance events are what was sent": events_match_what_was_sent,
    "Redis counters hold the stored balance": live_counters_match_storage,
    "no reservation left held": no_reservation_left_held,
    "no balance below its floor": balance_never_below_the_floor,
    "one row per admitted request": one_row_per_admitted_request,
    "every delivered token charged": every_delivered_token_charged,
    "overruns charged in full and marked": overruns_charged_and_marked,
}


def write_post_mortem(ev: Evidence, directory: Path) -> Path:
    """The summary, every check's findings, the books and what each client saw, as files in `directory`."""
    lines = [summary(ev), ""]
    for name, check in CHECKS.items():
        if ev.redis is None and check in (live_counters_match_storage, no_reservation_left_held):
            lines.append(f"{name}: not applicable (in-process counters)")
            continue
        findings = check(ev)
        lines.append(f"{name}: {'holds' if not findings else f'{len(findings)} findings'}")
        lines += [f"  {finding}" for finding in findings]
    report = directory / "report.txt"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    books = {f"org{t.index}": asdict(b) for t, b in zip(ev.tenants, ev.books, strict=True)}
    (directory / "books.json").write_bytes(orjson.dumps(books, option=orjson.OPT_INDENT_2))
    calls = [
        {
            **{
                f.name: getattr(record, f.name)
                for f in fields(record)
                if f.name not in ("operation", "generation")
            },
            "operation": asdict(record.operation),
            "generation": record.generation.name if record.generation else None,
            "in_flight_at_kill": in_flight_at_kill(record),
        }
        for record in ev.log.calls
    ]
    (directory / "calls.json").write_bytes(orjson.dumps(calls, option=orjson.OPT_INDENT_2))
    return report
