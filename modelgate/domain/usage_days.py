"""The ledger's sums per organization, UTC day, model, key and system (table `usage_days`, migration 0024).

The ledger's flush adds each batch's sums in the batch's own transaction (`UsageDays`, called by
modelgate/domain/ledger.py), so the table always agrees with `usage_ledger`; the cabinet's usage reports read
it (modelgate/cabinet/usage_repository.py) instead of summing a month of ledger rows per call.
"""

from __future__ import annotations

from collections.abc import Sequence

from modelgate.storage.database import Transaction

SECONDS_PER_DAY = 86400
# The statuses the gateway refuses a request with before it reaches a provider (balance or budget, policy,
# rate limits): what usage reports count apart from served requests.
REFUSED_STATUSES = (402, 403, 429)
# The key or system of a ledger row without one (a primary key column takes no NULL).
NO_ID = ""

_UPSERT = (
    "INSERT INTO usage_days (organization_id, day, model, key_id, system_id, requests, refused, errors,"
    " input_tokens, cached_input_tokens, output_tokens, cost_micros)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
    " ON CONFLICT (organization_id, day, model, key_id, system_id) DO UPDATE SET"
    " requests = usage_days.requests + excluded.requests, refused = usage_days.refused + excluded.refused,"
    " errors = usage_days.errors + excluded.errors,"
    " input_tokens = usage_days.input_tokens + excluded.input_tokens,"
    " cached_input_tokens = usage_days.cached_input_tokens + excluded.cached_input_tokens,"
    " output_tokens = usage_days.output_tokens + excluded.output_tokens,"
    " cost_micros = usage_days.cost_micros + excluded.cost_micros"
)


def day_number(created_at: float) -> int:
    """The UTC day of an epoch second, as whole days since the epoch."""
    return int(created_at // SECONDS_PER_DAY)


def is_refused(status: int) -> bool:
    """Whether the gateway refused the request (402, 403, 429)."""
    return status in REFUSED_STATUSES


def is_error(status: int) -> bool:
    """Whether a request the gateway did not refuse failed (another 4xx or 5xx, or never answered: 0)."""
    return (status >= 400 or status == 0) and status not in REFUSED_STATUSES


class UsageDays:
    """The sums of some ledger rows per (organization, day, model, key, system), added to `usage_days` by
    `write` (one upsert per group, whatever the number of rows)."""

    __slots__ = ("_sums",)

    def __init__(self) -> None:
        self._sums: dict[tuple[str, int, str, str, str], list[int]] = {}

    def add(
        self,
        organization_id: str,
        created_at: float,
        model: str,
        key_id: str | None,
        system_id: str | None,
        status: int,
        tokens: Sequence[int],
        cost_micros: int,
    ) -> None:
        """Count one ledger row; `tokens` are its input, cached input and output tokens."""
        group = (organization_id, day_number(created_at), model, key_id or NO_ID, system_id or NO_ID)
        sums = self._sums.get(group)
        if sums is None:
            sums = self._sums[group] = [0, 0, 0, 0, 0, 0, 0]
        sums[0] += 1
        sums[1] += is_refused(status)
        sums[2] += is_error(status)
        sums[3] += tokens[0]
        sums[4] += tokens[1]
        sums[5] += tokens[2]
        sums[6] += cost_micros

    async def write(self, tx: Transaction) -> None:
        """Add the sums to the table (in the transaction that writes their ledger rows)."""
        if self._sums:
            await tx.executemany(_UPSERT, [(*group, *sums) for group, sums in self._sums.items()])
