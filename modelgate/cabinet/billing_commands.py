"""`modelgate billing …`: the operator's money and plan actions, on the configured storage or through the
operator API of a running gateway (`--url`).

On storage, a balance event is announced after commit on the `modelgate_billing` channel (PostgreSQL NOTIFY,
the host channel file beside a SQLite database, and Redis when configured) and a plan change on
`modelgate_plan_changed`, so running gateways follow at once (a gateway on SQLite also reads new balance
events from the database every second).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import asyncpg
import orjson

from modelgate.cabinet.billing import (
    ADJUSTMENT_KINDS,
    adjust_balance,
    change_plan,
    mark_invoice_paid,
    top_up,
)
from modelgate.cabinet.clock import now
from modelgate.cabinet.operator import organization_invoices_json, payment_json
from modelgate.cabinet.registration_invitations import invite_organization
from modelgate.cabinet.requests import CabinetError
from modelgate.config import Config
from modelgate.domain.accounts import BILLING_CHANNEL, PLAN_CHANNEL
from modelgate.domain.allowance import grant_allowance
from modelgate.domain.events import SET, BalanceEvent
from modelgate.domain.money import format_money, parse_money
from modelgate.domain.organizations import billing_state
from modelgate.proxy.state.host_channel import HostChannel
from modelgate.storage import MIGRATIONS, Database, StorageError, open_database

EXIT_OK = 0
EXIT_ERROR = 2
COMMANDS = ("mark-paid", "top-up", "adjust", "set-plan", "invite-org", "invoices")


class CommandError(Exception):
    """A billing command failed; the message is printed and the exit code is 2."""


@dataclass(frozen=True, slots=True)
class Note:
    """A line printed after the result: what was notified (stdout) or a warning (stderr)."""

    warning: bool
    text: str


@dataclass(frozen=True, slots=True)
class Order:
    """One billing command as the operator typed it, with its amount already in micro-units."""

    command: str
    invoice_id: str = ""
    organization_id: str = ""
    micros: int = 0
    kind: str = ""
    reason: str = ""
    plan_code: str = ""
    email: str = ""


# -- on the configured storage ---------------------------------------------------------------------------


async def open_storage(config: Config) -> Database:
    url = config.storage.url
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///") or "modelgate.db"
        # Opening would create an empty file; an operator pointing at the wrong path wants to know.
        if path != ":memory:" and not await asyncio.to_thread(os.path.isfile, path):
            raise CommandError(f"no database at {path}: check storage.url, or run `modelgate migrate` first")
    try:
        db = await open_database(url, pool_size=2)
    except StorageError as exc:
        raise CommandError(str(exc)) from exc
    try:
        version = int(await db.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version") or 0)
    except Exception:
        version = 0
    needed = MIGRATIONS[-1].version
    if version < needed:
        await db.close()
        raise CommandError(
            f"the database schema is at version {version}, this modelgate needs {needed}:"
            " run `modelgate migrate`"
        )
    return db


async def _publish(config: Config, db: Database, channel: str, payload: str) -> tuple[list[str], list[Note]]:
    """Send one message to running gateways over PostgreSQL NOTIFY, the host channel of a SQLite database
    and Redis: (where it went, warnings)."""
    told: list[str] = []
    warnings: list[Note] = []
    try:
        host = HostChannel.open(config.storage.url)
    except OSError as exc:
        warnings.append(Note(True, f"warning: the change is stored, but the host channel failed: {exc}"))
    else:
        if host is not None:
            try:
                await host.publish(channel, payload)
                told.append("the host channel")
            finally:
                host.close()
    if db.dialect == "postgres":
        try:
            await db.notify(channel, payload)
            told.append("PostgreSQL")
        except Exception as exc:
            warnings.append(
                Note(True, f"warning: the change is stored, but the PostgreSQL notification failed: {exc}")
            )
    if config.redis.enabled:
        from modelgate.infra.redis_client import redis_client

        client = redis_client(config.redis, health_check_interval=0)
        try:
            await client.publish(channel, payload)
            told.append("Redis")
        except Exception as exc:
            warnings.append(
                Note(True, f"warning: the change is stored, but the Redis notification failed: {exc}")
            )
        finally:
            await client.aclose()
    return told, warnings


async def _announce(config: Config, db: Database, events: Sequence[BalanceEvent | None]) -> list[Note]:
    """Tell running gateways of committed balance events; the change is already stored, so a failure is
    only a warning."""
    notes: list[Note] = []
    told: set[str] = set()
    for event in events:
        if event is not None:
            where, warnings = await _publish(config, db, BILLING_CHANNEL, event.payload())
            told.update(where)
            notes += warnings
    if told:
        notes.append(
            Note(False, f"notified running gateways on {BILLING_CHANNEL} ({' and '.join(sorted(told))})")
        )
    elif not notes and any(event is not None for event in events):
        notes.append(
            Note(
                False,
                "running gateways apply it within a second: they read new balance events from the"
                " database every second (no channel reached them sooner)",
            )
        )
    return notes


async def _announce_plan(config: Config, db: Database, organization_id: str) -> list[Note]:
    told, notes = await _publish(config, db, PLAN_CHANNEL, organization_id)
    if told:
        notes.append(Note(False, f"notified running gateways on {PLAN_CHANNEL} ({' and '.join(told)})"))
    elif not notes:
        notes.append(
            Note(
                True,
                "note: running gateways were not notified (no channel reached them): API keys they have"
                " cached keep the old plan until restarted; use --url with the"
                " operator token to change the plan through the running gateway",
            )
        )
    return notes


async def _mark_paid(
    db: Database, config: Config, invoice_id: str
) -> tuple[dict[str, Any], list[BalanceEvent | None]]:
    at = now()
    async with db.transaction() as tx:
        invoice, event = await mark_invoice_paid(tx, invoice_id, at, via="cli")
        allowance = await grant_allowance(tx, config, invoice.organization_id, at)
        state = await billing_state(tx, invoice.organization_id)
    balance = state.balance_micros if state else 0
    return payment_json(config, invoice, invoice.amount_micros, balance), [event, allowance]


async def _top_up(
    db: Database, config: Config, organization_id: str, amount: int
) -> tuple[dict[str, Any], list[BalanceEvent | None]]:
    at = now()
    async with db.transaction() as tx:
        invoice, event = await top_up(tx, organization_id, amount, at, via="cli")
        allowance = await grant_allowance(tx, config, organization_id, at)
        state = await billing_state(tx, organization_id)
    return payment_json(config, invoice, amount, state.balance_micros if state else 0), [event, allowance]


async def _via_storage(config: Config, order: Order) -> tuple[dict[str, Any], list[Note]]:
    db = await open_storage(config)
    try:
        if order.command == "mark-paid":
            result, events = await _mark_paid(db, config, order.invoice_id)
        elif order.command == "top-up":
            result, events = await _top_up(db, config, order.organization_id, order.micros)
        elif order.command == "adjust":
            async with db.transaction() as tx:
                adjustment = await adjust_balance(
                    tx, order.organization_id, order.kind, order.micros, order.reason, now(), via="cli"
                )
            result, events = adjustment.to_json(config.billing.currency), [adjustment.event]
        elif order.command == "set-plan":
            at = now()
            async with db.transaction() as tx:
                previous, plan = await change_plan(
                    tx, config, order.organization_id, order.plan_code, at, via="cli"
                )
                allowance = await grant_allowance(tx, config, order.organization_id, at)
            result = {
                "organizationId": order.organization_id,
                "planCode": plan.code,
                "previousPlanCode": previous,
            }
            notes = await _announce_plan(config, db, order.organization_id)
            return result, notes + (await _announce(config, db, [allowance]) if allowance else [])
        elif order.command == "invite-org":
            invitation, token = await invite_organization(db, config, order.email, order.plan_code, now())
            return {**invitation, "token": token}, []
        else:
            return await organization_invoices_json(db, config, order.organization_id), []
        return result, await _announce(config, db, events)
    except CabinetError as exc:
        raise CommandError(exc.message) from exc
    except (StorageError, asyncpg.PostgresError, sqlite3.Error, OSError) as exc:
        raise CommandError(f"storage error: {exc}") from exc
    finally:
        await db.close()


# -- through a running gateway's operator API ------------------------------------------------------------


async def call_operator_api(
    base_url: str, token: str, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Call `{base_url}/api/operator{path}`; any failure is a CommandError with the gateway's message."""
    base = base_url.rstrip("/").removesuffix("/api")
    if not base.startswith(("http://", "https://")):
        raise CommandError(f"--url must be the gateway's http:// or https:// address, not {base_url!r}")
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.request(
                method,
                f"{base}/api/operator{path}",
                data=None if body is None else orjson.dumps(body),
                headers=headers,
            ) as response,
        ):
            raw = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise CommandError(f"cannot reach the gateway at {base}: {exc or type(exc).__name__}") from exc
    try:
        answer = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        answer = {}
    if status >= 400 or not isinstance(answer, dict):
        message = answer.get("error") if isinstance(answer, dict) else None
        hint = ""
        if status == 404 and message == "not found":
            hint = " (is server.operator_token configured on the gateway?)"
        raise CommandError(f"the gateway answered HTTP {status}: {message or 'no error message'}{hint}")
    return answer


