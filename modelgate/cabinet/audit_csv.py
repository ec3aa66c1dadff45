"""The audit log as CSV (`GET /audit-log?format=csv`): one row per entry with the names beside the ids, and
every cell that a spreadsheet would read as a formula neutralised."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from modelgate.cabinet.clock import isoformat
from modelgate.domain.audit_log import AuditEntry

CSV_PAGE_SIZE = 1000
MAX_CSV_ENTRIES = 100_000
COLUMNS = (
    "createdAt",
    "id",
    "event",
    "actorType",
    "actorId",
    "actorEmail",
    "actorName",
    "targetId",
    "targetName",
    "keyId",
    "keyName",
    "systemId",
    "systemName",
    "route",
    "details",
)
# What spreadsheets take as the start of a formula (OWASP's list): such a cell gets a leading apostrophe.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A value as a cell that no spreadsheet runs: text starting like a formula is prefixed with "'"."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def _lines(rows: Iterable[Iterable[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
    return out.getvalue().encode()


def csv_header() -> bytes:
    """The header line, after a byte-order mark so spreadsheets read the file as UTF-8."""
    return "\ufeff".encode() + _lines([COLUMNS])


def csv_rows(entries: Iterable[AuditEntry], names: Mapping[str, str]) -> bytes:
    """The lines of `entries`; `names` is id → name (see `modelgate/cabinet/audit_names.py`)."""

    def name(of: str | None) -> str | None:
        return names.get(of) if of else None

    return _lines(
        (
            isoformat(e.created_at),
            e.id,
            e.event,
            e.actor.type,
            e.actor.id,
            e.actor.email,
            name(e.actor.id),
            e.target_id,
            name(e.target_id),
            e.key_id,
            name(e.key_id),
            e.system_id,
            name(e.system_id),
            e.route,
            orjson.dumps(e.details, option=orjson.OPT_SORT_KEYS).decode(),
        )
        for e in entries
    )
