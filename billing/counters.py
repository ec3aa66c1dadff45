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
events (`billing.events`) are applied once each: an event whose sequence is not newer than `credit_seq`, or
already applied, changes nothing; one announced while the counter is being built is held and folded in when
it is. Windows: 1-second buckets over 60 seconds (a sliding window).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol

from redis.exceptions import RedisError

from proxy.errors import ServiceUnavailable

log = logging.getLogger("modelgate.counters")

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


class Counters(Protocol):
    async def reserve(
        self, key: str, amount: int, require_activation: bool, credit_limit: int, init: MoneyInit
    ) -> int: ...
    async def settle(self, key: str, reserved: int, actual: int) -> None: ...
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
            state = await init()
            account = self._money.get(key)  # another coroutine may have built it while we awaited
            if account is None:
                account = self._money[key] = _Account(state)
                for seq, (event_amount, activates) in self._early.pop(key, {}).items():
                    account.fold(seq, event_amount, activates)
        if require_activation and not account.activated:
            return Reserve.NOT_ACTIVATED
        if account.balance + credit_limit - account.reserved < amount:
            return Reserve.INSUFFICIENT
        account.reserved += amount
        return Reserve.OK

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

    async def money(self, key: str) -> tuple[int, int] | None:
        """(balance, reserved) of a live counter, None when it is not built (observability, tests)."""
        account = self._money.get(key)
        return None if account is None else (account.balance, account.reserved)

    async def admit(self, asks: Sequence[WindowAsk]) -> list[WindowResult]:
        """Take from every window, or from none: when one would pass its limit, nothing is taken and the
        list ends with that window's refusal."""
        # On the hot path (every request, four windows): written out flat, no helper calls.
        now = int(time.time())
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
        for key, amount, _limit in asks:
            if amount:
                window = store[key]
                buckets = window.buckets
                if buckets and buckets[-1][0] == now:
                    buckets[-1][1] += amount
                else:
                    buckets.append([now, amount])
                window.total += amount
        return results

    async def adjust(self, key: str, second: int, delta: int) -> None:
        window = self._windows.get(key)
        if window is None:
            return
        for bucket in reversed(window.buckets):
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


# Money hashes: b = balance, r = reserved, a = activated, cs = last balance event folded in, e<seq> = an
# event above cs already applied. Amounts reach Redis as the decimal strings Python sent (HINCRBY with
# ARGV), never as Lua numbers, so no "-0" and no exponent notation.
# Each process also keeps its own share of `r` in p:<process>, and names the hashes it reserved in
# `held:<process>`, so the reservations of a process that died (its `live:<process>` key expired) are
# released by the others (`_RECLAIM`) instead of being held forever.
_RESERVE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
if ARGV[2] == '1' and redis.call('HGET', KEYS[1], 'a') ~= '1' then return -1 end
local b = tonumber(redis.call('HGET', KEYS[1], 'b'))
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
if b + tonumber(ARGV[3]) - r < tonumber(ARGV[1]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'r', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'p:' .. ARGV[4], ARGV[1])
redis.call('SADD', KEYS[2], KEYS[1])
return 1
"""
# KEYS[2] holds events announced while no counter existed (it may have been being built): fold them in.
_INIT = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'b', ARGV[1], 'r', 0, 'a', ARGV[2], 'cs', ARGV[3])
  local early = redis.call('HGETALL', KEYS[2])
  for i = 1, #early, 2 do
    local seq = tonumber(early[i])
    if seq > tonumber(ARGV[3]) and redis.call('HSETNX', KEYS[1], 'e' .. early[i], 1) == 1 then
      local amount, activates = string.match(early[i + 1], '^(-?%d+)|(%d)$')
      redis.call('HINCRBY', KEYS[1], 'b', amount)
      if activates == '1' then redis.call('HSET', KEYS[1], 'a', 1) end
    end
  end
end
return 1
"""
# A reservation already released by `_RECLAIM` (this process was taken for dead) is not released twice.
_SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  local mine = 'p:' .. ARGV[3]
  local held = tonumber(redis.call('HGET', KEYS[1], mine) or '0')
  local release = math.min(held, tonumber(ARGV[1]))
  if release > 0 then
    local text = string.format('%d', -release)
    redis.call('HINCRBY', KEYS[1], 'r', text)
    if redis.call('HINCRBY', KEYS[1], mine, text) == 0 then redis.call('HDEL', KEYS[1], mine) end
  end
  redis.call('HINCRBY', KEYS[1], 'b', ARGV[2])
