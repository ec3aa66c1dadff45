"""`modelgate billing …`: the operator's payment actions, on the configured storage or through the
operator API of a running gateway (`--url`).

On storage, a change is announced after commit on the `modelgate_billing` channel (PostgreSQL NOTIFY, and
Redis when configured) so running gateways re-read the balance. SQLite alone cannot reach another
process; `--url` goes through the gateway itself, which then knows at once.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import asyncpg
import orjson

from billing.events import BalanceEvent
from billing.money import format_money, parse_money
from cabinet.billing import (
    BILLING_CHANNEL,
    billing_state,
    mark_invoice_paid,
    notify_billing_change,
    top_up,
)
from cabinet.clock import now
from cabinet.operator import organization_invoices_json, payment_json
from cabinet.requests import CabinetError
from cabinet.storage import MIGRATIONS, Database, StorageError, open_database
from config import Config

EXIT_OK = 0
EXIT_ERROR = 2
COMMANDS = ("mark-paid", "top-up", "invoices")


class CommandError(Exception):
    """A billing command failed; the message is printed and the exit code is 2."""


@dataclass(frozen=True, slots=True)
class Note:
    """A line printed after the result: what was notified (stdout) or a warning (stderr)."""

    warning: bool
    text: str


# -- on the configured storage ---------------------------------------------------------------------------


async def _open_storage(config: Config) -> Database:
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


async def _announce(config: Config, db: Database, event: BalanceEvent | None) -> list[Note]:
    """Tell running gateways after commit; the change is already stored, so a failure is only a warning."""
    notes: list[Note] = []
    told: list[str] = []
    try:
        if event is None:
            return notes
        if await notify_billing_change(db, event):
            told.append("PostgreSQL")
    except Exception as exc:
        notes.append(
            Note(True, f"warning: the change is stored, but the PostgreSQL notification failed: {exc}")
        )
    if config.redis.url:
        from redis.asyncio import Redis

        client = Redis.from_url(config.redis.url, socket_connect_timeout=2, socket_timeout=5)
        try:
            await client.publish(BILLING_CHANNEL, event.payload())
            told.append("Redis")
        except Exception as exc:
            notes.append(
                Note(True, f"warning: the change is stored, but the Redis notification failed: {exc}")
            )
        finally:
            await client.aclose()
    if told:
        notes.append(Note(False, f"notified running gateways on {BILLING_CHANNEL} ({' and '.join(told)})"))
    elif not notes:
        notes.append(
            Note(
                True,
                "note: running gateways were not notified (SQLite without Redis has no cross-process"
                " channel); use --url with the operator token to act through the running gateway",
            )
        )
    return notes


async def _mark_paid(db: Database, config: Config, invoice_id: str) -> tuple[dict[str, Any], BalanceEvent]:
    async with db.transaction() as tx:
        invoice, event = await mark_invoice_paid(tx, invoice_id, now(), via="cli")
        state = await billing_state(tx, invoice.organization_id)
    balance = state.balance_micros if state else 0
    return payment_json(config, invoice, invoice.amount_micros, balance), event


async def _top_up(
    db: Database, config: Config, organization_id: str, amount: int
) -> tuple[dict[str, Any], BalanceEvent]:
    async with db.transaction() as tx:
        invoice, event = await top_up(tx, organization_id, amount, now(), via="cli")
        state = await billing_state(tx, organization_id)
    return payment_json(config, invoice, amount, state.balance_micros if state else 0), event


async def _via_storage(
    command: str, config: Config, invoice_id: str, organization_id: str, micros: int
) -> tuple[dict[str, Any], list[Note]]:
    db = await _open_storage(config)
    try:
        if command == "mark-paid":
            result, event = await _mark_paid(db, config, invoice_id)
        elif command == "top-up":
            result, event = await _top_up(db, config, organization_id, micros)
        else:
            return await organization_invoices_json(db, config, organization_id), []
        return result, await _announce(config, db, event)
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


async def _via_api(
    command: str, url: str, token: str, invoice_id: str, organization_id: str, micros: int
) -> dict[str, Any]:
    if command == "mark-paid":
        return await call_operator_api(
            url, token, "POST", f"/invoices/{quote(invoice_id, safe='')}/mark-paid"
        )
    org = quote(organization_id, safe="")
    if command == "top-up":
        return await call_operator_api(
            url, token, "POST", f"/organizations/{org}/top-up", {"amountMicros": micros}
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


async def run_billing_command(
    command: str,
    *,
    config: Config | None,
    url: str | None = None,
    token: str | None = None,
    invoice_id: str = "",
    organization_id: str = "",
    amount: str = "",
) -> int:
    """Run `mark-paid`, `top-up` or `invoices`; prints what was done and returns the exit code."""
    try:
        micros = parse_money(amount) if command == "top-up" else 0
        if url is not None:
            if not token:
                raise CommandError(
                    "--url needs the operator token: --operator-token or MODELGATE_OPERATOR_TOKEN"
                )
            result, notes = await _via_api(command, url, token, invoice_id, organization_id, micros), []
        elif config is not None:
            result, notes = await _via_storage(command, config, invoice_id, organization_id, micros)
        else:
            raise CommandError("no config to find the storage in; give --config FILE or --url")
    except (CommandError, ValueError) as exc:
        print(f"modelgate billing {command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if command == "invoices":
        print("\n".join(_describe_invoices(result)))
    else:
        print(_describe_payment(result, "marked paid" if command == "mark-paid" else "topped up"))
    for note in notes:
        print(note.text, file=sys.stderr if note.warning else sys.stdout)
    return EXIT_OK
