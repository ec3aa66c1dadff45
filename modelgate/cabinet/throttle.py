"""Login throttling shared by every gateway process (the `login_attempts` table).

Failed password checks are counted against three subjects, each with its own number of free failures,
after which every further failure makes the next attempt wait twice as long (`first_delay_seconds`,
doubling, at most `max_delay_seconds`), answered 429 with Retry-After:

- the pair (account, client address): `max_failures` free failures;
- the client address, across all accounts: `max_failures * ADDRESS_FAILURE_FACTOR`;
- the account, across all addresses: `max_failures * ACCOUNT_FAILURE_FACTOR`.

A pair that logged in successfully within `KNOWN_ADDRESS_SECONDS` is a known address of that account: its
attempts are counted only against the pair, so neither an attacker elsewhere (account bound) nor one
behind the same address (address bound) can keep the owner out. A success clears the pair's failures and
gives the address and the account back the slot the attempt took. Failures are forgotten after
`FAILURE_MEMORY_SECONDS` without a new one.

Each attempt reserves its slot (counts as a failure) under row locks before the password is checked, so a
burst of parallel guesses cannot outrun the bound; a success undoes the reservation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from modelgate.cabinet.requests import CabinetError
from modelgate.storage.database import Database, Executor, Row

# Many users can share one address (offices, NAT), and an account can be tried from many addresses.
ADDRESS_FAILURE_FACTOR = 4
ACCOUNT_FAILURE_FACTOR = 4
KNOWN_ADDRESS_SECONDS = 30 * 86400
FAILURE_MEMORY_SECONDS = 86400
# Stale rows removed per attempt: more than an attempt can create (three), so the table cannot grow on.
_PRUNE_BATCH = 100


@dataclass(frozen=True, slots=True)
class _Subject:
    """Something failures are counted against, with the failures it gets free."""

    key: str
    free_failures: int
    is_pair: bool = False


@dataclass(frozen=True, slots=True)
class Admission:
    """An admitted attempt: the subjects its reservation was counted against."""

    subjects: tuple[_Subject, ...]


@dataclass(frozen=True, slots=True)
class LoginThrottle:
    """The throttle policy: free failures of a pair, the first wait after them, and the longest wait."""

    max_failures: int
    first_delay_seconds: float
    max_delay_seconds: float

    def delay_after(self, failures: int, free_failures: int) -> float:
        """How long the next attempt waits after `failures` failures of a subject (0 while still free)."""
        if failures < free_failures:
            return 0.0
        exponent = min(failures - free_failures, 64)  # 2**64 seconds is past any cap
        return min(self.max_delay_seconds, self.first_delay_seconds * 2.0**exponent)

    def _subjects(self, email: str, address: str | None) -> tuple[_Subject, _Subject | None, _Subject]:
        pair = _Subject(f"pair:{email} {address or '-'}", self.max_failures, is_pair=True)
        by_address = (
            _Subject(f"address:{address}", self.max_failures * ADDRESS_FAILURE_FACTOR) if address else None
        )
        account = _Subject(f"account:{email}", self.max_failures * ACCOUNT_FAILURE_FACTOR)
        return pair, by_address, account

    async def admit(self, db: Database, email: str, address: str | None, at: float) -> Admission:
        """Reserve an attempt for `email` from `address`; 429 with Retry-After while any subject waits."""
        await db.execute(_prune_sql(db.dialect), at)
        pair, by_address, account = self._subjects(email, address)
        async with db.transaction() as tx:
            # Always pair, address, account: one lock order everywhere, so transactions never deadlock.
            pair_row = await _locked(tx, pair, at)
            rows = [(pair, pair_row)]
            known = pair_row["last_success_at"] is not None and pair_row["last_success_at"] > (
                at - KNOWN_ADDRESS_SECONDS
            )
            if not known:
                if by_address is not None:
                    rows.append((by_address, await _locked(tx, by_address, at)))
                rows.append((account, await _locked(tx, account, at)))
            wait = max((row["blocked_until"] or 0.0) - at for _, row in rows)
            if wait > 0:
                # Leaving the block by raising rolls the transaction back: nothing is counted.
                raise CabinetError(
                    429,
                    "too many failed login attempts; try again later",
                    headers={"Retry-After": str(max(1, math.ceil(wait)))},
                )
            for subject, row in rows:
                failures = row["failures"] + 1
                delay = self.delay_after(failures, subject.free_failures)
                await tx.execute(
                    "UPDATE login_attempts SET failures = $2, blocked_until = $3, last_failure_at = $4,"
                    " forget_at = $5 WHERE subject = $1",
                    subject.key,
                    failures,
                    at + delay if delay > 0 else None,
                    at,
                    _forget_at(row, at),
                )
        return Admission(tuple(subject for subject, _ in rows))

    async def succeeded(self, db: Database, admission: Admission, at: float) -> None:
        """The admitted attempt succeeded: clear the pair, remember it as a known address, and give the
        address and the account their slot back."""
        async with db.transaction() as tx:
            for subject in admission.subjects:
                if subject.is_pair:
                    await tx.execute(
                        "UPDATE login_attempts SET failures = 0, blocked_until = NULL, last_success_at = $2,"
                        " forget_at = $3 WHERE subject = $1",
                        subject.key,
                        at,
                        at + KNOWN_ADDRESS_SECONDS,
                    )
                    continue
                row = await _locked(tx, subject, at)
                failures = max(0, row["failures"] - 1)
                blocked_until = row["blocked_until"] if failures >= subject.free_failures else None
                await tx.execute(
                    "UPDATE login_attempts SET failures = $2, blocked_until = $3 WHERE subject = $1",
                    subject.key,
                    failures,
                    blocked_until,
                )


def _forget_at(row: Row, at: float) -> float:
    known_until = (row["last_success_at"] or 0.0) + KNOWN_ADDRESS_SECONDS
    return max(at + FAILURE_MEMORY_SECONDS, known_until)


async def _locked(tx: Executor, subject: _Subject, at: float) -> Row:
    """The subject's row, created when missing and locked until the transaction ends (the no-op update
    takes PostgreSQL's row lock; SQLite transactions hold the database write lock); failures older than
    the memory are forgotten."""
    row = await tx.fetchrow(_LOCK_ROW, subject.key, at + FAILURE_MEMORY_SECONDS)
    assert row is not None
    last_failure = row["last_failure_at"]
    if last_failure is not None and last_failure + FAILURE_MEMORY_SECONDS <= at:
        return {**row, "failures": 0, "blocked_until": None}
    return row


_LOCK_ROW = """
INSERT INTO login_attempts (subject, failures, blocked_until, last_failure_at, last_success_at, forget_at)
VALUES ($1, 0, NULL, NULL, NULL, $2)
ON CONFLICT (subject) DO UPDATE SET subject = excluded.subject
RETURNING failures, blocked_until, last_failure_at, last_success_at
"""


def _prune_sql(dialect: str) -> str:
    # Skipping rows another transaction holds keeps the clean-up from ever waiting on (or deadlocking
    # with) an attempt; SQLite serialises writers, so it needs no such clause.
    skip_locked = " FOR UPDATE SKIP LOCKED" if dialect == "postgres" else ""
    return (
        "DELETE FROM login_attempts WHERE subject IN (SELECT subject FROM login_attempts"
        f" WHERE forget_at < $1 ORDER BY forget_at LIMIT {_PRUNE_BATCH}{skip_locked})"
    )