end
return 1
"""
# KEYS[1] = held:<dead process>; ARGV[1] = the dead process. Releases what it still held, everywhere.
_RECLAIM = """
local mine = 'p:' .. ARGV[1]
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local held = tonumber(redis.call('HGET', name, mine) or '0')
  if held ~= 0 then redis.call('HINCRBY', name, 'r', string.format('%d', -held)) end
  redis.call('HDEL', name, mine)
end
redis.call('DEL', KEYS[1])
return 1
"""
_APPLY = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. '|' .. ARGV[3])
  redis.call('EXPIRE', KEYS[2], 600)
  return 0
end
if tonumber(ARGV[1]) <= tonumber(redis.call('HGET', KEYS[1], 'cs') or '0') then return 0 end
if redis.call('HSETNX', KEYS[1], 'e' .. ARGV[1], 1) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'b', ARGV[2])
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'a', 1) end
return 1
"""
_ADMIT = """
local now = tonumber(redis.call('TIME')[1])
local window = tonumber(ARGV[1])
local out = {}
for k = 1, #KEYS do
  local fields = redis.call('HGETALL', KEYS[k])
  local used = 0
  local oldest = now
  for i = 1, #fields, 2 do
    local second = tonumber(fields[i])
    if second <= now - window then
      redis.call('HDEL', KEYS[k], fields[i])
    else
      used = used + tonumber(fields[i + 1])
      if second < oldest then oldest = second end
    end
  end
  local amount = tonumber(ARGV[2 * k])
  if used + amount > tonumber(ARGV[2 * k + 1]) then
    table.insert(out, 0) table.insert(out, used) table.insert(out, oldest + window - now)
    table.insert(out, now)
    return out
  end
  table.insert(out, 1) table.insert(out, used + amount) table.insert(out, oldest + window - now)
  table.insert(out, now)
end
for k = 1, #KEYS do
  local amount = tonumber(ARGV[2 * k])
  if amount > 0 then
    redis.call('HINCRBY', KEYS[k], tostring(now), amount)
    redis.call('EXPIRE', KEYS[k], window + 1)
  end
end
return out
"""
_ACQUIRE = """
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
if held >= tonumber(ARGV[1]) then return 0 end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""
_RELEASE = """
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 1
"""
_ADJUST = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2]) end
return 1
"""


