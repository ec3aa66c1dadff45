"""Monthly allowances: a plan's `monthly_allowance` credited to each activated organization once a month.

The grant is a balance event (kind `allowance`) whose id names the organization and the UTC month, so it
is applied at most once however many processes try: the cabinet grants it when an organization is
activated, and every gateway runs `AllowanceGrants`, which grants the month's allowance to each activated
organization still without it and announces each granted event so live counters follow. An allowance
is credited to the balance like any payment: what is not spent rolls over into the next month.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from modelgate.config import Config
from modelgate.domain.events import ALLOWANCE, BalanceEvent, apply_balance_event
from modelgate.domain.money import to_micros
from modelgate.domain.organizations import activated_without_event, billing_state
from modelgate.storage.database import Database, Executor, IntegrityViolation

log = logging.getLogger("modelgate.allowance")

# How often a gateway looks for organizations without this month's allowance: a new month is served
# within this many seconds of its start.
CHECK_SECONDS = 300.0

Announce = Callable[[BalanceEvent], Awaitable[None]]


def allowance_month(at: float) -> str:
    """The UTC month of a time as `YYYY-MM`."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m")


def allowance_event_id(organization_id: str, at: float) -> str:
    """The id of an organization's allowance event for the month of `at`: one per organization and month."""
    return f"alw_{organization_id}_{allowance_month(at)}"


async def grant_allowance(
    tx: Executor, config: Config, organization_id: str, at: float
) -> BalanceEvent | None:
    """Credit the month's allowance of the organization's plan if it is activated and has none yet this
    month; call inside a transaction and announce the event after commit. None when nothing was granted."""
    state = await billing_state(tx, organization_id)
    if state is None or not state.activated:
        return None
    plan = config.plan(state.plan_code)
    if plan is None:
        return None
    amount = to_micros(plan.monthly_allowance)
    if amount <= 0:
        return None
    return await apply_balance_event(
        tx,
        organization_id,
        ALLOWANCE,
        amount,
        at,
        reason=f"monthly allowance of plan {plan.code} for {allowance_month(at)}",
        actor="allowance",
        event_id=allowance_event_id(organization_id, at),
    )


async def organizations_due(db: Database, config: Config, at: float) -> list[str]:
    """Activated organizations on a plan with an allowance that have no allowance event for this month."""
    codes = [plan.code for plan in config.plans if to_micros(plan.monthly_allowance) > 0]
    if not codes:
        return []
    # The allowance event's id is `allowance_event_id`: "alw_" + the organization id + "_" + the month.
    return await activated_without_event(db, codes, "alw_", f"_{allowance_month(at)}")


async def grant_due_allowances(db: Database, config: Config, at: float, announce: Announce) -> int:
    """Grant this month's allowance to every organization due, one transaction each; returns how many
    this call granted (another process may have granted the rest)."""
    granted = 0
    for organization_id in await organizations_due(db, config, at):
        try:
            async with db.transaction() as tx:
                event = await grant_allowance(tx, config, organization_id, at)
        except IntegrityViolation:
            continue  # another process granted the same month's event between our check and our insert
        if event is not None:
            granted += 1
            try:
                await announce(event)
            except Exception:
                log.exception("announcing the allowance of %s failed", organization_id)
    return granted


class AllowanceGrants:
    """The gateway's periodic task: grants the month's allowances at start and every `CHECK_SECONDS`."""

    def __init__(self, db: Database, config: Config, announce: Announce, *, interval: float = CHECK_SECONDS):
        self._db = db
        self._config = config
        self._announce = announce
        self._interval = interval
        self._task: asyncio.Task | None = None

    def use_config(self, config: Config) -> None:
        """A reloaded config: its plans' allowances apply from the next pass on."""
        self._config = config

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="allowance-grants")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await grant_due_allowances(self._db, self._config, time.time(), self._announce)
            except asyncio.CancelledError:
                raise
            except Exception:  # storage down: the next pass tries again
                log.exception("granting monthly allowances failed")
            await asyncio.sleep(self._interval)
