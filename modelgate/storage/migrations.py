"""Versioned SQL migrations, applied at start and by `modelgate migrate`.

Migration files live in `modelgate/storage/migrations/NNNN_name.sql`; a `NNNN_name.postgres.sql` or
`NNNN_name.sqlite.sql` twin overrides the common file for one backend. Each migration runs in its own
transaction together with its `schema_version` row, so a failed migration leaves the database unchanged.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from importlib import resources

from modelgate.storage.database import Database

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+?)(?:\.(postgres|sqlite))?\.sql$")
# An arbitrary constant: serialises concurrent migrators across processes on PostgreSQL.
_PG_LOCK_KEY = 0x6D6F64656C67


class MigrationError(Exception):
    """A migration failed; the database stays at the last good version."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step, with its SQL per dialect."""

    version: int
    name: str
    sql: dict[str, str]

    def statements(self, dialect: str) -> list[str]:
        text = self.sql.get(dialect) or self.sql["common"]
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        return [stmt.strip() for stmt in text.split(";") if stmt.strip()]


def discover_migrations() -> tuple[Migration, ...]:
    """Read the packaged migration files, ordered by version."""
    found: dict[int, dict[str, str]] = {}
    names: dict[int, str] = {}
    for entry in resources.files("modelgate.storage").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if not match:
            continue
        version = int(match.group(1))
        names[version] = match.group(2)
        found.setdefault(version, {})[match.group(3) or "common"] = entry.read_text(encoding="utf-8")
    return tuple(Migration(v, names[v], found[v]) for v in sorted(found))


MIGRATIONS = discover_migrations()

_CREATE_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_version ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
)


async def _ensure_version_table(db: Database) -> None:
    # CREATE TABLE IF NOT EXISTS still races on PostgreSQL's catalog; the advisory lock serialises it.
    async with db.transaction() as tx:
        if db.dialect == "postgres":
            await tx.execute("SELECT pg_advisory_xact_lock($1)", _PG_LOCK_KEY)
        await tx.execute(_CREATE_VERSION_TABLE)


async def current_version(db: Database) -> int:
    """The highest applied migration (0 on an empty database)."""
    await _ensure_version_table(db)
    return int(await db.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version") or 0)


async def apply_migrations(db: Database, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply every pending migration; returns the versions applied (empty when up to date)."""
    await _ensure_version_table(db)
    applied: list[int] = []
    for migration in migrations:
        async with db.transaction() as tx:
            if db.dialect == "postgres":
                await tx.execute("SELECT pg_advisory_xact_lock($1)", _PG_LOCK_KEY)
            done = await tx.fetchval("SELECT 1 FROM schema_version WHERE version = $1", migration.version)
            if done:
                continue
            try:
                for statement in migration.statements(db.dialect):
                    await tx.execute(statement)
            except Exception as exc:
                raise MigrationError(
                    f"migration {migration.version:04d}_{migration.name} failed: {exc}"
                ) from exc
            await tx.execute(
                "INSERT INTO schema_version (version, name, applied_at) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                time.time(),
            )
            applied.append(migration.version)
    return applied