async def _via_api(url: str, token: str, order: Order) -> dict[str, Any]:
    if order.command == "mark-paid":
        return await call_operator_api(
            url, token, "POST", f"/invoices/{quote(order.invoice_id, safe='')}/mark-paid"
        )
    if order.command == "invite-org":
        body = {"email": order.email, "planCode": order.plan_code}
        return await call_operator_api(url, token, "POST", "/registration-invitations", body)
    org = quote(order.organization_id, safe="")
    if order.command == "top-up":
        return await call_operator_api(
            url, token, "POST", f"/organizations/{org}/top-up", {"amountMicros": order.micros}
        )
    if order.command == "adjust":
        body = {"kind": order.kind, "amountMicros": order.micros, "reason": order.reason}
        return await call_operator_api(url, token, "POST", f"/organizations/{org}/adjust", body)
    if order.command == "set-plan":
        return await call_operator_api(
            url, token, "POST", f"/organizations/{org}/plan", {"planCode": order.plan_code}
        )
    return await call_operator_api(url, token, "GET", f"/organizations/{org}/invoices")


# -- the commands ----------------------------------------------------------------------------------------


def _describe_payment(result: dict[str, Any], done: str) -> str:
    currency = result.get("currency", "")
    invoice = result["invoice"]
    return (
        f"{done}: invoice {invoice['id']} of organization {result['organizationId']}, "
        f"credited {format_money(result['creditedMicros'])} {currency}; "
        f"balance {format_money(result['balanceMicros'])} {currency}"
    )


