"""Degraded mode (`[redis] outage = "degraded"`): while Redis cannot be reached, each gateway process admits
requests against its own share of every money counter's headroom and of every rate limit, so what the fleet
can spend during an outage stays bounded (docs/deploy.md, "Redis outages", has the formula).

While Redis answers, the counters' keeper reads every few seconds the money counters this process asked
recently (balance, reservations, activation) and how many gateway processes are live (`live:<process>`
keys). When Redis stops answering, the process takes from that last reading:

- per money counter (the balance, each budget): a share of ⌊max(headroom, 0) / processes⌋, where headroom is
  balance + credit limit - reserved; a request's worst case is reserved against the share and its real cost
  charged to it when it settles;
- per rate window: ⌊limit / processes⌋ requests or tokens in this process's own 60-second window; when Redis
  is back, what these windows took and still counts is added to Redis's windows (and a later token
  correction of such a take corrects it there).

A counter the process never read (a tenant first seen during the outage) has no share: 503, as without
degraded mode. Settlements of requests admitted here carry no reservation into Redis (Redis never held one):
they charge the cost only, in the batches Redis takes when it is back (`redis_counters`), each once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from modelgate.domain.counters import (
    Admitted,
    InProcessCounters,
    MoneyAsk,
    Refusal,
    Reserve,
    WindowAsk,
)

_WATCHED = 4096  # money counters read for their headroom (the most recently asked ones)


def money_share(headroom: int, processes: int) -> int:
    """One process's share of a counter's headroom: an equal part per live process, rounded down (nothing of
    a counter in debt)."""
    return max(headroom, 0) // max(processes, 1)


def window_share(limit: int, processes: int) -> int:
    """One process's share of a rate limit (requests or tokens per minute), rounded down."""
    return limit // max(processes, 1)


class _Share:
    """This process's share of one money counter during an outage, and what it took of it."""

    __slots__ = ("activated", "reserved", "share", "spent")

    def __init__(self, share: int, activated: bool) -> None:
        self.share = share
        self.activated = activated
        self.reserved = 0  # worst cases of requests in flight
        self.spent = 0  # real costs of requests settled

    @property
    def used(self) -> int:
        return self.reserved + self.spent


