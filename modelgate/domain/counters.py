"""Live counters shared by the billing and limit plugins: money headroom with reservations, and
sliding request/token windows.

Two implementations with one meaning: in-process (one gateway process) and Redis (atomic Lua scripts,
Redis server time), where every gateway process shares every counter and reservation exactly.

Concurrency: a slot counter per key (realtime sessions in flight); acquiring fails at the limit, releasing
always frees one. In Redis the count carries a safety TTL, refreshed on every acquire, so slots of a process
that died without releasing them free themselves.

Money: a counter holds `balance` (the stored balance less spend not yet written by the ledger), `reserved`
(held by requests in flight), `activated` and `credit_seq` (the last balance event folded into `balance`).
A reservation succeeds only if `balance + credit_limit - reserved >= amount` (the credit limit is passed in,
so a reloaded plan applies at once); settling releases the reservation and subtracts the real cost. Balance
events (`domain.events`) are applied once each: an event whose sequence is not newer than `credit_seq`, or
already applied, changes nothing; one announced while the counter is being built is held and folded in when
it is. Windows: 1-second buckets over 60 seconds (a sliding window).
"""

from __future__ import annotations

import fnmatch
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

WINDOW_SECONDS = 60


class Reserve:
    """Outcomes of a money reservation."""

    OK = 1
    INSUFFICIENT = 0
    NOT_ACTIVATED = -1


class WindowResult(NamedTuple):
    """A sliding-window admission: allowed or not, usage after it, seconds until the window frees up."""

    allowed: bool
    used: int
    reset_seconds: int
    second: int  # the bucket the amount went into (to correct it later)


# A WindowResult built from a tuple in C (the named tuple's own __new__ is a Python function).
_result = tuple.__new__

# (window name, amount to take, limit) for one window of an admission.
WindowAsk = tuple[str, int, int]


class MoneyState(NamedTuple):
    """A money counter's starting point, read from the database: balance, activation, last event folded in."""

    balance: int
    activated: bool
    credit_seq: int = 0


MoneyInit = Callable[[], Awaitable[MoneyState]]


@dataclass(slots=True)
class MoneyAsk:
    """A reservation a request asks of one money counter (`init` builds the counter when it has none)."""

    key: str
    amount: int
    require_activation: bool
    credit_limit: int
    init: MoneyInit


class Refusal:
    """Which part of a request's admission refused it (`Admitted.refusal`)."""

    NONE = 0
    CLAIM = 1  # the request id is claimed by a request in flight
    WINDOW = 2  # a rate window is full
    MONEY = 3  # a money counter cannot cover its reservation


@dataclass(slots=True)
class Admitted:
    """The answer to `admit_request`: when `refusal` is NONE everything was taken, else nothing was.

    `windows` has one result per window admitted; on a WINDOW refusal it ends with the refused window's.
    On a MONEY refusal, `money_index` names the counter and `money_outcome` the `Reserve` outcome."""

    refusal: int
    windows: list[WindowResult]
    money_index: int = -1
    money_outcome: int = 1


class Counters(Protocol):
    async def admit_request(
        self, claim: str | None, windows: Sequence[WindowAsk], money: Sequence[MoneyAsk]
    ) -> Admitted: ...
    def release_claim(self, claim: str) -> None: ...
    async def written(self) -> None: ...
    def after_written(self, callback: Callable[[], object]) -> None: ...
    async def flush(self) -> None: ...
    async def reserve(
        self, key: str, amount: int, require_activation: bool, credit_limit: int, init: MoneyInit
    ) -> int: ...
    async def settle(self, key: str, reserved: int, actual: int) -> None: ...
    def mark_settled(self, key: str, row_id: str, cost: int) -> None: ...
    def forget_settled(self, key: str, row_id: str) -> None: ...
    async def settled(self, key: str, row_ids: Sequence[str]) -> dict[str, int]: ...
    async def delete(self, keys: Sequence[str]) -> None: ...
    async def matching(self, pattern: str) -> list[str]: ...
    async def reclaim(self, process: str) -> None: ...
    async def apply_event(self, key: str, seq: int, amount: int, activates: bool) -> bool: ...
    async def money(self, key: str) -> tuple[int, int] | None: ...
    async def admit(self, asks: Sequence[WindowAsk]) -> list[WindowResult]: ...
    async def adjust(self, key: str, second: int, delta: int) -> None: ...
    async def acquire(self, key: str, limit: int) -> bool: ...
    async def release(self, key: str) -> None: ...
    async def start(self) -> None: ...
    async def close(self) -> None: ...


