"""Balances and budgets of organizations as the model API spends them.

Each organization has a live money counter: balance = stored balance - spend not yet written by the
ledger; a request may reserve up to balance + the plan's credit limit - what is already reserved. A request
reserves its worst-case cost before it is forwarded and settles to its real cost afterwards, so concurrent
requests can never spend past the headroom — except by what a provider bills beyond the bound the gateway
reserved, which is charged in full and may take the balance below its floor by that excess (settling
subtracts the real cost whatever was reserved, in process and in Redis alike: docs/billing.md).

Balance events (a paid invoice, a top-up, an operator's adjustment: `domain.events`) reach every gateway
process through the `modelgate_billing` channel (PostgreSQL NOTIFY and Redis pub/sub) and are folded into
the live counter exactly once by their sequence number, whatever the counter is doing: no rebuild from the
database, so neither a reservation in flight nor another process's unwritten spend can lose or double one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from modelgate.config import Config
from modelgate.domain.counters import Counters, MoneyAsk, MoneyState, Reserve
from modelgate.domain.errors import InsufficientBalance
from modelgate.domain.events import BalanceEvent, balance_events_since
from modelgate.domain.ledger import LedgerWriter, writer_of
from modelgate.domain.money import to_micros
from modelgate.domain.organizations import stored_balance
from modelgate.domain.policy_decisions import PolicyDirectory, PolicyRule, period_start
from modelgate.domain.policy_rules import budget_spent
from modelgate.storage.database import Database

log = logging.getLogger("modelgate.accounts")

# Gateways listen on these (PostgreSQL NOTIFY, Redis pub/sub): balance events (`BalanceEvent.payload`),
# policy rule changes and plan changes (payload: the organization id; API keys are cached with their plan).
BILLING_CHANNEL = "modelgate_billing"
POLICY_CHANNEL = "modelgate_policy"
PLAN_CHANNEL = "modelgate_plan_changed"

Broadcast = Callable[[str, str], Awaitable[None]]
_FOLLOW_SECONDS = 1.0
# Events are re-read this far back on every poll: a transaction that committed late is not missed.
_FOLLOW_OVERLAP_SECONDS = 30.0


def org_tag(organization_id: str) -> str:
    """The Redis Cluster hash tag of an organization's counters: every key one admission or settlement
    touches carries it, so each script call touches one slot (harmless on a single Redis)."""
    return "{" + organization_id + "}"


def balance_key(organization_id: str) -> str:
    return f"bal:{org_tag(organization_id)}"


def org_rpm_window(organization_id: str) -> str:
    """The organization's request window (the plan's RPM), which every key of it counts in."""
    return f"rpm:o:{org_tag(organization_id)}"


def org_tpm_window(organization_id: str) -> str:
    """The organization's token window (the plan's TPM)."""
    return f"tpm:o:{org_tag(organization_id)}"


def settled_key(writer: str) -> str:
    """The hash of the settled costs of one ledger writer's requests (`CrashSettlements`)."""
    return f"set:{writer}"


class CrashSettlements:
    """The ledger's view of a shared (Redis) counter (`domain.ledger.SettledCharges`).

    Each admitted request's settlement records its cost under the request's ledger row id, in the same
    script call; the record is dropped once the completed row is spooled. A process killed between the two
    leaves the record, and the next start charges that crashed request exactly what the counter settled.
    """

    def __init__(self, counters: Counters) -> None:
        self._counters = counters

    async def settled(self, row_ids: list[str]) -> dict[str, int]:
        by_writer: dict[str, list[str]] = {}
        for row_id in row_ids:
            by_writer.setdefault(writer_of(row_id), []).append(row_id)
        found: dict[str, int] = {}
        for writer, ids in by_writer.items():
            found.update(await self._counters.settled(settled_key(writer), ids))
        return found

    async def charge(
        self, organization_id: str, cost: int, row_id: str, budgets: Sequence[Sequence] = ()
    ) -> None:
        """Charge a crashed request's cost to its organization's balance and to the live counters of the
        budgets it was charged to ((rule id, period start): every version of the rule's counter)."""
        if cost:
            keys = [balance_key(organization_id)]
            for rule_id, start in budgets:
                keys += await self._counters.matching(budget_counters(organization_id, rule_id, start))
            await queue_settlement(self._counters, [(key, 0) for key in keys], cost, row_id)
            await self._counters.written()

    async def forget(self, writers: set[str]) -> None:
        await self._counters.delete([settled_key(writer) for writer in writers])

    async def release(self, writers: set[str]) -> None:
        """Release the reservations these dead writers (their processes' counter ids) still held."""
        for writer in writers:
            await self._counters.reclaim(writer)

    def spooled(self, row_id: str) -> None:
        """The completed row of `row_id` is in the spool (`LedgerWriter.on_row_spooled`)."""
        self._counters.forget_settled(settled_key(writer_of(row_id)), row_id)


