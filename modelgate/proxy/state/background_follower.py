"""Following background responses to their terminal state, and charging each once its usage is known.

A background response's creation answers `queued` with usage null; the gateway keeps the request's
reservation and its journal admission, and polls `GET /v1/responses/{id}` on the row that created it —
first after `background_poll_seconds`, then twice as long each time up to `background_poll_max_seconds`,
for at most `background_follow_seconds` — until the response is `completed`, `incomplete`, `failed` or
`cancelled`. Then it is charged the usage the provider reports (a cancelled or failed one too), priced by the
model's sheet, never capped at the reservation: the reservation is settled to that cost and the request's
row written under its admission's id. A poll the provider fails (or cannot be reached for) is retried at the
next interval.

A follow survives its process (modelgate/domain/background_responses.py): the journal charges the crash
cost when the process dies (a graceful stop charges it and hands the follow over at once), and the process
that adopts the follow charges the rest without a reservation, in a row of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from urllib.parse import quote

import orjson

from modelgate.domain.accounts import Accounts, CrashSettlements
from modelgate.domain.background_responses import BackgroundFollow, BackgroundResponses
from modelgate.domain.charges import Charge, charge_row, charge_usage
from modelgate.domain.counters import Counters
from modelgate.domain.ledger import LedgerRow, LedgerWriter
from modelgate.domain.overruns import Overrun, OverrunReport
from modelgate.domain.usage import Usage, usage_of_body
from modelgate.proxy.upstream.model_rows import ModelCatalog

log = logging.getLogger("modelgate.background")

# The provider's terminal statuses of a response, and the ledger outcome of each.
_TERMINAL = {
    "completed": "completed",
    "incomplete": "completed",
    "cancelled": "cancelled",
    "failed": "upstream_error",
}
HANDED_OVER = "background"  # the outcome of a crash-cost row written by a graceful stop


@dataclass(frozen=True, slots=True)
class FollowTiming:
    """How often a background response is polled, and for how long; how long a follow's lease runs."""

    first: float = 1.0
    most: float = 60.0
    give_up: float = 86400.0
    lease: float = 30.0