class RedisCounters:
    """Counters in Redis: every gateway process sees and changes the same numbers atomically.

    If Redis cannot be reached, `fail_open` decides: admit requests without limits or reservations (logged
    loudly, at most once per 10 s), or refuse them with 503 until Redis is back.
    """

    def __init__(self, client, prefix: str = "mg:", *, fail_open: bool = False) -> None:
        self._redis = client
        self._prefix = prefix
        self._fail_open = fail_open
        self._last_alarm = 0.0
        self.process = secrets.token_hex(8)  # this process's share of reservations is kept under this id
        self._held = f"{prefix}held:{self.process}"
        self._live = f"{prefix}live:{self.process}"
        self._processes = f"{prefix}processes"
        # Settlements Redis did not take (it was unreachable): retried until it does, so spend is never lost
        # and the reservation stays held meanwhile.
        self._unsettled: deque[tuple[str, int, int]] = deque()
        self._keeper: asyncio.Task | None = None
        self._reclaim = client.register_script(_RECLAIM)
        self._reserve = client.register_script(_RESERVE)
        self._init = client.register_script(_INIT)
        self._settle = client.register_script(_SETTLE)
        self._apply = client.register_script(_APPLY)
        self._admit = client.register_script(_ADMIT)
        self._adjust = client.register_script(_ADJUST)
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)

    def _unavailable(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_alarm > 10:
            self._last_alarm = now
            log.error(
                "REDIS UNAVAILABLE (%r): shared limits and balances are %s",
                exc,
                "NOT ENFORCED (fail_open = true)" if self._fail_open else "refusing requests (503)",
            )
        if not self._fail_open:
            raise ServiceUnavailable(
                "The model service is temporarily unavailable: shared limits cannot be "
                "checked. Retry shortly."
            ) from exc

    async def reserve(
        self, key: str, amount: int, require_activation: bool, credit_limit: int, init: MoneyInit
    ) -> int:
        try:
            return await self._reserve_checked(key, amount, require_activation, credit_limit, init)
        except RedisError as exc:
            self._unavailable(exc)
            return Reserve.OK

    async def _reserve_checked(
        self, key: str, amount: int, require_activation: bool, credit_limit: int, init: MoneyInit
    ) -> int:
        name = self._prefix + key
        keys = [name, self._held]
        args = [amount, "1" if require_activation else "0", credit_limit, self.process]
        result = await self._reserve(keys=keys, args=args)
        if result == -2:
            state = await init()
            await self._init(
                keys=[name, name + ":early"],
                args=[state.balance, 1 if state.activated else 0, state.credit_seq],
            )
            result = await self._reserve(keys=keys, args=args)
        return int(result)

    async def settle(self, key: str, reserved: int, actual: int) -> None:
        try:
            await self._settle(keys=[self._prefix + key], args=[reserved, -actual, self.process])
        except RedisError as exc:
            if not self._unsettled:
                log.error(
                    "redis: settling failed (%r); settlements are kept and retried until it is back", exc
                )
            self._unsettled.append((key, reserved, actual))

    # -- liveness: this process's reservations, and those of processes that died -------------------------

    async def start(self, heartbeat_seconds: float = 5.0) -> None:
        """Announce this process and keep it alive; release reservations of dead ones; retry settlements."""
        self._keeper = asyncio.get_running_loop().create_task(self._keep(heartbeat_seconds), name="counters")

    async def _keep(self, every: float) -> None:
        while True:
            try:
                await self.heartbeat(ttl_seconds=every * 4)
                await self.retry_settlements()
                await self.reclaim_dead()
            except RedisError as exc:
                log.debug("redis: keeping counters failed: %r", exc)
            await asyncio.sleep(every)

    async def heartbeat(self, ttl_seconds: float) -> None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(self._live, 1, px=int(ttl_seconds * 1000))
        pipe.sadd(self._processes, self.process)
        await pipe.execute()

    async def retry_settlements(self) -> None:
        while self._unsettled:
            key, reserved, actual = self._unsettled[0]
            await self._settle(keys=[self._prefix + key], args=[reserved, -actual, self.process])
            self._unsettled.popleft()
            if not self._unsettled:
                log.warning("redis: every kept settlement is written again")

    async def reclaim_dead(self) -> int:
        """Release the reservations of processes whose liveness key expired; returns how many were dead."""
        dead = 0
        for member in await self._redis.smembers(self._processes):
            process = member.decode() if isinstance(member, bytes) else member
            if process == self.process or await self._redis.exists(f"{self._prefix}live:{process}"):
                continue
            await self._reclaim(keys=[f"{self._prefix}held:{process}"], args=[process])
            await self._redis.srem(self._processes, process)
            dead += 1
        if dead:
            log.warning("redis: released the reservations of %d gateway process(es) that stopped", dead)
        return dead

    async def apply_event(self, key: str, seq: int, amount: int, activates: bool) -> bool:
        """Fold a committed balance event into the shared counter once (any process may announce it)."""
        name = self._prefix + key
        return bool(
            await self._apply(keys=[name, name + ":early"], args=[seq, amount, 1 if activates else 0])
        )

    async def money(self, key: str) -> tuple[int, int] | None:
        values = await self._redis.hmget(self._prefix + key, "b", "r")
        return None if values[0] is None else (int(values[0]), int(values[1] or 0))

    async def admit(self, asks: Sequence[WindowAsk]) -> list[WindowResult]:
        """Take from every window, or from none, in one atomic script (one round trip)."""
        args: list[int] = [WINDOW_SECONDS]
        for _key, amount, limit in asks:
            args += (amount, limit)
        try:
            flat = await self._admit(keys=[self._prefix + key for key, _, _ in asks], args=args)
        except RedisError as exc:
            self._unavailable(exc)
            now = int(time.time())
            return [WindowResult(True, 0, 0, now) for _ in asks]
        return [
            WindowResult(bool(flat[i]), int(flat[i + 1]), int(flat[i + 2]), int(flat[i + 3]))
            for i in range(0, len(flat), 4)
        ]

    async def adjust(self, key: str, second: int, delta: int) -> None:
        try:
            await self._adjust(keys=[self._prefix + key], args=[second, delta])
        except RedisError as exc:
            log.error("redis: correcting %s failed: %r", key, exc)

    async def acquire(self, key: str, limit: int) -> bool:
        try:
            return bool(await self._acquire(keys=[self._prefix + key], args=[limit, SLOT_TTL_SECONDS]))
        except RedisError as exc:
            self._unavailable(exc)
            return True

    async def release(self, key: str) -> None:
        try:
            await self._release(keys=[self._prefix + key])
        except RedisError as exc:
            log.error("redis: releasing a slot of %s failed: %r", key, exc)

    async def close(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        try:
            await self.retry_settlements()
            # A clean stop holds nothing: its share is released now rather than when its key expires.
            await self._reclaim(keys=[self._held], args=[self.process])
            await self._redis.delete(self._live)
            await self._redis.srem(self._processes, self.process)
        except RedisError as exc:
            log.error("redis: could not hand back this process's reservations at stop: %r", exc)
