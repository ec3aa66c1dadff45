"""Ledger rows for tests of the writer, its spool and its journal: built by the gateway's one row builder
(modelgate/domain/charges.py `charge_row`) and handed to the writer as the request path hands them."""

from __future__ import annotations

import os
import time

from modelgate.domain.charges import charge_row
from modelgate.domain.ledger import CRASHED, LedgerWriter
from modelgate.domain.usage import Usage
from modelgate.storage import Database


async def new_organization(db: Database, name: str, balance: int) -> str:
    """An organization of `balance` micro-units, straight in the table (for tests of the writer); its id."""
    org_id = f"org_{name.lower().replace(' ', '_')}_{os.urandom(4).hex()}"
    await db.execute(
        "INSERT INTO organizations (id, legal_name, plan_code, balance_micros, created_at)"
        " VALUES ($1, $2, $3, $4, $5)",
        org_id,
        name,
        "free",
        balance,
        time.time(),
    )
    return org_id


def add_row(
    writer: LedgerWriter,
    organization_id: str,
    request_id: str,
    cost: int,
    *,
    row_id: str | None = None,
    created_at: float | None = None,
    key_id: str = "key_test",
    row_key: str | None = "mock/m@mock",
    input_tokens: int = 1,
    output_tokens: int = 1,
    budgets: tuple[tuple[str, float], ...] = (),
    content_action: str = "",
    estimated: bool = False,
) -> str:
    """Add a completed request's row (under the admission `row_id`, if given); returns its id."""
    at = time.time() if created_at is None else created_at
    admitted = row_id is not None
    row_id = row_id or writer.new_row_id(at)
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, estimated=estimated)
    who = (row_id, organization_id, key_id, None, "m", row_key, request_id)
    writer.add_row(charge_row(*who, 200, "completed", usage, cost, at, budgets, content_action), admitted)
    return row_id


def admit_row(
    writer: LedgerWriter,
    organization_id: str,
    request_id: str,
    crash_cost: int,
    *,
    key_id: str = "key_test",
    input_tokens: int = 1,
    budgets: tuple[tuple[str, float], ...] = (),
) -> str:
    """Journal an admitted request whose crash row charges `crash_cost`; returns its row id."""
    at = time.time()
    row_id = writer.new_row_id(at)
    who = (row_id, organization_id, key_id, None, "m", None, request_id)
    writer.admit_row(
        charge_row(*who, 0, CRASHED, None, crash_cost, at, budgets, estimated_input_tokens=input_tokens)
    )
    return row_id
