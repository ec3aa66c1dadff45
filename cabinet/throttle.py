"""Login throttling shared by every gateway process (the `login_throttle` table).

Each attempt first reserves a slot on its subjects (the account and the client address); a subject with
too many failures in its window is locked for `login_lockout_seconds` and answered 429 with Retry-After.
Reserving before the password check means a burst of parallel guesses cannot outrun the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cabinet.requests import CabinetError
from cabinet.storage.database import Executor

# Many users can share one address (offices, NAT), so an address may fail more often than one account.
ADDRESS_FAILURE_FACTOR = 4


@dataclass(frozen=True, slots=True)
class ThrottleSubject:
    """Something failures are counted against; `account` subjects are cleared by a success."""

    key: str
    limit: int
    is_account: bool


@dataclass(frozen=True, slots=True)
class LoginThrottle:
    """The throttle policy: failures allowed per window, and how long a lockout lasts."""

    max_failures: int
    lockout_seconds: float

    def subjects(self, email: str, address: str | None) -> tuple[ThrottleSubject, ...]:
        """The account and (when known) the client address of a login attempt."""
        account = ThrottleSubject(f"account:{email}", self.max_failures, True)
        if not address:
            return (account,)
        return (
            account,
            ThrottleSubject(f"address:{address}", self.max_failures * ADDRESS_FAILURE_FACTOR, False),
        )

    async def reserve(self, ex: Executor, subjects: tuple[ThrottleSubject, ...], at: float) -> None:
        """Count an attempt against every subject; 429 when any of them is locked or over its limit."""
        retry_after = 0.0
        for subject in subjects:
            row = await ex.fetchrow(_RESERVE, subject.key, at, float(self.lockout_seconds))
            assert row is not None
            locked_until = row["locked_until"]
            if locked_until is not None and locked_until > at:
                retry_after = max(retry_after, locked_until - at)
            elif row["failures"] > subject.limit:
                # Parallel attempts overshot the limit before any of them failed: lock now.
                await ex.execute(_LOCK, subject.key, at + self.lockout_seconds, 0)
                retry_after = max(retry_after, float(self.lockout_seconds))
        if retry_after > 0:
            raise CabinetError(
                429,
                "too many failed login attempts; try again later",
                headers={"Retry-After": str(max(1, math.ceil(retry_after)))},
            )

    async def failed(self, ex: Executor, subjects: tuple[ThrottleSubject, ...], at: float) -> None:
        """The reserved attempt failed: lock every subject that has now reached its limit."""
        for subject in subjects:
            await ex.execute(_LOCK, subject.key, at + self.lockout_seconds, subject.limit)

    async def succeeded(self, ex: Executor, subjects: tuple[ThrottleSubject, ...]) -> None:
        """The reserved attempt succeeded: clear the account, give the address its slot back."""
        for subject in subjects:
            if subject.is_account:
                await ex.execute("DELETE FROM login_throttle WHERE subject = $1", subject.key)
            else:
                await ex.execute(
                    "UPDATE login_throttle SET failures = failures - 1 WHERE subject = $1 AND failures > 0",
                    subject.key,
                )


# A window that has run out (and is not locked) starts over at this attempt.
_WINDOW_OVER = (
    "login_throttle.window_started_at + $3 <= $2 AND COALESCE(login_throttle.locked_until, 0) <= $2"
)
_RESERVE = f"""
INSERT INTO login_throttle (subject, failures, window_started_at, locked_until) VALUES ($1, 1, $2, NULL)
ON CONFLICT (subject) DO UPDATE SET
    failures = CASE WHEN {_WINDOW_OVER} THEN 1 ELSE login_throttle.failures + 1 END,
    window_started_at = CASE WHEN {_WINDOW_OVER} THEN $2 ELSE login_throttle.window_started_at END,
    locked_until = CASE WHEN {_WINDOW_OVER} THEN NULL ELSE login_throttle.locked_until END
RETURNING failures, locked_until
"""
_LOCK = (
    "UPDATE login_throttle SET locked_until = $2"
    " WHERE subject = $1 AND failures >= $3 AND (locked_until IS NULL OR locked_until < $2)"
)