def _describe_invoices(result: dict[str, Any]) -> list[str]:
    currency = result.get("currency", "")
    activation = f"activated {result['activatedAt']}" if result["activated"] else "not activated"
    lines = [
        f"organization {result['organizationId']} ({result['legalName']}), plan {result['planCode']}, "
        f"balance {format_money(result['balanceMicros'])} {currency}, {activation}"
    ]
    if not result["invoices"]:
        lines.append("no invoices")
    for invoice in result["invoices"]:
        lines.append(
            f"{invoice['id']}  {invoice['kind']:<6}  {invoice['status']:<4}  "
            f"{format_money(invoice['amountMicros']):>14} {currency}  created {invoice['createdAt']}"
            f"  paid {invoice['paidAt'] or '-'}"
        )
    return lines


def _describe(command: str, result: dict[str, Any]) -> list[str]:
    currency = result.get("currency", "")
    if command == "invoices":
        return _describe_invoices(result)
    if command == "adjust":
        delta = result["amountMicros"]
        return [
            f"adjusted ({result['kind']}): organization {result['organizationId']}, "
            f"{'+' if delta >= 0 else ''}{format_money(delta)} {currency}; "
            f"balance {format_money(result['balanceMicros'])} {currency} (event {result['id']})"
        ]
    if command == "set-plan":
        return [
            f"plan of organization {result['organizationId']}: {result['previousPlanCode']} -> "
            f"{result['planCode']}"
        ]
    if command == "invite-org":
        return [
            f"invited {result['email']} to register on plan {result['planCode']}"
            f" (invitation {result['id']}, expires {result['expiresAt']})",
            f"registration token (shown once): {result['token']}",
        ]
    return [_describe_payment(result, "marked paid" if command == "mark-paid" else "topped up")]


def _order(command: str, amount: str, kind: str, **fields: str) -> Order:
    """The command's order; ValueError for an amount or kind that cannot be right."""
    micros = 0
    if command == "top-up":
        micros = parse_money(amount)
    elif command == "adjust":
        if kind not in ADJUSTMENT_KINDS:
            raise ValueError(f"the kind must be one of: {', '.join(ADJUSTMENT_KINDS)}")
        # `set` names the balance to reach, which may be 0 (a freeze) or negative (a debt).
        micros = parse_money(amount, allow_zero=kind == SET, allow_negative=kind == SET)
    return Order(command, micros=micros, kind=kind, **fields)


def url_token(token: str | None) -> str:
    """The operator token that acting through a running gateway (--url) needs."""
    if not token:
        raise CommandError("--url needs the operator token: --operator-token or MODELGATE_OPERATOR_TOKEN")
    return token


async def run_billing_command(
    command: str,
    *,
    config: Config | None,
    url: str | None = None,
    token: str | None = None,
    invoice_id: str = "",
    organization_id: str = "",
    amount: str = "",
    kind: str = "",
    reason: str = "",
    plan_code: str = "",
    email: str = "",
) -> int:
    """Run one of `COMMANDS`; prints what was done and returns the exit code."""
    try:
        order = _order(
            command,
            amount,
            kind,
            invoice_id=invoice_id,
            organization_id=organization_id,
            reason=reason,
            plan_code=plan_code,
            email=email,
        )
        if url is not None:
            result, notes = await _via_api(url, url_token(token), order), []
        elif config is not None:
            result, notes = await _via_storage(config, order)
        else:
            raise CommandError("no config to find the storage in; give --config FILE or --url")
    except (CommandError, ValueError) as exc:
        print(f"modelgate billing {command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print("\n".join(_describe(command, result)))
    for note in notes:
        print(note.text, file=sys.stderr if note.warning else sys.stdout)
    return EXIT_OK
