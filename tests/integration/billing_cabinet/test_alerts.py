"""Spend alerts: an owner's threshold, crossed in the ledger, fires once per period and is delivered as a
signed webhook to a real HTTP server on 127.0.0.1, retried after the receiver's 500, each delivery logged."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from modelgate.cabinet.alert_watcher import check_alerts, deliver_due
from modelgate.cabinet.mail import Mail
from modelgate.config import Config, EmailConfig
from modelgate.domain.policy_decisions import period_start
from tests.integration.billing_cabinet.billing_client import (
    BillingCabinet,
    BillingCabinetFactory,
    billing_config,
    insert_usage,
)


def alert_config(check_seconds: float) -> Config:
    """The default config with the watcher's round every `check_seconds` and retries due at once."""
    config = billing_config()
    billing = replace(config.billing, alert_check_seconds=check_seconds, alert_retry_first_delay_seconds=1e-6)
    return replace(config, billing=billing)


@dataclass
class Receiver:
    """A webhook receiver: answers the statuses queued (then 200), records each request."""

    statuses: list[int]
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    delivered: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((dict(request.headers), await request.read()))
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 200:
            self.delivered.set()
        return web.Response(status=status, text="ok")


@pytest.fixture
async def receiver(aiohttp_server: Any) -> Receiver:
    receiver = Receiver(statuses=[500])
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    receiver.url = f"http://127.0.0.1:{server.port}/hook"
    return receiver


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver does: recompute the HMAC-SHA256 of "<t>.<body>" and compare."""
    parts = dict(item.split("=", 1) for item in headers["modelgate-signature"].split(","))
    expected = hmac.new(secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"]) and abs(time.time() - int(parts["t"])) < 300


async def _daily_alert(
    cabinet: BillingCabinet, token: str, url: str, amount: int = 1_000_000
) -> dict[str, Any]:
    reply = await cabinet.call(
        "POST",
        "/alerts",
        token=token,
        json={"kind": "daily", "subjectType": "organization", "amountMicros": amount, "url": url},
    )
    assert reply.status == 201, reply.body
    return reply.body


async def test_a_crossed_daily_amount_fires_once_and_is_retried_after_a_500_until_delivered(
    start_billing_cabinet: BillingCabinetFactory, receiver: Receiver
) -> None:
    config = alert_config(3600.0)  # the test drives the rounds itself
    cabinet = await start_billing_cabinet(config)
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    alert = await _daily_alert(cabinet, owner.token, receiver.url)
    secret = alert["signingSecret"]
    await insert_usage(cabinet.db, org_id, time.time(), cost_micros=600_000)

    below = await check_alerts(cabinet.db, config, None, time.time())
    await insert_usage(cabinet.db, org_id, time.time(), cost_micros=600_000)
    fired = await check_alerts(cabinet.db, config, None, time.time())
    again = await check_alerts(cabinet.db, config, None, time.time())
    async with aiohttp.ClientSession() as session:
        first = await deliver_due(cabinet.db, session, config.billing.alert_retry_first_delay_seconds)
        second = await deliver_due(cabinet.db, session, config.billing.alert_retry_first_delay_seconds)
    log = await cabinet.call("GET", "/alerts/deliveries", token=owner.token)

    assert (below, fired, again) == (0, 1, 0)  # once per day, however many rounds see it crossed
    assert (first, second) == (0, 1)  # the 500 is retried
    assert len(receiver.received) == 2
    assert all(verify(secret, headers, body) for headers, body in receiver.received)
    assert not verify("whsec_other", *receiver.received[0])
    payload = orjson.loads(receiver.received[1][1])
    assert (payload["type"], payload["alert"]["id"], payload["spentMicros"], payload["thresholdMicros"]) == (
        "spend_alert.crossed",
        alert["id"],
        1_200_000,
        1_000_000,
    )
    [delivery] = log.body["deliveries"]
    assert (delivery["status"], delivery["attempts"], delivery["lastStatus"]) == ("delivered", 2, 200)


async def test_the_background_watcher_delivers_a_signed_webhook(
    start_billing_cabinet: BillingCabinetFactory, receiver: Receiver
) -> None:
    cabinet = await start_billing_cabinet(alert_config(0.05))
    owner = await cabinet.register()
    alert = await _daily_alert(cabinet, owner.token, receiver.url, amount=1)
    await insert_usage(cabinet.db, await cabinet.organization_id(owner), time.time(), cost_micros=5)

    await asyncio.wait_for(receiver.delivered.wait(), 30)

    assert [verify(alert["signingSecret"], h, b) for h, b in receiver.received] == [True, True]


async def test_alerts_are_for_owners_of_their_organization_and_refuse_bad_input(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    cabinet = await start_billing_cabinet(alert_config(3600.0))
    owner, other = await cabinet.register(), await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")
    first = await _daily_alert(cabinet, owner.token, "http://127.0.0.1:9/hook")
    second = await _daily_alert(cabinet, owner.token, "https://hooks.example/x")

    def post(token: str, **body: Any):
        return cabinet.call("POST", "/alerts", token=token, json={"kind": "daily", "amountMicros": 5, **body})

    assert "signingSecret" in first and "signingSecret" not in second  # shown once
    assert (await post(admin.token, url="http://127.0.0.1:9/")).status == 403
    assert (await cabinet.call("GET", "/alerts", token=admin.token)).status == 403
    refused = [
        await post(owner.token, url="ftp://127.0.0.1/x"),
        await post(owner.token, url="file:///etc/passwd"),
        await post(owner.token, url="http://127.0.0.1/", subjectType="key", subjectId="key_nope"),
        await post(owner.token, url="http://127.0.0.1/", amountMicros=0),
        await cabinet.call(
            "POST",
            "/alerts",
            token=owner.token,
            json={"kind": "budget", "url": "http://127.0.0.1/", "ruleId": "pol_nope", "percent": 80},
        ),
    ]
    assert [r.status for r in refused] == [400] * 5
    assert "http:// or https://" in refused[0].body["error"]
    listed = await cabinet.call("GET", "/alerts", token=other.token)
    assert listed.body == {"alerts": [], "hasSigningSecret": False}
    assert (await cabinet.call("DELETE", f"/alerts/{first['id']}", token=other.token)).status == 404
    assert (await cabinet.call("DELETE", f"/alerts/{first['id']}", token=owner.token)).status == 204
    mine = await cabinet.call("GET", "/alerts", token=owner.token)
    assert [a["id"] for a in mine.body["alerts"]] == [second["id"]] and mine.body["hasSigningSecret"]


async def _budget_spend(cabinet: BillingCabinet, rule_id: str, spent: int) -> None:
    """What the ledger's flush writes for a rule's budget this day."""
    await cabinet.db.execute(
        "INSERT INTO policy_budget_spend (rule_id, period_start, spent_micros) VALUES ($1, $2, $3)"
        " ON CONFLICT (rule_id, period_start) DO UPDATE SET spent_micros = $3",
        rule_id,
        period_start("day", time.time()),
        spent,
    )


async def test_budget_alerts_fire_at_their_share_and_mail_the_owners_when_email_is_configured(
    start_billing_cabinet: BillingCabinetFactory, receiver: Receiver
) -> None:
    config = replace(
        alert_config(3600.0), email=EmailConfig(host="127.0.0.1", from_address="gw@example.test")
    )
    cabinet = await start_billing_cabinet(config)
    owner = await cabinet.register()
    rule = await cabinet.create_rule(owner, budget={"amountMicros": 1_000_000, "period": "day"})
    assert rule.status == 201, rule.body
    alerts = {}
    for percent in (50, 80, 100):
        reply = await cabinet.call(
            "POST",
            "/alerts",
            token=owner.token,
            json={"kind": "budget", "ruleId": rule.body["id"], "percent": percent, "url": receiver.url},
        )
        assert reply.status == 201, reply.body
        alerts[percent] = reply.body["id"]
    mail = Mail(config, cabinet.db)

    await _budget_spend(cabinet, rule.body["id"], 800_000)
    first = await check_alerts(cabinet.db, config, mail, time.time())
    await _budget_spend(cabinet, rule.body["id"], 1_000_000)
    second = await check_alerts(cabinet.db, config, mail, time.time())
    log = await cabinet.call("GET", "/alerts/deliveries", token=owner.token)
    mails = await cabinet.db.fetch("SELECT to_address, subject FROM mail_outbox WHERE kind = 'alert'")

    assert (first, second) == (2, 1)  # 50 % and 80 % at 0.80, then 100 % once the budget is spent
    assert sorted(d["alertId"] for d in log.body["deliveries"]) == sorted(alerts.values())
    assert [m["to_address"] for m in mails] == [owner.email] * 3
    assert any("100% of the budget" in m["subject"] for m in mails)


async def test_only_an_owner_rotates_the_signing_secret_and_the_old_one_signs_no_later_attempt(
    start_billing_cabinet: BillingCabinetFactory, receiver: Receiver
) -> None:
    config = alert_config(3600.0)  # the test drives the rounds itself
    cabinet = await start_billing_cabinet(config)
    owner = await cabinet.register()
    admin, member = await cabinet.add_member(owner, "admin"), await cabinet.add_member(owner, "member")
    rotate = "/alerts/signing-secret/rotate"
    refused = [
        await cabinet.call("POST", rotate, token=admin.token),
        await cabinet.call("POST", rotate, token=member.token),
        await cabinet.call("POST", rotate),
    ]
    assert [reply.status for reply in refused] == [403, 403, 401]
    old = (await _daily_alert(cabinet, owner.token, receiver.url, amount=1))["signingSecret"]
    await insert_usage(cabinet.db, await cabinet.organization_id(owner), time.time(), cost_micros=5)
    assert await check_alerts(cabinet.db, config, None, time.time()) == 1
    async with aiohttp.ClientSession() as session:
        assert await deliver_due(cabinet.db, session, 1e-6) == 0  # the receiver answers 500 first

        rotated = await cabinet.call("POST", rotate, token=owner.token)
        assert await deliver_due(cabinet.db, session, 1e-6) == 1  # the retry, after the rotation

    new = rotated.body["signingSecret"]
    assert rotated.status == 200 and new.startswith("whsec_") and new != old
    (first_headers, first_body), (second_headers, second_body) = receiver.received
    assert verify(old, first_headers, first_body)
    assert verify(new, second_headers, second_body) and not verify(old, second_headers, second_body)
    listed = await cabinet.call("GET", "/alerts", token=owner.token)
    assert listed.body["hasSigningSecret"] and "signingSecret" not in str(listed.body)
    log = await cabinet.call("GET", "/audit-log?event=alert.signing_secret_rotated", token=owner.token)
    [entry] = log.body["entries"]
    assert entry["actor"]["email"] == owner.email and new not in str(entry) and old not in str(entry)
