"""Storage for the cabinet domain: one SQL dialect, two backends (SQLite and PostgreSQL)."""

from modelgate.storage.database import Database, IntegrityViolation, StorageError, open_database
from modelgate.storage.migrations import MIGRATIONS, Migration, MigrationError, apply_migrations

__all__ = [
    "MIGRATIONS",
    "Database",
    "IntegrityViolation",
    "Migration",
    "MigrationError",
    "StorageError",
    "apply_migrations",
    "open_database",
]
