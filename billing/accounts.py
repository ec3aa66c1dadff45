"""Balances and budgets of organizations as the model API spends them.

Each organization has a live money counter: headroom = stored balance + the plan's credit limit - spend
not yet written by the ledger. A request reserves its worst-case cost before it is forwarded and settles
to its real cost afterwards, so concurrent requests can never spend past the headroom.

Credits (a paid invoice, a top-up) reach every gateway process through the `modelgate_billing` channel
(PostgreSQL NOTIFY and Redis pub/sub), payload `org_id|amount_micros|nonce`: with Redis the first process
to claim the nonce adds the amount to the shared counter; without Redis each process re-reads its
organization from the database.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable

from billing.counters import Counters, Reserve
from billing.ledger import LedgerWriter
from billing.money import to_micros
from billing.policy import PolicyDirectory, PolicyRule, period_start
from cabinet.storage.database import Database
from config import Config
from proxy.errors import InsufficientBalance

log = logging.getLogger("modelgate.accounts")

BILLING_CHANNEL = "modelgate_billing"
POLICY_CHANNEL = "modelgate_policy"

Broadcast = Callable[[str, str], Awaitable[None]]
_RECHECK_SECONDS = 1.0


def balance_key(organization_id: str) -> str:
    return f"bal:{organization_id}"


def budget_key(rule: PolicyRule, start: float) -> str:
    # An edited rule starts a fresh counter, initialised from its stored spend with the new limit.
    return f"bud:{rule.id}:{int(rule.updated_at * 1000)}:{int(start)}"


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
        claim_nonce: Callable[[str], Awaitable[bool]],
    ) -> None:
        self._db = db
        self._config = config
        self._counters = counters
        self._ledger = ledger
        self._policies = policies
        self._shared = shared  # counters live in Redis
        self._claim_nonce = claim_nonce
        self._broadcasts: list[Broadcast] = []
        self._rechecked: dict[str, float] = {}

    def _may_recheck(self, organization_id: str) -> bool:
        now = time.monotonic()
        if now - self._rechecked.get(organization_id, 0.0) < _RECHECK_SECONDS:
            return False
        self._rechecked[organization_id] = now
        if len(self._rechecked) > 100_000:
            self._rechecked.clear()
        return True

    def use_config(self, config: Config) -> None:
        """A reloaded config: its plans (credit limits) apply from the next reservation on."""
        self._config = config

    def add_broadcast(self, broadcast: Broadcast) -> None:
        self._broadcasts.append(broadcast)

    async def _balance_init(self, organization_id: str) -> tuple[int, bool]:
        row = await self._db.fetchrow(
            "SELECT balance_micros, activated_at, plan_code FROM organizations WHERE id = $1", organization_id
        )
        if row is None:
            return 0, False
        plan = self._config.plan(row["plan_code"])
        credit = to_micros(plan.credit_limit) if plan else 0
        headroom = row["balance_micros"] + credit - self._ledger.pending_cost(organization_id)
        return headroom, row["activated_at"] is not None

    async def reserve_balance(self, organization_id: str, plan_code: str, amount: int, key: str) -> None:
        """Hold `amount` of the organization's headroom in its counter `key` (`balance_key(organization_id)`,
        which a cached API key carries), or raise 402."""
        plan = self._config.plan(plan_code)
        has_credit = plan is not None and plan.credit_limit > 0
        outcome = await self._counters.reserve(
            key, amount, not has_credit, lambda: self._balance_init(organization_id)
        )
        if outcome != Reserve.OK and not self._shared and self._may_recheck(organization_id):
            # A credit made where no channel reaches us (the CLI on SQLite) shows up here, on a refusal.
            async with self._ledger.lock:
                await self._counters.refresh(key, lambda: self._balance_init(organization_id))
            outcome = await self._counters.reserve(
                key, amount, not has_credit, lambda: self._balance_init(organization_id)
            )
        if outcome == Reserve.NOT_ACTIVATED:
            raise InsufficientBalance(
                "Insufficient balance: the organization's first invoice is not paid yet, so model requests"
                " are on hold until it is."
            )
        if outcome != Reserve.OK:
            raise InsufficientBalance(
                "Insufficient balance: the balance (and the plan's credit limit) cannot cover this request's "
                "maximum cost. Top up or lower max_tokens."
            )

    async def reserve_budget(self, rule: PolicyRule, amount: int, now: float) -> tuple[str, float]:
        """Hold `amount` of a rule's budget for this period, or raise 402; returns (counter, period)."""
        start = period_start(rule.budget_period or "month", now)
        key = budget_key(rule, start)

        async def init() -> tuple[int, bool]:
            spent = await self._db.fetchval(
                "SELECT spent_micros FROM policy_budget_spend WHERE rule_id = $1 AND period_start = $2",
                rule.id,
                start,
            )
            return (rule.budget_micros or 0) - int(spent or 0), True

        if await self._counters.reserve(key, amount, False, init) != Reserve.OK:
            raise InsufficientBalance(
                f"Insufficient balance: the {rule.budget_period}ly budget of policy rule {rule.id}"
                " is exhausted."
            )
        return key, start

    async def settle(self, counter_key: str, reserved: int, actual: int) -> None:
        await self._counters.settle(counter_key, reserved, actual)

    # -- the cabinet's billing sink and the broadcast channel ------------------------------------------

    async def balance_credited(self, organization_id: str, amount_micros: int) -> None:
        payload = f"{organization_id}|{amount_micros}|{secrets.token_hex(8)}"
        await self.on_billing_message(payload)
        for broadcast in self._broadcasts:
            await broadcast(BILLING_CHANNEL, payload)

    async def on_billing_message(self, payload: str) -> None:
        """A credit announced by any process (this one, another gateway, or the CLI)."""
        organization_id, _, rest = payload.partition("|")
        amount_text, _, nonce = rest.partition("|")
        key = balance_key(organization_id)
        if self._shared:
            if nonce and amount_text.isdigit() and await self._claim_nonce(nonce):
                await self._counters.credit(key, int(amount_text))
            elif not nonce:
                await self._counters.drop(key)
            return
        async with self._ledger.lock:
            await self._counters.refresh(key, lambda: self._balance_init(organization_id))

    async def policy_changed(self, organization_id: str) -> None:
        self._policies.invalidate(organization_id)
        for broadcast in self._broadcasts:
            await broadcast(POLICY_CHANNEL, organization_id)

    def on_policy_message(self, organization_id: str) -> None:
        self._policies.invalidate(organization_id)
