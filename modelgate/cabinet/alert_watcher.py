"""The spend alert watcher: a background loop of the cabinet that, every `[billing] alert_check_seconds`,
reads the spend each alert watches (the ledger's sums and the budgets' spend, never on the model API's
request path), fires a crossed threshold once per period, and delivers the signed webhooks with backoff.

A webhook is a JSON body POSTed with `modelgate-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
"<t>.<body>" under the organization's signing secret>`; any 2xx delivers it, anything else (or no answer)
is retried after `alert_retry_first_delay_seconds`, doubling up to an hour, at most MAX_ATTEMPTS times. With
`[email]`, each firing also mails the organization's owners through the mail outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging

import aiohttp
import orjson

from modelgate.cabinet.alerts_repository import (
    BUDGET,
    AlertDelivery,
    SpendAlert,
    all_alerts,
    claim_delivery,
    due_deliveries,
    finish_attempt,
    queue_delivery,
    record_firing,
    signing_secret,
    spent_today,
)
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.mail import Mail
from modelgate.cabinet.mail_outbox import enqueue_mail
from modelgate.config import Config
from modelgate.domain.money import format_money
from modelgate.domain.policy_decisions import period_start
from modelgate.domain.policy_rules import budget_spent, rule_in_organization
from modelgate.storage.database import Database, Executor

log = logging.getLogger("modelgate.cabinet.alerts")

MAX_ATTEMPTS = 8
SIGNATURE_HEADER = "modelgate-signature"
_MAX_DELAY = 3600.0
_TIMEOUT = aiohttp.ClientTimeout(total=10)
_MAIL_KEEP_SECONDS = 7 * 86400.0


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `modelgate-signature` header value of a body sent at `timestamp`."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


async def _crossing(db: Executor, alert: SpendAlert, at: float) -> tuple[float, int, int] | None:
    """(period start, spent, threshold) when the alert's threshold is crossed now; None otherwise."""
    if alert.kind == BUDGET:
        rule = await rule_in_organization(db, alert.organization_id, alert.rule_id or "")
        if rule is None or rule.budget_micros is None or rule.budget_period is None:
            return None
        start = period_start(rule.budget_period, at)
        spent = await budget_spent(db, rule.id, start)
        threshold = rule.budget_micros * (alert.percent or 100) // 100
    else:
        start = period_start("day", at)
        subject = alert.subject_type or "organization"
        spent = await spent_today(db, alert.organization_id, subject, alert.subject_id, start)
        threshold = alert.amount_micros or 0
    return (start, spent, threshold) if spent > 0 and spent >= threshold else None


def _body(alert: SpendAlert, start: float, spent: int, threshold: int, currency: str, at: float) -> str:
    return orjson.dumps(
        {
            "type": "spend_alert.crossed",
            "alert": alert.to_json(),
            "organizationId": alert.organization_id,
            "periodStart": isoformat(start),
            "spentMicros": spent,
            "thresholdMicros": threshold,
            "currency": currency,
            "at": isoformat(at),
        }
    ).decode()


async def _mail_owners(
    tx: Executor, mail: Mail, config: Config, alert: SpendAlert, spent: int, at: float
) -> None:
    owners = await tx.fetch(
        "SELECT email FROM users WHERE organization_id = $1 AND role = 'owner'", alert.organization_id
    )
    what = (
        f"{alert.percent}% of the budget of rule {alert.rule_id}"
        if alert.kind == BUDGET
        else f"{format_money(alert.amount_micros or 0)} {config.billing.currency} a day"
        f" ({alert.subject_type}{' ' + alert.subject_id if alert.subject_id else ''})"
    )
    link = mail.link_to("alerts")
    for row in owners:
        await enqueue_mail(
            tx,
            kind="alert",
            organization_id=alert.organization_id,
            to_address=str(row["email"]),
            subject=f"Spend alert: {what} reached",
            body=f"Spend reached {format_money(spent)} {config.billing.currency}, crossing {what}.\n\n"
            f"Your alerts and their webhook deliveries: {link}\n",
            link=link,
            transport="smtp",
            at=at,
            expires_at=at + _MAIL_KEEP_SECONDS,
        )


async def check_alerts(db: Database, config: Config, mail: Mail | None, at: float) -> int:
    """Fire every alert whose threshold is crossed and that has not fired in this period; returns how many
    fired."""
    fired = 0
    for alert in await all_alerts(db):
        crossing = await _crossing(db, alert, at)
        if crossing is None:
            continue
        start, spent, threshold = crossing
        async with db.transaction() as tx:
            if not await record_firing(tx, alert.id, start, at):
                continue
            await queue_delivery(
                tx, alert, _body(alert, start, spent, threshold, config.billing.currency, at), at
            )
            if mail is not None and mail.sender is not None:
                await _mail_owners(tx, mail, config, alert, spent, at)
        fired += 1
    if fired and mail is not None:
        mail.sent()
    return fired


async def _attempt(
    session: aiohttp.ClientSession, delivery: AlertDelivery, secret: str
) -> tuple[int | None, str | None]:
    body = delivery.body.encode()
    headers = {"content-type": "application/json", SIGNATURE_HEADER: sign(secret, int(now()), body)}
    try:
        async with session.post(delivery.url, data=body, headers=headers, allow_redirects=False) as reply:
            await reply.read()
            return reply.status, None if 200 <= reply.status < 300 else f"HTTP {reply.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:300]


async def deliver_due(db: Database, session: aiohttp.ClientSession, first_delay: float) -> int:
    """Attempt every due delivery once; returns how many were delivered."""
    delivered = 0
    for delivery in await due_deliveries(db, now()):
        if not await claim_delivery(db, delivery, now() + 60.0):
            continue
        secret = await signing_secret(db, delivery.organization_id) or ""
        status, error = await _attempt(session, delivery, secret)
        at = now()
        attempts = delivery.attempts + 1
        if error is None:
            outcome, retry_at = "delivered", at
            delivered += 1
        elif attempts >= MAX_ATTEMPTS:
            outcome, retry_at = "failed", at
        else:
            outcome, retry_at = "pending", at + min(first_delay * 2 ** (attempts - 1), _MAX_DELAY)
        await finish_attempt(
            db,
            delivery.id,
            status=outcome,
            http_status=status,
            error=error,
            next_attempt_at=retry_at,
            delivered_at=at if outcome == "delivered" else None,
        )
        if error is not None:
            log.warning("alert webhook %s attempt %d: %s (%s)", delivery.id, attempts, error, outcome)
    return delivered


class AlertWatcher:
    """The background loop of one cabinet process (several processes may run it: firings are once per
    period and deliveries are claimed)."""

    def __init__(self, config: Config, db: Database, mail: Mail | None) -> None:
        self._config = config
        self._db = db
        self._mail = mail
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="modelgate-alert-watcher")

    async def stop(self) -> None:
        """Stop the loop; a delivery under way is retried later (its claim lapses)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        billing = self._config.billing
        async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
            while True:
                # A round after each interval, the first one too: a cabinet starting is no reason to look.
                await asyncio.sleep(billing.alert_check_seconds)
                try:
                    await check_alerts(self._db, self._config, self._mail, now())
                    await deliver_due(self._db, session, billing.alert_retry_first_delay_seconds)
                except asyncio.CancelledError:
                    raise
                except Exception:  # storage away: keep the loop, try again next round
                    log.exception("spend alerts could not be checked")
