"""Spend alerts as stored: the `SpendAlert` record, its firings (one per period) and the webhook deliveries
that log each firing; the only SQL on `spend_alerts`, `spend_alert_firings`, `spend_alert_deliveries` and
`alert_signing_secrets`. The handlers are in `modelgate/cabinet/alerts.py`, the watcher that fires and
delivers in `modelgate/cabinet/alert_watcher.py`."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor

BUDGET = "budget"  # a percentage of a policy rule's budget, in the rule's period
DAILY = "daily"  # an amount a UTC day, for the organization, a system or a key
_ALERT_COLUMNS = (
    "id, organization_id, kind, rule_id, percent, subject_type, subject_id, amount_micros, url, created_at"
)
_DELIVERY_COLUMNS = (
    "id, organization_id, alert_id, url, body, status, attempts, last_status, last_error, next_attempt_at,"
    " created_at, delivered_at"
)


@dataclass(frozen=True, slots=True)
class SpendAlert:
    """A threshold an owner set: `budget` alerts name a rule and a percent, `daily` ones a subject and an
    amount."""

    id: str
    organization_id: str
    kind: str
    rule_id: str | None
    percent: int | None
    subject_type: str | None
    subject_id: str | None
    amount_micros: int | None
    url: str
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """The alert object of the API."""
        return {
            "id": self.id,
            "kind": self.kind,
            "ruleId": self.rule_id,
            "percent": self.percent,
            "subjectType": self.subject_type,
            "subjectId": self.subject_id,
            "amountMicros": self.amount_micros,
            "url": self.url,
            "createdAt": isoformat(self.created_at),
        }


@dataclass(frozen=True, slots=True)
class AlertDelivery:
    """One firing's webhook: pending until the receiver answers 2xx, retried with backoff, then failed."""

    id: str
    organization_id: str
    alert_id: str
    url: str
    body: str
    status: str
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: float
    created_at: float
    delivered_at: float | None

    def to_json(self) -> dict[str, Any]:
        """The delivery log entry of the API."""
        return {
            "id": self.id,
            "alertId": self.alert_id,
            "url": self.url,
            "status": self.status,
            "attempts": self.attempts,
            "lastStatus": self.last_status,
            "lastError": self.last_error,
            "nextAttemptAt": isoformat(self.next_attempt_at) if self.status == "pending" else None,
            "createdAt": isoformat(self.created_at),
            "deliveredAt": isoformat(self.delivered_at),
        }


async def insert_alert(tx: Executor, alert: SpendAlert) -> None:
    """Store a new alert as given."""
    await tx.execute(
        f"INSERT INTO spend_alerts ({_ALERT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        alert.id,
        alert.organization_id,
        alert.kind,
        alert.rule_id,
        alert.percent,
        alert.subject_type,
        alert.subject_id,
        alert.amount_micros,
        alert.url,
        alert.created_at,
    )


async def alerts_of(ex: Executor, organization_id: str) -> list[SpendAlert]:
    """The organization's alerts, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_ALERT_COLUMNS} FROM spend_alerts WHERE organization_id = $1 ORDER BY created_at, id",
        organization_id,
    )
    return [SpendAlert(**row) for row in rows]


async def all_alerts(ex: Executor) -> list[SpendAlert]:
    """Every organization's alerts (the watcher's round)."""
    rows = await ex.fetch(f"SELECT {_ALERT_COLUMNS} FROM spend_alerts ORDER BY created_at, id")
    return [SpendAlert(**row) for row in rows]


async def delete_alert(tx: Executor, organization_id: str, alert_id: str) -> bool:
    """Remove an alert of the organization (its delivery log stays); False when it has none by that id."""
    changed = await tx.execute(
        "DELETE FROM spend_alerts WHERE id = $1 AND organization_id = $2", alert_id, organization_id
    )
    return bool(changed)


async def signing_secret(ex: Executor, organization_id: str) -> str | None:
    """The organization's webhook signing secret, None before its first alert."""
    value = await ex.fetchval(
        "SELECT secret FROM alert_signing_secrets WHERE organization_id = $1", organization_id
    )
    return str(value) if value is not None else None


async def create_signing_secret(tx: Executor, organization_id: str, at: float) -> str | None:
    """A new secret for an organization that has none (returned once, to be shown once); None when it has
    one already."""
    secret, changed = await _store_secret(tx, organization_id, at, "NOTHING")
    return secret if changed else None


