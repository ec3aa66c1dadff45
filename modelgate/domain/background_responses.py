"""Background responses being followed to their terminal state, and the one charge each gets.

A `POST /v1/responses` with `background: true` answers before the model has run (status `queued`, usage
null): its usage is known only later. The request keeps its reservation and its admission in the ledger's
journal, and the gateway follows the response (modelgate/proxy/state/background_follower.py). This table
says who follows each one: the process whose lease runs. A process that stops or dies leaves its follows to
whichever process finds their lease expired; the one charge is claimed by a conditional update of
`settled_at`, so two processes racing for the same response (or a client's own retrieves meanwhile) never
charge it twice.

What a follow's request costs should its process die first is its journal's crash row: `crash_cost` (the
prompt estimate), charged by the ledger's replay (or by the graceful stop, which hands its follows over). A
process that adopts a follow charges the rest: the final cost less that crash cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from modelgate.storage.database import Database, IntegrityViolation

_COLUMNS = (
    "response_id, row_id, organization_id, key_id, system_id, model, row_key, request_id, budgets,"
    " crash_cost_micros, crash_input_tokens, created_at, reserved_micros, most_output_tokens"
)


@dataclass(slots=True)
class BackgroundFollow:
    """One background response to follow, with what its creating request reserved and journaled."""

    response_id: str
    row_id: str  # the creating request's ledger row id (its admission in the journal)
    organization_id: str
    key_id: str | None
    system_id: str | None
    model: str
    row_key: str
    request_id: str
    budgets: tuple[tuple[str, float], ...]
    crash_cost: int  # what the journal charges should the process die before the final usage is known
    crash_input_tokens: int
    created_at: float
    reserved_micros: int  # the balance reservation its request took (an excess over it is recorded)
    most_output_tokens: int  # its output allowance (cap x n), for the physical bound; 0: no bound
    # The reservations this process holds for it; None once the follow outlived the process that made them
    # (adopted: the crash cost was charged instead, and the rest is charged without a reservation).
    reservations: list[tuple[str, int]] | None = field(default=None)

    @property
    def adopted(self) -> bool:
        return self.reservations is None


class BackgroundResponses:
    """The repository of followed background responses (the only SQL on `background_responses`)."""

    def __init__(self, db: Database, owner: str) -> None:
        self._db = db
        self.owner = owner  # this process, in the `owner` column

    async def add(self, follow: BackgroundFollow, lease_until: float) -> bool:
        """Record a follow this process starts; False when the response is followed already (for another
        request). A repeat of this very follow, whose first try was committed with its answer lost (the
        database failed over), finds its own record: True."""
        try:
            await self._db.execute(
                f"INSERT INTO background_responses ({_COLUMNS}, owner, lease_until)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
                follow.response_id,
                follow.row_id,
                follow.organization_id,
                follow.key_id,
                follow.system_id,
                follow.model,
                follow.row_key,
                follow.request_id,
                orjson.dumps(follow.budgets).decode(),
                follow.crash_cost,
                follow.crash_input_tokens,
                follow.created_at,
                follow.reserved_micros,
                follow.most_output_tokens,
                self.owner,
                lease_until,
            )
        except IntegrityViolation:
            recorded = await self._db.fetchrow(
                "SELECT row_id, owner FROM background_responses WHERE response_id = $1", follow.response_id
            )
            return recorded is not None and (recorded["row_id"], recorded["owner"]) == (
                follow.row_id,
                self.owner,
            )
        return True

    async def renew(self, lease_until: float) -> None:
        """Extend the lease of every follow this process holds."""
        await self._db.execute(
            "UPDATE background_responses SET lease_until = $1 WHERE owner = $2 AND settled_at IS NULL",
            lease_until,
            self.owner,
        )

    async def adopt(self, now: float, lease_until: float) -> list[BackgroundFollow]:
        """Take over the follows whose lease expired (their process stopped or died): each is adopted by
        exactly one process, the one whose conditional update wins."""
        return [
            found
            for found, owner, lease in await self.expired(now)
            if await self.take(found, owner, lease, lease_until)
        ]

    async def expired(self, now: float) -> list[tuple[BackgroundFollow, str, float]]:
        """The unsettled follows whose lease ran out before `now`, each with its owner and lease as read."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS}, owner, lease_until FROM background_responses"
            " WHERE settled_at IS NULL AND lease_until < $1",
            now,
        )
        return [
            (
                BackgroundFollow(
                    row["response_id"],
                    row["row_id"],
                    row["organization_id"],
                    row["key_id"],
                    row["system_id"],
                    row["model"],
                    row["row_key"],
                    row["request_id"],
                    tuple(tuple(budget) for budget in orjson.loads(row["budgets"])),
                    int(row["crash_cost_micros"]),
                    int(row["crash_input_tokens"]),
                    float(row["created_at"]),
                    int(row["reserved_micros"]),
                    int(row["most_output_tokens"]),
                ),
                row["owner"],
                row["lease_until"],
            )
            for row in rows
        ]

    async def take(self, follow: BackgroundFollow, owner: str, lease: float, lease_until: float) -> bool:
        """Adopt `follow` if it is still as `expired` read it (that owner, that lease): one taker wins."""
        return bool(
            await self._db.execute(
                "UPDATE background_responses SET owner = $1, lease_until = $2"
                " WHERE response_id = $3 AND owner = $4 AND lease_until = $5 AND settled_at IS NULL",
                self.owner,
                lease_until,
                follow.response_id,
                owner,
                lease,
            )
        )

    async def claim_charge(self, response_id: str, now: float) -> bool:
        """The one charge of a response: True for the single caller that takes it."""
        return bool(
            await self._db.execute(
                "UPDATE background_responses SET settled_at = $1"
                " WHERE response_id = $2 AND settled_at IS NULL",
                now,
                response_id,
            )
        )

    async def hand_over(self, response_id: str) -> None:
        """Let another process adopt this follow at once (this one stops; its crash cost is charged)."""
        await self._db.execute(
            "UPDATE background_responses SET lease_until = 0 WHERE response_id = $1 AND owner = $2",
            response_id,
            self.owner,
        )
