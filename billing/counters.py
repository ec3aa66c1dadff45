"""Live counters shared by the billing and limit plugins: money headroom with reservations, and
sliding request/token windows.

Two implementations with one meaning: in-process (one gateway process) and Redis (atomic Lua scripts,
Redis server time), where every gateway process shares every counter and reservation exactly.

Concurrency: a slot counter per key (realtime sessions in flight); acquiring fails at the limit, releasing
always frees one. In Redis the count carries a safety TTL, refreshed on every acquire, so slots of a process
that died without releasing them free themselves.

Money: a counter holds `headroom` (what may still be spent), `reserved` (held by requests in flight) and
`activated`. A reservation succeeds only if `headroom - reserved >= amount`; settling releases the
reservation and subtracts the real cost. Windows: 1-second buckets over 60 seconds (a sliding window).
"""

from __future__ import annotations

import logging
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


MoneyInit = Callable[[], Awaitable[tuple[int, bool]]]


class Counters(Protocol):
    async def reserve(self, key: str, amount: int, require_activation: bool, init: MoneyInit) -> int: ...
    async def settle(self, key: str, reserved: int, actual: int) -> None: ...
    async def credit(self, key: str, amount: int) -> None: ...
    async def drop(self, key: str) -> None: ...
    async def refresh(self, key: str, init: MoneyInit) -> None: ...
    async def admit(self, asks: Sequence[WindowAsk]) -> list[WindowResult]: ...
    async def adjust(self, key: str, second: int, delta: int) -> None: ...
    async def acquire(self, key: str, limit: int) -> bool: ...
    async def release(self, key: str) -> None: ...
    async def close(self) -> None: ...


SLOT_TTL_SECONDS = 6 * 3600  # longer than any session should last; only frees slots of dead processes


class _Window:
    """One sliding window: (second, amount) buckets oldest first, and their running total."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets: deque[list[int]] = deque()
        self.total = 0


class InProcessCounters:
    """Counters of one process (exact for a single gateway process)."""

    def __init__(self) -> None:
        self._money: dict[str, list[int]] = {}  # key -> [headroom, reserved, activated]
        self._windows: dict[str, _Window] = {}
        self._slots: dict[str, int] = {}

    async def reserve(self, key: str, amount: int, require_activation: bool, init: MoneyInit) -> int:
        account = self._money.get(key)
        if account is None:
            headroom, activated = await init()
            # Another coroutine may have initialised it while we awaited the database.
            account = self._money.setdefault(key, [headroom, 0, int(activated)])
        if require_activation and not account[2]:
            return Reserve.NOT_ACTIVATED
        if account[0] - account[1] < amount:
            return Reserve.INSUFFICIENT
        account[1] += amount
        return Reserve.OK

    async def settle(self, key: str, reserved: int, actual: int) -> None:
        account = self._money.get(key)
        if account is not None:
            account[1] -= reserved
            account[0] -= actual

    async def credit(self, key: str, amount: int) -> None:
        account = self._money.get(key)
        if account is not None:
            account[0] += amount
            account[2] = 1

    async def drop(self, key: str) -> None:
        account = self._money.get(key)
        # Keep live reservations: only the headroom is re-read on next use.
        if account is not None and account[1] == 0:
            del self._money[key]

    async def refresh(self, key: str, init: MoneyInit) -> None:
        """Re-read the headroom from its source, keeping the reservations in flight."""
        account = self._money.get(key)
        if account is not None:
            headroom, activated = await init()
            account[0], account[2] = headroom, int(activated)

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

    async def close(self) -> None:
        return None


_RESERVE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
if ARGV[2] == '1' and redis.call('HGET', KEYS[1], 'a') ~= '1' then return -1 end
local h = tonumber(redis.call('HGET', KEYS[1], 'h'))
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
if h - r < tonumber(ARGV[1]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'r', ARGV[1])
return 1
"""
_INIT = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'h', ARGV[1], 'r', 0, 'a', ARGV[2])
end
return 1
"""
_SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'r', -tonumber(ARGV[1]))
  redis.call('HINCRBY', KEYS[1], 'h', -tonumber(ARGV[2]))
end
return 1
"""
_CREDIT = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'h', ARGV[1])
  redis.call('HSET', KEYS[1], 'a', 1)
end
return 1
"""
_DROP = """
if tonumber(redis.call('HGET', KEYS[1], 'r') or '0') == 0 then redis.call('DEL', KEYS[1]) end
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
        self._reserve = client.register_script(_RESERVE)
        self._init = client.register_script(_INIT)
        self._settle = client.register_script(_SETTLE)
        self._credit = client.register_script(_CREDIT)
        self._drop = client.register_script(_DROP)
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

    async def reserve(self, key: str, amount: int, require_activation: bool, init: MoneyInit) -> int:
        try:
            return await self._reserve_checked(key, amount, require_activation, init)
        except RedisError as exc:
            self._unavailable(exc)
            return Reserve.OK

    async def _reserve_checked(self, key: str, amount: int, require_activation: bool, init: MoneyInit) -> int:
        name = self._prefix + key
        args = [amount, "1" if require_activation else "0"]
        result = await self._reserve(keys=[name], args=args)
        if result == -2:
            headroom, activated = await init()
            await self._init(keys=[name], args=[headroom, 1 if activated else 0])
            result = await self._reserve(keys=[name], args=args)
        return int(result)

    async def settle(self, key: str, reserved: int, actual: int) -> None:
        try:
            await self._settle(keys=[self._prefix + key], args=[reserved, actual])
        except RedisError as exc:
            log.error("redis: settling %s failed: %r", key, exc)

    async def credit(self, key: str, amount: int) -> None:
        await self._credit(keys=[self._prefix + key], args=[amount])

    async def drop(self, key: str) -> None:
        await self._drop(keys=[self._prefix + key])

    async def refresh(self, key: str, init: MoneyInit) -> None:
        await self.drop(key)

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
        await self._redis.aclose()