class LocalShares:
    """The last known headroom of the counters this process uses, and its shares of them during an outage."""

    def __init__(self) -> None:
        self._credit: dict[str, int] = {}  # money counter -> the credit limit it was last asked with
        self._known: dict[str, tuple[int, bool]] = {}  # money counter -> (headroom, activated), last read
        self.processes = 1  # live gateway processes at the last reading
        self.read_at = 0.0  # when the last reading was taken (time.time(); 0: never)
        self.active = False  # an outage is on: requests are admitted here
        self._shares: dict[str, _Share] = {}
        self._windows = InProcessCounters()
        # Reservations taken here and not settled yet, (counter, amount) -> how many: their settlements
        # release them here, not in Redis. Two of one amount on one counter are interchangeable.
        self._held: dict[tuple[str, int], int] = {}

    # -- while Redis answers ---------------------------------------------------------------------------

    def note(self, money: Sequence[MoneyAsk]) -> None:
        """Remember the counters a request asked (read at the next reading)."""
        credit = self._credit
        for ask in money:
            credit[ask.key] = ask.credit_limit
        if len(credit) > _WATCHED:
            del credit[next(iter(credit))]

    def watched(self) -> list[str]:
        return list(self._credit)

    def remember(self, readings: dict[str, tuple[int, int, bool] | None], processes: int) -> None:
        """A reading: (balance, reserved, activated) per watched counter (None: not in Redis), and the
        number of live processes."""
        known, credit = self._known, self._credit
        for key, reading in readings.items():
            if reading is None:
                known.pop(key, None)
            else:
                balance, reserved, activated = reading
                known[key] = (balance + credit.get(key, 0) - reserved, activated)
        for key in [key for key in known if key not in credit]:
            del known[key]
        self.processes = max(processes, 1)
        self.read_at = time.time()

    # -- during an outage ------------------------------------------------------------------------------

    def begin(self) -> bool:
        """Start serving from the shares of the last reading; False when one is on already."""
        if self.active:
            return False
        self.active = True
        processes = self.processes
        self._shares = {
            key: _Share(money_share(headroom, processes), activated)
            for key, (headroom, activated) in self._known.items()
        }
        self._windows = InProcessCounters()
        return True

    def end(self) -> list[tuple[str, int, int]]:
        """Redis answers again: its counters decide from now on (reservations held here settle here). Returns
        what this process's windows took in the outage that still counts, (window, second, amount), for
        Redis's windows: the minute goes on there rather than starting over at the full limit."""
        self.active = False
        self._shares = {}
        takes = self._windows.takes()
        self._windows = InProcessCounters()
        return takes

    async def admit(self, windows: Sequence[WindowAsk], money: Sequence[MoneyAsk]) -> Admitted | None:
        """Take the request's windows and reservations from this process's shares, all or nothing (refusals
        as `Counters.admit_request`'s); None when a counter has no share (never read: no known headroom).

        Window results name their bucket's second negated: a correction (`adjust`) of a negative second is
        this process's own window's, not Redis's."""
        shares = self._shares
        for ask in money:
            if ask.key not in shares:
                return None
        processes = self.processes
        local = [(key, amount, window_share(limit, processes)) for key, amount, limit in windows]
        taken = await self._windows.admit(local) if local else []
        if taken and not taken[-1].allowed:
            return Admitted(Refusal.WINDOW, taken)
        for index, ask in enumerate(money):
            share = shares[ask.key]
            outcome = Reserve.OK
            if ask.require_activation and not share.activated:
                outcome = Reserve.NOT_ACTIVATED
            elif share.used + ask.amount > share.share:
                outcome = Reserve.INSUFFICIENT
            if outcome != Reserve.OK:
                for (key, amount, _limit), result in zip(local, taken, strict=True):
                    await self._windows.adjust(key, result.second, -amount)  # give the windows back
                return Admitted(Refusal.MONEY, [], index, outcome)
        held = self._held
        for ask in money:
            shares[ask.key].reserved += ask.amount
            held[ask.key, ask.amount] = held.get((ask.key, ask.amount), 0) + 1
        return Admitted(Refusal.NONE, [result._replace(second=-result.second) for result in taken])

    def settle(self, key: str, reserved: int, actual: int) -> bool:
        """Settle a reservation taken here (True), or say it was Redis's (False)."""
        held = self._held
        count = held.get((key, reserved))
        if not count:
            return False
        if count == 1:
            del held[key, reserved]
        else:
            held[key, reserved] = count - 1
        share = self._shares.get(key)
        if share is not None:
            share.reserved -= reserved
            share.spent += actual
        return True

    async def adjust(self, key: str, second: int, delta: int) -> None:
        """Correct this process's own window (a token reservation against the real usage)."""
        if self.active:
            await self._windows.adjust(key, second, delta)

    # -- observability ---------------------------------------------------------------------------------

    @property
    def known(self) -> int:
        """Money counters with a known headroom (an outage gives this process a share of each)."""
        return len(self._known)

    @property
    def held(self) -> int:
        """Reservations taken here still to settle."""
        return sum(self._held.values())

    def used_ratio(self) -> float:
        """How far into its share of the most used counter this process is (0 outside an outage; 1: full)."""
        worst = 0.0
        for share in self._shares.values():
            if share.share:
                worst = max(worst, share.used / share.share)
        return worst

    def totals(self) -> tuple[int, int]:
        """(the shares, what was taken of them) over every counter, in micro-units, during an outage."""
        shares = self._shares.values()
        return sum(share.share for share in shares), sum(share.used for share in shares)
