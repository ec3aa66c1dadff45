"""The audit log as stored: its records and the only SQL on `audit_log`.

The cabinet appends an entry in the transaction of the action it describes (`record`); the model API
appends content-policy entries in batches (`record_many`). Entries are read newest first in pages by
(created_at, id), optionally filtered (`AuditFilter`). The API's handler and cursors are in
`modelgate/cabinet/audit.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor, Row

_COLUMNS = (
    "id, event, actor_type, actor_id, actor_email, target_id, details, created_at, key_id, system_id, route"
)
_INSERT = (
    "INSERT INTO audit_log (id, organization_id, event, actor_type, actor_id, actor_email, target_id,"
    " details, created_at, key_id, system_id, route) VALUES "
)
_FIELDS_PER_ENTRY = 12
# 1000 entries are 12,000 parameters: within both backends' limits (32,766 in SQLite, 32,767 in PostgreSQL).
_ENTRIES_PER_STATEMENT = 1000


@dataclass(frozen=True, slots=True)
class Actor:
    """Who performed an audited action: a user, a management key, an API key (`api_key`, on the model API),
    or nobody known (`anonymous`)."""

    type: str
    id: str | None
    email: str | None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One recorded event; `key_id`, `system_id` and `route` name the model API request it concerns (if
    it concerns one)."""

    id: str
    event: str
    actor: Actor
    target_id: str | None
    details: dict[str, Any]
    created_at: float
    key_id: str | None = None
    system_id: str | None = None
    route: str | None = None


@dataclass(frozen=True, slots=True)
class NewAuditEntry:
    """An entry about to be appended (`record_many`); its id is given when it is stored."""

    organization_id: str
    event: str
    actor: Actor
    at: float
    target_id: str | None = None
    details: dict[str, Any] | None = None
    key_id: str | None = None
    system_id: str | None = None
    route: str | None = None


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which entries a reader wants; each field left None (or empty) does not filter. `event` is an exact
    name, or a prefix when it ends in "." (`content_policy.` is every content-policy event); `routes` is any
    of those route names; `actor` an actor's id or (any case) e-mail; `since` <= created_at < `until`."""

    event: str | None = None
    target_id: str | None = None
    key_id: str | None = None
    system_id: str | None = None
    routes: tuple[str, ...] = ()
    actor: str | None = None
    since: float | None = None
    until: float | None = None


EVERY_ENTRY = AuditFilter()


def changed_fields(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The fields whose value an edit changed, each as {"before": …, "after": …}: what an `….updated`
    entry records, so an edit of one field is one change in the log."""
    return {
        name: {"before": before.get(name), "after": after.get(name)}
        for name in sorted(before.keys() | after.keys())
        if before.get(name) != after.get(name)
    }


def _values(entry: NewAuditEntry) -> tuple[Any, ...]:
    """The INSERT's arguments for one entry, a new id first."""
    return (
        new_id("aud"),
        entry.organization_id,
        entry.event,
        entry.actor.type,
        entry.actor.id,
        entry.actor.email,
        entry.target_id,
        orjson.dumps(entry.details or {}).decode(),
        entry.at,
        entry.key_id,
        entry.system_id,
        entry.route,
    )


def _placeholders(count: int) -> str:
    """The VALUES rows of an INSERT of `count` entries: ($1, ..., $12), ($13, ...), ..."""
    rows = []
    for first in range(1, count * _FIELDS_PER_ENTRY, _FIELDS_PER_ENTRY):
        rows.append("(" + ", ".join(f"${n}" for n in range(first, first + _FIELDS_PER_ENTRY)) + ")")
    return ", ".join(rows)


_INSERT_ONE = _INSERT + _placeholders(1)


async def record(
    ex: Executor,
    organization_id: str,
    event: str,
    actor: Actor,
    at: float,
    *,
    target_id: str | None = None,
    details: dict[str, Any] | None = None,
    key_id: str | None = None,
    system_id: str | None = None,
    route: str | None = None,
) -> None:
    """Append an entry; call it with the transaction of the action so both commit or neither does."""
    entry = NewAuditEntry(organization_id, event, actor, at, target_id, details, key_id, system_id, route)
    await ex.execute(_INSERT_ONE, *_values(entry))


async def record_many(ex: Executor, entries: Sequence[NewAuditEntry]) -> None:
    """Append a batch of entries: one multi-row INSERT per thousand (nothing for an empty batch)."""
    # One statement rather than executemany: it runs on the database itself as well as in a transaction
    # (neither backend's Database has executemany), and one round trip carries the whole batch.
    for start in range(0, len(entries), _ENTRIES_PER_STATEMENT):
        chunk = entries[start : start + _ENTRIES_PER_STATEMENT]
        await ex.execute(_INSERT + _placeholders(len(chunk)), *(v for e in chunk for v in _values(e)))


def _entry(row: Row) -> AuditEntry:
    return AuditEntry(
        id=row["id"],
        event=row["event"],
        actor=Actor(row["actor_type"], row["actor_id"], row["actor_email"]),
        target_id=row["target_id"],
        details=orjson.loads(row["details"]),
        created_at=row["created_at"],
        key_id=row["key_id"],
        system_id=row["system_id"],
        route=row["route"],
    )


def _filter_sql(filters: AuditFilter, args: list[Any]) -> str:
    """The filters' SQL conditions (each starting with AND), their values appended to `args`."""
    conditions = []
    if filters.event is not None:
        if filters.event.endswith("."):
            # Not LIKE (case rules differ between the backends, and _ is a wildcard) nor a range (a
            # PostgreSQL database's collation may not order by code point): the prefix compared as it is.
            args += [len(filters.event), filters.event]
            conditions.append(f" AND substr(event, 1, ${len(args) - 1}) = ${len(args)}")
        else:
            args.append(filters.event)
            conditions.append(f" AND event = ${len(args)}")
    for column in ("target_id", "key_id", "system_id"):
        value = getattr(filters, column)
        if value is not None:
            args.append(value)
            conditions.append(f" AND {column} = ${len(args)}")
    if filters.routes:
        first = len(args) + 1
        args += filters.routes
        conditions.append(" AND route IN (" + ", ".join(f"${n}" for n in range(first, len(args) + 1)) + ")")
    if filters.actor is not None:
        args.append(filters.actor)
        conditions.append(f" AND (actor_id = ${len(args)} OR lower(actor_email) = lower(${len(args)}))")
    if filters.since is not None:
        args.append(filters.since)
        conditions.append(f" AND created_at >= ${len(args)}")
    if filters.until is not None:
        args.append(filters.until)
        conditions.append(f" AND created_at < ${len(args)}")
    return "".join(conditions)


async def newest_entries(
    ex: Executor,
    organization_id: str,
    count: int,
    after: tuple[float, str] | None,
    filters: AuditFilter = EVERY_ENTRY,
) -> list[AuditEntry]:
    """Up to `count` of the organization's entries that pass the filters, newest first, those after the
    (created_at, id) position `after` when it is given."""
    args: list[Any] = [organization_id]
    where = _filter_sql(filters, args)
    if after is not None:
        args += [after[0], after[1]]
        where += (
            f" AND (created_at < ${len(args) - 1} OR (created_at = ${len(args) - 1} AND id < ${len(args)}))"
        )
    args.append(count)
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM audit_log WHERE organization_id = $1{where}"
        f" ORDER BY created_at DESC, id DESC LIMIT ${len(args)}",
        *args,
    )
    return [_entry(r) for r in rows]