class BackgroundFollower:
    """Follows the background responses this process created or adopted (one task each)."""

    def __init__(
        self,
        repository: BackgroundResponses,
        accounts: Accounts,
        counters: Counters,
        ledger: LedgerWriter,
        catalog: Callable[[], ModelCatalog],
        timing: FollowTiming,
        overruns: OverrunReport | None = None,
    ) -> None:
        self._repository = repository
        self._overruns = overruns  # charges past the reservation, or implausible: counted, audited, logged
        self._accounts = accounts
        self._counters = counters
        self._ledger = ledger
        self._catalog = catalog
        self.timing = timing
        self._follows: dict[str, tuple[BackgroundFollow, asyncio.Task]] = {}
        self._charged: set[str] = set()  # followed here to their charge (the others are handed over)
        self._leases: asyncio.Task | None = None
        self._stopping = asyncio.Event()

    @property
    def following(self) -> int:
        return len(self._follows)

    def start(self) -> None:
        """Renew this process's leases, and adopt the follows whose lease expired, every half lease."""
        self._leases = asyncio.get_running_loop().create_task(self._keep_leases(), name="background-leases")

    def follow(self, follow: BackgroundFollow) -> None:
        """Follow a background response this process just created (it holds the reservations)."""
        self._begin(follow, record=True)

    def _begin(self, follow: BackgroundFollow, *, record: bool) -> None:
        if follow.response_id in self._follows or self._stopping.is_set():
            return
        task = asyncio.get_running_loop().create_task(self._run(follow, record))
        self._follows[follow.response_id] = (follow, task)
        task.add_done_callback(lambda _done: self._follows.pop(follow.response_id, None))

    async def _keep_leases(self) -> None:
        while not self._stopping.is_set():
            now = time.time()
            try:
                await self._repository.renew(now + self.timing.lease)
                for follow in await self._repository.adopt(now, now + self.timing.lease):
                    log.info("adopted the follow of background response %s", follow.response_id)
                    self._begin(follow, record=False)
            except Exception as exc:  # the database is away: the next round tries again
                log.warning("background responses: leases not renewed: %r", exc)
            try:
                await asyncio.wait_for(self._stopping.wait(), self.timing.lease / 2)
            except TimeoutError:
                pass

    async def _run(self, follow: BackgroundFollow, record: bool) -> None:
        if record and not await self._record(follow):
            # Followed already (the provider gave an id twice): this request gets its crash cost, once.
            self._charged.add(follow.response_id)
            await self._close_at_crash_cost(follow)
            return
        delay = self.timing.first
        deadline = follow.created_at + self.timing.give_up
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), delay)
                return  # stopping: `stop` hands the follow over
            except TimeoutError:
                pass
            delay = min(delay * 2, self.timing.most)
            try:
                document = await self._retrieve(follow)
            except Exception as exc:
                log.warning(
                    "background response %s: poll failed (%r); next in %gs", follow.response_id, exc, delay
                )
                continue
            status = document.get("status") if isinstance(document, dict) else None
            if status in _TERMINAL:
                await self._charge(follow, document, _TERMINAL[status])
                return
            if document is None or time.time() > deadline:
                # Gone at the provider, or followed past the bound: charged what is known, the estimate.
                log.warning(
                    "background response %s: no final usage; charged the estimate", follow.response_id
                )
                await self._charge(follow, None, "upstream_error")
                return

    async def _record(self, follow: BackgroundFollow) -> bool:
        """Record the follow, trying again until the database takes it (or this process stops): its one
        charge is claimed on that record, so a follow never recorded would find nothing to claim and be
        charged its crash cost only (a database failing over meanwhile). False: followed already."""
        delay = self.timing.first
        while not self._stopping.is_set():
            try:
                return await self._repository.add(follow, time.time() + self.timing.lease)
            except Exception as exc:  # followed later: the response waits at the provider meanwhile
                log.warning("background response %s: not recorded yet (%r)", follow.response_id, exc)
            try:
                await asyncio.wait_for(self._stopping.wait(), delay)  # a retry's backoff, or the stop
            except TimeoutError:
                pass
            delay = min(delay * 2, self.timing.lease / 2)
        return True  # stopping: `stop` charges its crash cost and hands it over

    async def _retrieve(self, follow: BackgroundFollow) -> dict | None:
        """The response as the provider has it now; None when it no longer has it (404)."""
        row = self._catalog().rows_by_key.get(follow.row_key)
        if row is None:
            raise LookupError(f"row {follow.row_key} is not in the config")
        answer = await row.upstream.send(
            "GET", "/v1/responses/" + quote(follow.response_id, safe=""), None, follow.request_id, {}
        )
        try:
            if answer.status == 404:
                return None
            if answer.status != 200:
                raise RuntimeError(f"the provider answered HTTP {answer.status}")
            body = await answer.read()
        finally:
            answer.close()
        document = orjson.loads(body)
        if not isinstance(document, dict):
            raise ValueError("the provider's answer is not a JSON object")
        document["__body__"] = body
        return document

    async def _charge(self, follow: BackgroundFollow, document: dict | None, outcome: str) -> None:
        """Charge the response once, across processes; settle this process's reservations in any case."""
        usage = usage_of_body(document.pop("__body__")) if document is not None else None
        if usage is None:  # no final usage: the estimate of its prompt, said on the row
            usage = Usage(input_tokens=follow.crash_input_tokens, estimated=True)
        model = self._catalog().get(follow.model)
        charge = Charge()
        if model is not None:
            cost = charge_usage(
                charge,
                model.prices,
                usage,
                follow.reserved_micros or None,
                model.config.max_context_tokens,
                follow.most_output_tokens,
            )
        else:  # the model left the config meanwhile: its crash cost
            cost = charge.cost_micros = follow.crash_cost
        try:
            claimed = await self._repository.claim_charge(follow.response_id, time.time())
        except Exception as exc:
            log.error("background response %s: charge not claimed (%r); retried", follow.response_id, exc)
            claimed = await self._retry_claim(follow)
        self._charged.add(follow.response_id)
        if not claimed:  # charged by another process, which adopted it: this journal's crash cost is its part
            await self._close_at_crash_cost(follow)
            return
        if charge.over_reservation_micros or charge.usage_implausible:
            self._report_overrun(follow, charge)
        if follow.adopted:
            await self._charge_rest(follow, usage, charge, outcome)
            return
        row = self._row(follow, follow.row_id, 200, outcome, usage, cost, charge)
        await self._accounts.queue_settlement(follow.reservations or [], cost, follow.row_id)
        self._counters.after_written(partial(self._ledger.add_row, row, True))
        follow.reservations = None

    def _row(
        self,
        follow: BackgroundFollow,
        row_id: str,
        status: int,
        outcome: str,
        usage: Usage | None,
        cost: int,
        charge: Charge | None = None,
    ) -> LedgerRow:
        """A ledger row of `follow`'s request (domain.charges.charge_row); without usage, its crash row."""
        return charge_row(
            row_id,
            follow.organization_id,
            follow.key_id,
            follow.system_id,
            follow.model,
            follow.row_key,
            follow.request_id,
            status,
            outcome,
            usage,
            cost,
            time.time(),
            follow.budgets,
            "",
            charge.over_reservation_micros if charge is not None else 0,
            charge.usage_implausible if charge is not None else False,
            follow.crash_input_tokens,
        )

    def _report_overrun(self, follow: BackgroundFollow, charge: Charge) -> None:
        if self._overruns is None:
            return
        self._overruns.report(
            Overrun(
                follow.organization_id,
                follow.key_id,
                follow.system_id,
                "responses",
                follow.model,
                follow.request_id,
                follow.reserved_micros,
                charge.cost_micros or 0,
                charge.over_reservation_micros,
                charge.usage_implausible,
                charge.reported_cost_micros,
            )
        )

    async def _retry_claim(self, follow: BackgroundFollow) -> bool:
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), self.timing.first)
            except TimeoutError:
                pass
            try:
                return await self._repository.claim_charge(follow.response_id, time.time())
            except Exception:
                continue
        return False

    async def _charge_rest(
        self, follow: BackgroundFollow, usage: Usage, charge: Charge, outcome: str
    ) -> None:
        """An adopted follow: the crash cost is (or will be, by the spool's replay) charged under the
        admission's row; this row charges the rest, with the input tokens beyond the crash row's estimate —
        fewer than none when the estimate was above the provider's count, so that the two rows add up to
        what the provider reported, in tokens as in money."""
        row_id = self._ledger.new_row_id(time.time())
        rest = (charge.cost_micros or 0) - follow.crash_cost
        beyond = replace(usage, input_tokens=usage.input_tokens - follow.crash_input_tokens)
        row = self._row(follow, row_id, 200, outcome, beyond, rest, charge)
        await CrashSettlements(self._counters).charge(follow.organization_id, rest, row_id, follow.budgets)
        self._ledger.add_row(row, True)

    async def _close_at_crash_cost(self, follow: BackgroundFollow) -> None:
        """Settle the reservations this process holds for `follow` to its crash cost, and close its admission
        with the crash row, as the journal's replay would have."""
        if follow.reservations:
            await self._accounts.queue_settlement(follow.reservations, follow.crash_cost, follow.row_id)
            self._counters.after_written(partial(self._ledger.add_row, self._crash_row(follow), True))
            follow.reservations = None

    def _crash_row(self, follow: BackgroundFollow) -> LedgerRow:
        """The row its journal would charge had the process died: the prompt estimate."""
        over = follow.crash_cost - follow.reserved_micros if follow.crash_cost > follow.reserved_micros else 0
        charge = Charge(follow.crash_cost, over if follow.reserved_micros else 0)
        return self._row(follow, follow.row_id, 0, HANDED_OVER, None, follow.crash_cost, charge)

    async def stop(self) -> None:
        """Stop following: each follow this process holds is charged its crash cost (its reservation settled
        to it, its admission closed by that row) and handed over, for the next process to adopt at once."""
        self._stopping.set()
        follows = list(self._follows.values())
        tasks = [task for _follow, task in follows]
        if self._leases is not None:
            tasks.append(self._leases)
        await asyncio.gather(*tasks, return_exceptions=True)
        for follow, _task in follows:
            if follow.response_id in self._charged:
                continue
            await self._close_at_crash_cost(follow)
            try:
                await self._repository.hand_over(follow.response_id)
            except Exception as exc:  # its lease expires by itself
                log.warning("background response %s: not handed over (%r)", follow.response_id, exc)