async def rotate_signing_secret(tx: Executor, organization_id: str, at: float) -> str:
    """A new secret for the organization, replacing its old one (which signs nothing from now on: each
    delivery attempt reads the secret it signs with); returned once, to be shown once."""
    secret, _ = await _store_secret(
        tx, organization_id, at, "UPDATE SET secret = excluded.secret, created_at = excluded.created_at"
    )
    return secret


async def _store_secret(tx: Executor, organization_id: str, at: float, on_conflict: str) -> tuple[str, int]:
    secret = "whsec_" + secrets.token_urlsafe(32)
    changed = await tx.execute(
        "INSERT INTO alert_signing_secrets (organization_id, secret, created_at) VALUES ($1, $2, $3)"
        f" ON CONFLICT (organization_id) DO {on_conflict}",
        organization_id,
        secret,
        at,
    )
    return secret, changed


async def record_firing(tx: Executor, alert_id: str, period_start: float, at: float) -> bool:
    """Mark the alert fired in the period; False when it fired in that period already (once per period,
    however many processes watch)."""
    changed = await tx.execute(
        "INSERT INTO spend_alert_firings (alert_id, period_start, fired_at) VALUES ($1, $2, $3)"
        " ON CONFLICT (alert_id, period_start) DO NOTHING",
        alert_id,
        period_start,
        at,
    )
    return bool(changed)


async def queue_delivery(tx: Executor, alert: SpendAlert, body: str, at: float) -> str:
    """A pending webhook delivery of a firing, due now; returns its id."""
    delivery_id = new_id("dlv")
    await tx.execute(
        f"INSERT INTO spend_alert_deliveries ({_DELIVERY_COLUMNS})"
        " VALUES ($1, $2, $3, $4, $5, 'pending', 0, NULL, NULL, $6, $6, NULL)",
        delivery_id,
        alert.organization_id,
        alert.id,
        alert.url,
        body,
        at,
    )
    return delivery_id


async def due_deliveries(ex: Executor, at: float, limit: int = 20) -> list[AlertDelivery]:
    """Pending deliveries whose next attempt is due, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_DELIVERY_COLUMNS} FROM spend_alert_deliveries"
        " WHERE status = 'pending' AND next_attempt_at <= $1 ORDER BY next_attempt_at LIMIT $2",
        at,
        limit,
    )
    return [AlertDelivery(**row) for row in rows]


async def claim_delivery(ex: Executor, delivery: AlertDelivery, lease_until: float) -> bool:
    """Take a due delivery for one attempt (another process that read it too loses the race)."""
    changed = await ex.execute(
        "UPDATE spend_alert_deliveries SET next_attempt_at = $3"
        " WHERE id = $1 AND status = 'pending' AND next_attempt_at = $2",
        delivery.id,
        delivery.next_attempt_at,
        lease_until,
    )
    return bool(changed)


async def finish_attempt(
    ex: Executor,
    delivery_id: str,
    *,
    status: str,
    http_status: int | None,
    error: str | None,
    next_attempt_at: float,
    delivered_at: float | None,
) -> None:
    """Record one attempt: delivered, pending again (retry at `next_attempt_at`) or failed for good."""
    await ex.execute(
        "UPDATE spend_alert_deliveries SET status = $2, attempts = attempts + 1, last_status = $3,"
        " last_error = $4, next_attempt_at = $5, delivered_at = $6 WHERE id = $1",
        delivery_id,
        status,
        http_status,
        error,
        next_attempt_at,
        delivered_at,
    )


async def deliveries_of(ex: Executor, organization_id: str, limit: int = 100) -> list[AlertDelivery]:
    """The organization's most recent deliveries, newest first."""
    rows = await ex.fetch(
        f"SELECT {_DELIVERY_COLUMNS} FROM spend_alert_deliveries WHERE organization_id = $1"
        " ORDER BY created_at DESC, id DESC LIMIT $2",
        organization_id,
        limit,
    )
    return [AlertDelivery(**row) for row in rows]


async def spent_today(
    ex: Executor, organization_id: str, subject_type: str, subject_id: str | None, start: float
) -> int:
    """The ledger's spend since `start` of the organization, or of one of its systems or keys."""
    column = {"key": " AND key_id = $3", "system": " AND system_id = $3"}.get(subject_type, "")
    args: list[Any] = [organization_id, start] + ([subject_id] if column else [])
    spent = await ex.fetchval(
        "SELECT COALESCE(SUM(cost_micros), 0) FROM usage_ledger WHERE organization_id = $1"
        f" AND created_at >= $2{column}",
        *args,
    )
    return int(spent or 0)