async def queue_settlement(
    counters: Counters, reservations: list[tuple[str, int]], actual: int, row_id: str | None
) -> None:
    """Settle each (counter, reserved) of one request to `actual`, in one batch, recording the cost under
    its ledger row id (`CrashSettlements`) when there is one. Never waits on Redis."""
    for counter_key, reserved in reservations:
        await counters.settle(counter_key, reserved, actual)
    if row_id is not None:
        counters.mark_settled(settled_key(writer_of(row_id)), row_id, actual)


def budget_key(rule: PolicyRule, start: float) -> str:
    # An edited rule starts a fresh counter, initialised from its stored spend with the new limit.
    return f"bud:{org_tag(rule.organization_id)}:{rule.id}:{int(rule.updated_at * 1000)}:{int(start)}"


def budget_counters(organization_id: str, rule_id: str, start: float) -> str:
    """A glob of the live counters of a rule's budget for the period starting at `start`, every version."""
    return f"bud:{org_tag(organization_id)}:{rule_id}:*:{int(start)}"


_PERIOD_ADJECTIVES = {"day": "daily", "month": "monthly"}


def refusal(outcome: int, rule: PolicyRule | None = None) -> InsufficientBalance:
    """The 402 for a refused reservation: on the balance (`rule` None) or on a policy rule's budget."""
    if rule is not None:
        period = rule.budget_period or ""
        return InsufficientBalance(
            f"Insufficient balance: the {_PERIOD_ADJECTIVES.get(period, period)}"
            f" budget of policy rule {rule.id} is exhausted."
        )
    if outcome == Reserve.NOT_ACTIVATED:
        return InsufficientBalance(
            "Insufficient balance: the organization's first invoice is not paid yet, so model requests"
            " are on hold until it is."
        )
    return InsufficientBalance(
        "Insufficient balance: the balance (and the plan's credit limit) cannot cover this request's "
        "maximum cost. Top up or lower max_tokens."
    )


def _credit_limits(config: Config) -> dict[str, int]:
    # In micro-units per plan code, converted once per config: every reservation reads one (and `to_micros`
    # goes through Decimal).
    return {plan.code: to_micros(plan.credit_limit) for plan in config.plans}


_MAX_ASKS = 10_000