SLOT_TTL_SECONDS = 6 * 3600  # longer than any session should last; only frees slots of dead processes


class _Window:
    """One sliding window: (second, amount) buckets oldest first, and their running total."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets: deque[list[int]] = deque()
        self.total = 0


class _Account:
    """One money counter of this process."""

    __slots__ = ("activated", "applied", "balance", "credit_seq", "reserved")

    def __init__(self, state: MoneyState) -> None:
        self.balance = state.balance
        self.reserved = 0
        self.activated = state.activated
        self.credit_seq = state.credit_seq
        self.applied: set[int] = set()  # sequences above credit_seq already folded in

    def fold(self, seq: int, amount: int, activates: bool) -> bool:
        if seq <= self.credit_seq or seq in self.applied:
            return False
        self.applied.add(seq)
        self.balance += amount
        if activates:
            self.activated = True
        return True


_MAX_EARLY_EVENTS = 10_000


class InProcessCounters:
    """Counters of one process (exact for a single gateway process)."""

    def __init__(self) -> None:
        self._money: dict[str, _Account] = {}
        # Events announced for a counter not built yet (possibly being built): folded in when it is.
        self._early: dict[str, dict[int, tuple[int, bool]]] = {}
        self._windows: dict[str, _Window] = {}
        self._slots: dict[str, int] = {}

    async def reserve(
        self, key: str, amount: int, require_activation: bool, credit_limit: int, init: MoneyInit
    ) -> int:
        account = self._money.get(key)
        if account is None:
            account = await self._build(key, init)
        if require_activation and not account.activated:
            return Reserve.NOT_ACTIVATED
        if account.balance + credit_limit - account.reserved < amount:
            return Reserve.INSUFFICIENT
        account.reserved += amount
        return Reserve.OK

    async def _build(self, key: str, init: MoneyInit) -> _Account:
        state = await init()
        account = self._money.get(key)  # another coroutine may have built it while we awaited
        if account is None:
            account = self._money[key] = _Account(state)
            for seq, (event_amount, activates) in self._early.pop(key, {}).items():
                account.fold(seq, event_amount, activates)
        return account

    async def settle(self, key: str, reserved: int, actual: int) -> None:
        account = self._money.get(key)
        if account is not None:
            account.reserved -= reserved
            account.balance -= actual

    async def apply_event(self, key: str, seq: int, amount: int, activates: bool) -> bool:
        """Fold a committed balance event in once; False when it was already there."""
        account = self._money.get(key)
        if account is None:
            if len(self._early) > _MAX_EARLY_EVENTS:
                self._early.clear()  # only counters still being built need these, for a moment
            self._early.setdefault(key, {})[seq] = (amount, activates)
            return False
        return account.fold(seq, amount, activates)

    async def matching(self, pattern: str) -> list[str]:
        """The money counters whose keys match the glob `pattern`."""
        return [key for key in self._money if fnmatch.fnmatchcase(key, pattern)]

    async def money(self, key: str) -> tuple[int, int] | None:
        """(balance, reserved) of a live counter, None when it is not built (observability, tests)."""
        account = self._money.get(key)
        return None if account is None else (account.balance, account.reserved)

    async def admit_request(
        self, claim: str | None, windows: Sequence[WindowAsk], money: Sequence[MoneyAsk]
    ) -> Admitted:
        """Count the request in every window and reserve on every money counter, or take nothing. (The
        request id claim is this process's own here: `plugins.request_id` holds it.)"""
        accounts = self._money
        for ask in money:
            if ask.key not in accounts:
                await self._build(ask.key, ask.init)
        # No await from here on: checking and taking is one step.
        if windows:
            now = int(time.time())
            results = self._measure(windows, now)
            if not results[-1].allowed:
                return Admitted(Refusal.WINDOW, results)
        else:
            now, results = 0, []
        for index, ask in enumerate(money):
            account = accounts[ask.key]
            if ask.require_activation and not account.activated:
                return Admitted(Refusal.MONEY, results, index, Reserve.NOT_ACTIVATED)
            if account.balance + ask.credit_limit - account.reserved < ask.amount:
                return Admitted(Refusal.MONEY, results, index, Reserve.INSUFFICIENT)
        if windows:
            self._take(windows, now)
        for ask in money:
            accounts[ask.key].reserved += ask.amount
        return Admitted(Refusal.NONE, results)

    def release_claim(self, claim: str) -> None:
        return None

    async def written(self) -> None:
        return None

    def after_written(self, callback: Callable[[], object]) -> None:
        callback()  # settlements here are done the moment they are made

    async def flush(self) -> None:
        return None

    # A process's counters die with it: no settlement outlives it, so none needs a record.
    def mark_settled(self, key: str, row_id: str, cost: int) -> None:
        return None

    def forget_settled(self, key: str, row_id: str) -> None:
        return None

    async def settled(self, key: str, row_ids: Sequence[str]) -> dict[str, int]:
        return {}

    async def delete(self, keys: Sequence[str]) -> None:
        return None

    async def reclaim(self, process: str) -> None:
        return None  # nothing of another process is held here

    async def admit(self, asks: Sequence[WindowAsk]) -> list[WindowResult]:
        """Take from every window, or from none: when one would pass its limit, nothing is taken and the
        list ends with that window's refusal."""
        now = int(time.time())
        results = self._measure(asks, now)
        if results and results[-1].allowed:
            self._take(asks, now)
        return results

    def _measure(self, asks: Sequence[WindowAsk], now: int) -> list[WindowResult]:
        """Each window's usage with this request in it, up to the first that refuses it (nothing taken)."""
        # On the hot path (every request, four windows): written out flat, no helper calls.
        horizon = now - WINDOW_SECONDS
        store = self._windows
        results: list[WindowResult] = []
        for key, amount, limit in asks:
            window = store.get(key)
            if window is None:
                window = store[key] = _Window()
            buckets = window.buckets
            while buckets and buckets[0][0] <= horizon:
                window.total -= buckets.popleft()[1]
            used = window.total
            reset = (buckets[0][0] if buckets else now) + WINDOW_SECONDS - now
            if used + amount > limit:
                results.append(_result(WindowResult, (False, used, reset, now)))
                return results
            results.append(_result(WindowResult, (True, used + amount, reset, now)))
        return results

    def _take(self, asks: Sequence[WindowAsk], now: int) -> None:
        store = self._windows
        for key, amount, _limit in asks:
            if amount:
                window = store[key]
                buckets = window.buckets
                if buckets and buckets[-1][0] == now:
                    buckets[-1][1] += amount
                else:
                    buckets.append([now, amount])
                window.total += amount

    def takes(self) -> list[tuple[str, int, int]]:
        """(window, second, amount) of every bucket still in its window, oldest first per window."""
        horizon = int(time.time()) - WINDOW_SECONDS
        return [
            (key, second, amount)
            for key, window in self._windows.items()
            for second, amount in window.buckets
            if second > horizon and amount
        ]

    async def adjust(self, key: str, second: int, delta: int) -> None:
        window = self._windows.get(key)
        if window is None:
            return
        buckets = window.buckets
        if buckets and buckets[-1][0] == second:  # usually: a request's second is the newest bucket
            buckets[-1][1] += delta
            window.total += delta
            return
        for bucket in reversed(buckets):
            if bucket[0] == second:
                bucket[1] += delta
                window.total += delta
                return
            if bucket[0] < second:
                return

    async def acquire(self, key: str, limit: int) -> bool:
        held = self._slots.get(key, 0)
        if held >= limit:
            return False
        self._slots[key] = held + 1
        return True

    async def release(self, key: str) -> None:
        held = self._slots.get(key, 0) - 1
        if held > 0:
            self._slots[key] = held
        else:
            self._slots.pop(key, None)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None