class BudgetAsks:
    """The last reservation each budget counter was asked in this process (its amount, time, and whether it
    was refused): a budget whose room is below it cannot take the next request like it, though its spend
    may be far from the limit (a reservation is a request's worst case, not its cost)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, float, bool]] = {}

    def record(self, counter_key: str, amount: int, at: float, refused: bool) -> None:
        if len(self._last) >= _MAX_ASKS and counter_key not in self._last:
            self._last.clear()  # old periods' and edited rules' counters: a meter only reads the current one
        self._last[counter_key] = (amount, at, refused)

    def last(self, counter_key: str) -> tuple[int, float, bool] | None:
        """(amount, time, refused) of the last reservation asked of this counter, or None."""
        return self._last.get(counter_key)


class Accounts:
    """Reservations against balances and budgets; the cabinet's billing sink."""

    def __init__(
        self,
        db: Database,
        config: Config,
        counters: Counters,
        ledger: LedgerWriter,
        policies: PolicyDirectory,
        *,
        shared: bool,
    ) -> None:
        self._db = db
        self._credit_limits = _credit_limits(config)
        self._counters = counters
        self._ledger = ledger
        self._policies = policies
        self._shared = shared  # counters live in Redis
        self._broadcasts: list[Broadcast] = []
        self._follower: asyncio.Task | None = None
        # The last reservation asked of each budget (what the cabinet's meters compare the room left with).
        self.budget_asks = BudgetAsks()

    def use_config(self, config: Config) -> None:
        """A reloaded config: its plans (credit limits) apply from the next reservation on."""
        self._credit_limits = _credit_limits(config)

    def add_broadcast(self, broadcast: Broadcast) -> None:
        self._broadcasts.append(broadcast)

    async def _balance_init(self, organization_id: str) -> MoneyState:
        stored = await stored_balance(self._db, organization_id)
        if stored is None:
            return MoneyState(0, False)
        balance = stored.balance_micros - self._ledger.pending_cost(organization_id)
        return MoneyState(balance, stored.activated, stored.credit_seq)

    @property
    def counters(self) -> Counters:
        return self._counters

    def balance_ask(self, organization_id: str, plan_code: str, amount: int, key: str) -> MoneyAsk:
        """The reservation of `amount` on the organization's counter `key` (`balance_key(organization_id)`,
        which a cached API key carries), as an admission asks it."""
        credit = self._credit_limits.get(plan_code, 0)

        def init() -> Awaitable[MoneyState]:
            return self._balance_init(organization_id)

        return MoneyAsk(key, amount, credit <= 0, credit, init)

    def budget_ask(self, rule: PolicyRule, amount: int, now: float) -> tuple[MoneyAsk, float]:
        """The reservation of `amount` on a rule's budget for this period; returns it and the period."""
        start = period_start(rule.budget_period or "month", now)

        async def init() -> MoneyState:
            spent = await budget_spent(self._db, rule.id, start)
            return MoneyState((rule.budget_micros or 0) - spent, True)

        return MoneyAsk(budget_key(rule, start), amount, False, 0, init), start

    async def reserve_balance(self, organization_id: str, plan_code: str, amount: int, key: str) -> None:
        """Hold `amount` of the organization's headroom in its counter `key`, or raise 402."""
        ask = self.balance_ask(organization_id, plan_code, amount, key)
        outcome = await self._counters.reserve(
            key, amount, ask.require_activation, ask.credit_limit, ask.init
        )
        if outcome != Reserve.OK:
            raise refusal(outcome)

    async def reserve_budget(self, rule: PolicyRule, amount: int, now: float) -> tuple[str, float]:
        """Hold `amount` of a rule's budget for this period, or raise 402; returns (counter, period)."""
        ask, start = self.budget_ask(rule, amount, now)
        outcome = await self._counters.reserve(ask.key, amount, False, 0, ask.init)
        if outcome != Reserve.OK:
            raise refusal(outcome, rule)
        return ask.key, start

    async def settle(self, counter_key: str, reserved: int, actual: int) -> None:
        """Release `reserved` on a counter and charge `actual`; returns once it is written (in Redis: with
        this process's next batch, or kept for retry)."""
        await self._counters.settle(counter_key, reserved, actual)
        await self._counters.written()

    async def settle_all(self, reservations: list[tuple[str, int]], actual: int, row_id: str | None) -> None:
        """`queue_settlement`, and return once it is written (in Redis: or kept for retry)."""
        await self.queue_settlement(reservations, actual, row_id)
        await self._counters.written()

    def queue_settlement(
        self, reservations: list[tuple[str, int]], actual: int, row_id: str | None
    ) -> Awaitable[None]:
        """`queue_settlement` on this gateway's counters (the cost recorded by row id only where they are
        shared); the request's row follows with `Counters.after_written`. Await what it returns."""
        # Hands back the function's own coroutine instead of wrapping it in another: one less per request.
        return queue_settlement(self._counters, reservations, actual, row_id if self._shared else None)

    # -- the cabinet's billing sink and the broadcast channel ------------------------------------------

    async def balance_changed(self, event: BalanceEvent) -> None:
        """A balance event committed by this process: apply it here, then tell the others."""
        await self._apply(event)
        payload = event.payload()
        for broadcast in self._broadcasts:
            await broadcast(BILLING_CHANNEL, payload)

    async def on_billing_message(self, payload: str) -> None:
        """A balance event announced by any process (this one, another gateway, or the CLI)."""
        event = BalanceEvent.parse(payload)
        if event is None:
            log.warning("ignored a billing message that is not a balance event")
            return
        await self._apply(event)

    def follow_stored_events(self) -> None:
        """Read new balance events from the database every second and apply them (each once, by sequence):
        the only path where no channel joins the processes (SQLite without Redis: the CLI, other workers),
        and the safety net where one does (a NOTIFY or pub/sub message sent while a listener was
        reconnecting is never delivered)."""
        self._follower = asyncio.get_running_loop().create_task(self._follow(), name="balance-events")

    async def _follow(self) -> None:
        since = time.time() - _FOLLOW_OVERLAP_SECONDS
        failing = False
        while True:
            await asyncio.sleep(_FOLLOW_SECONDS)
            try:
                events = await balance_events_since(self._db, since - _FOLLOW_OVERLAP_SECONDS)
                for event, created_at in events:  # an event not applied (Redis down) is read again
                    await self._apply(event)
                    since = max(since, created_at)
            except Exception as exc:
                if not failing:
                    log.warning("following balance events failed (%r); retrying every second", exc)
                failing = True
                continue
            failing = False

    async def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower

    async def _apply(self, event: BalanceEvent) -> None:
        await self._counters.apply_event(
            balance_key(event.organization_id), event.seq, event.amount_micros, event.activates
        )

    async def policy_changed(self, organization_id: str) -> None:
        self._policies.invalidate(organization_id)
        for broadcast in self._broadcasts:
            await broadcast(POLICY_CHANNEL, organization_id)

    def on_policy_message(self, organization_id: str) -> None:
        self._policies.invalidate(organization_id)

    def policies_untrusted(self, keep_aside: bool = True) -> None:
        """This process may miss policy changes (its lease lapsed): read policies afresh on every use (with
        `keep_aside`, the ones kept until now still serve while the database cannot be read)."""
        self._policies.untrusted(keep_aside)

    def policies_trusted(self) -> None:
        """Policy changes are heard again: compiled policies may be kept."""
        self._policies.trusted()

    def policies_changed_unseen(self) -> None:
        """Policy changes may have been announced where this process could not hear them: read all afresh."""
        self._policies.invalidate_all()

    async def plan_changed(self, organization_id: str) -> None:
        """The organization moved to another plan: every process drops the API keys it cached with the old
        plan (this one before returning); the credit limit of the new plan applies per reservation."""

        for broadcast in self._broadcasts:
            await broadcast(PLAN_CHANNEL, organization_id)
