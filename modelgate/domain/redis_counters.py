"""The counters in Redis (`domain.counters` has their meaning): every gateway process sees and changes the
same numbers atomically, with Redis server time.

A request costs one round trip on its way in: `admit_request` runs one script that claims its request id,
counts it in every rate window and reserves on every money counter, all or nothing. What follows the
request (TPM corrections, settlements, the claim's release) leaves the request path: it is queued and
written by one script call per batch, a batch being whatever this process queued in the same event-loop
tick or while the previous batch was in flight. A queued settlement keeps its reservation held in Redis
until it is written, so no other process can spend it meanwhile.

Each process keeps its own share of every reservation (`p:<process>` in the counter, the counters it
reserved on in `held:<process>:{org}`, one set per organization's hash tag, the tags in `holds:<process>`);
the reservations of a process that died (its `live:<process>` key expired) are released by the others.
Settlements Redis did not take are kept and retried until it does, and written to the spool directory
(`domain.kept_batches`): a process that stops while Redis is unreachable leaves them there, and the next
one to start sends them under its id and batch numbers once Redis answers, then releases what it held.

On a Redis Cluster every key of one script call carries one organization's hash tag (`accounts.org_tag`),
so it touches one slot: a batch is then written as one script call per hash tag, each with the batch's
number in that slot's `applied:{org}` (a batch sent again is applied once in every slot). Settlement
records live beside the counters they settle (`set:<writer>:{org}`), written in the same call.

While Redis cannot be reached, `[redis] outage` decides: refuse (503), admit without limits ("open", what
`fail_open = true` means), or admit against this process's share of each counter's last known headroom and
of each limit ("degraded", `domain.local_shares`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from modelgate.domain.counters import (
    SLOT_TTL_SECONDS,
    WINDOW_SECONDS,
    Admitted,
    MoneyAsk,
    MoneyInit,
    Refusal,
    Reserve,
    WindowAsk,
    WindowResult,
)
from modelgate.domain.errors import ServiceUnavailable
from modelgate.domain.kept_batches import KeptJournal, StoppedBatches
from modelgate.domain.local_shares import LocalShares
from modelgate.infra import redis_scripts as scripts
from modelgate.infra.redis_client import redis_error
from modelgate.infra.redis_wire import Memo, Script, wire_for

log = logging.getLogger("modelgate.counters")


def hash_tag(name: str) -> str:
    """The Redis Cluster hash tag of a key name (`{…}`, as Redis reads it), or "" when it has none."""
    start = name.find("{")
    if start < 0:
        return ""
    end = name.find("}", start + 1)
    return name[start : end + 1] if end > start + 1 else ""


def _slot_group(name: str) -> str:
    """The hash tag that puts a key of a batch with the others of its slot: its own, else its whole name."""
    return hash_tag(name) or "{" + name + "}"


# How long a request id claim lives if its release never comes (the process died).
CLAIM_SECONDS = 600
_MAX_BUILDS = 3  # admission retries after building missing money counters (a bound, not a budget)
_NAMES_KEPT = 4096  # counter names kept with their prefix (`_names`, `_windows`)
_window_result = tuple.__new__  # a WindowResult built in C (the named tuple's own __new__ is Python)
# In degraded mode, after Redis failed to answer, requests go straight to the local shares this long before
# Redis is tried again (an unreachable host costs a connect timeout per try).
_LOCAL_SECONDS = 1.0
_KEPT_KEYS = 2000  # the most keys a kept batch grows to by taking in the batches that follow it


class RedisCounters:
    """Counters in Redis: every gateway process sees and changes the same numbers atomically.

    If Redis cannot be reached, `outage` decides (logged loudly, at most once per 10 s): "refuse" requests
    with 503 until Redis is back, admit them without limits or reservations ("open"; `fail_open = True`
    alone means it), or admit them against this process's shares ("degraded", `self.shares`).
    """

    def __init__(
        self,
        client,
        prefix: str = "mg:",
        *,
        fail_open: bool = False,
        outage: str | None = None,
        journal: KeptJournal | None = None,
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self.outage = outage or ("open" if fail_open else "refuse")
        self._fail_open = self.outage == "open"
        self.shares = LocalShares() if self.outage == "degraded" else None
        self._local_until = 0.0  # degraded: Redis is not tried before this (time.monotonic())
        # Request ids admitted on the shares: no claim of theirs is in Redis.
        self._local_claims: set[str] = set()
        # After an outage no process is judged dead before this (time.monotonic()): their liveness keys ran
        # out while Redis was down, and they renew them only as they find it back.
        self._judge_after = 0.0
        self._liveness_seconds = 20.0  # a liveness key's time to live (`start`)
        self._last_alarm = 0.0
        self.process = secrets.token_hex(8)  # this process's share of reservations is kept under this id
        self._held = f"{prefix}held:{self.process}"
        self._holds = f"{prefix}holds:{self.process}"  # the hash tags of this process's held sets
        self._held_in: set[str] = set()  # the hash tags `_holds` is known to name
        self._held_of = Memo(self._held_name, _NAMES_KEPT)
        self._cluster = isinstance(client, RedisCluster)
        self._settled_tag = ""  # the hash tag of the last settlement queued (its record goes beside it)
        self._records: dict[str, str] = {}  # row id -> the hash its settlement record is in
        # Rate windows keep running totals (`redis_scripts._WINDOWS`) under their own names, apart from the
        # total-less hashes of earlier releases, which a process of this one must not count from.
        # Names in Redis (prefix + key), by key: a request's keys come back request after request.
        self._windows = Memo((prefix + "w:").__add__, _NAMES_KEPT)
        self._names = Memo(prefix.__add__, _NAMES_KEPT)
        self._live = f"{prefix}live:{self.process}"
        self._processes = f"{prefix}processes"
        # Batches Redis did not answer (unreachable, or its answer lost): sent again, the same and in order,
        # until it does, so spend is never lost nor charged twice and reservations stay held meanwhile.
        self._kept: deque[tuple[list[str], list[int | str]]] = deque()
        self._journal = journal  # the kept batches on disk (None: in memory only)
        if journal is not None:
            journal.own(self.process)
        # The kept batches of stopped processes (`adopt_stopped`): sent before this process's own.
        self._stopped = StoppedBatches()
        self._stopped_settled: dict[str, int] = {}  # row id -> cost their `m` operations record
        self._batches = 0  # the number of the last batch made (redis_scripts.COMPLETE)
        self._applied = prefix + "applied"
        self._applied_in: set[str] = set()  # the slots' `applied` hashes this process wrote (a cluster)
        self._sending = asyncio.Lock()
        # What follows requests, queued for the next batch: its keys and, per key, (operation, argument,
        # argument), the shape `redis_scripts.COMPLETE` takes them in.
        self._queued_keys: list[str] = []
        self._queued_args: list[int | str] = []
        self._queued_written: asyncio.Future | None = None  # resolved once the queued batch is written
        self._forgotten: list[tuple[str, str]] = []  # (hash, row id) of settlement records no more needed
        # Slots whose release Redis did not answer (down, a master being failed over): released again by the
        # keeper once it does, or a session that ended would hold its slot until the count's safety TTL.
        self._unreleased: list[str] = []
        self._writer: asyncio.Task | None = None
        self._keeper: asyncio.Task | None = None
        self._reclaim = client.register_script(scripts.RECLAIM)
        self._reserve = client.register_script(scripts.RESERVE)
        self._apply = client.register_script(scripts.APPLY)
        self._admit = client.register_script(scripts.ADMIT)
        # The two scripts of every request go over one lean pipelined connection (redis-py otherwise),
        # and so do those of a request's first time in a process or period (building a counter, naming a held
        # set), which come by the hundred at a start under load: redis-py's cluster client failed with
        # AttributeError on connections it was still opening when 64 came at once.
        self._wire = wire_for(client)
        self._admit_request = self._hot(scripts.ADMIT_REQUEST)
        self._complete_one = self._hot(scripts.complete(WINDOW_SECONDS))
        self._name_holding = self._hot(scripts.HOLDING)
        self._init = self._hot(scripts.INIT)
        self._acquire = client.register_script(scripts.ACQUIRE)
        self._release = client.register_script(scripts.RELEASE)

    def _hot(self, source: str):
        """A callable script (keys=, args=) on the lean connection when there is one."""
        wire = self._wire
        if wire is None:
            return self._redis.register_script(source)
        script = Script(source)

        def run(keys: list[str], args: list) -> Awaitable:
            return wire.script(script, keys, args)

        return run

    def _held_name(self, tag: str) -> str:
        return f"{self._held}:{tag}" if tag else self._held

    async def _holding(self, key_name: str) -> str:
        """The held set of this process for the hash tag of `key_name`, named in `holds:<process>` before
        its first use (once per tag and process: a process that dies is reclaimed by these names)."""
        tag = hash_tag(key_name)
        if tag not in self._held_in:
            await self._name_holding(keys=[self._holds], args=[tag])
            self._held_in.add(tag)
        return self._held_of[tag]

    def _unavailable(self, exc: Exception | None) -> None:
        now = time.monotonic()
        if now - self._last_alarm > 10:
            self._last_alarm = now
            if self.outage == "open":
                state = "NOT ENFORCED (outage = open)"
            elif self.outage == "degraded":
                state = "enforced on this process's shares (outage = degraded); 503 for what has none"
            else:
                state = "refusing requests (503)"
            log.error("REDIS UNAVAILABLE (%s): shared limits and balances are %s", redis_error(exc), state)
        if not self._fail_open:
            raise ServiceUnavailable(
                "The model service is temporarily unavailable: shared limits cannot be "
                "checked. Retry shortly."
            ) from exc

    async def _degraded(
        self,
        exc: Exception | None,
        windows: Sequence[WindowAsk],
        money: Sequence[MoneyAsk],
        claim: str | None = None,
    ) -> Admitted:
        """Admit against this process's shares while Redis is unreachable (503 for a counter without one).
        The request id claim holds in this process only (`plugins.request_id`)."""
        shares = self.shares
        assert shares is not None
        if exc is not None:
            self._local_until = time.monotonic() + _LOCAL_SECONDS
            if shares.begin():
                log.error(
                    "REDIS UNAVAILABLE (%s): admitting against this process's shares of the headroom and"
                    " limits read at %s, split among %d live process(es) (outage = degraded)",
                    redis_error(exc),
                    time.strftime("%H:%M:%S", time.gmtime(shares.read_at)) if shares.read_at else "never",
                    shares.processes,
                )
        admitted = await shares.admit(windows, money)
        if admitted is None:
            self._unavailable(exc)  # a counter never read here: no known headroom
            raise AssertionError("unreachable: outage = degraded refuses")  # pragma: no cover
        if claim and admitted.refusal == Refusal.NONE:
            self._local_claims.add(claim)
        return admitted

    def _redis_back(self, shares: LocalShares) -> None:
        for key, second, amount in shares.end():
            self._enqueue("a", self._windows[key], second, amount)
        self._local_until = 0.0
        self._judge_after = time.monotonic() + self._liveness_seconds
        log.warning("redis: reachable again; its counters admit requests (the kept settlements follow)")

    # -- the request path: one script ----------------------------------------------------------------

    async def admit_request(
        self, claim: str | None, windows: Sequence[WindowAsk], money: Sequence[MoneyAsk]
    ) -> Admitted:
        """Claim, count and reserve in one round trip, all or nothing (see `redis_scripts.ADMIT_REQUEST`)."""
        shares = self.shares
        if shares is not None:
            if shares.active and (windows or money):
                if time.monotonic() < self._local_until:
                    return await self._degraded(None, windows, money, claim)
                try:  # the outage's settlements go first: Redis holds this process's spend before it admits
                    await self.retry_settlements()
                except RedisError as exc:
                    return await self._degraded(exc, windows, money, claim)
            shares.note(money)
        keys = [""]  # the held set of the keys' hash tag, below
        args: list[int | str] = [self.process, WINDOW_SECONDS, CLAIM_SECONDS if claim else 0, len(windows)]
        if claim:
            keys.append(self._prefix + claim)  # unique: not kept in `_names`
        window_names = self._windows
        for key, amount, limit in windows:
            keys.append(window_names[key])
            args += (amount, limit)
        names = self._names
        for ask in money:
            keys.append(names[ask.key])
            args += (ask.amount, "1" if ask.require_activation else "0", ask.credit_limit)
        try:
            if len(keys) > 1:
                tag = hash_tag(keys[1])
                keys[0] = self._held_of[tag] if tag in self._held_in else await self._holding(keys[1])
            else:
                keys[0] = self._held
            answer = await self._admit_request(keys=keys, args=args)
            for _ in range(_MAX_BUILDS):
                if answer[0] != -4:
                    break
                for index in answer[1:]:  # rare: counters not built yet (first request, new period)
                    await self._build(money[int(index) - 1].key, money[int(index) - 1].init)
                answer = await self._admit_request(keys=keys, args=args)
        except RedisError as exc:
            if shares is not None and (windows or money):
                return await self._degraded(exc, windows, money, claim)
            if windows or money:
                self._unavailable(exc)  # 503, or admitted without limits (fail_open)
            else:
                log.error("request id claim in Redis failed (%s); in this process only", redis_error(exc))
            now = int(time.time())
            return Admitted(Refusal.NONE, [WindowResult(True, 0, 0, now) for _ in windows])
        if shares is not None and shares.active:
            self._redis_back(shares)
        return _admitted(answer)

    def release_claim(self, claim: str) -> None:
        """Release a request id claim taken by `admit_request` (with the next batch); one admitted on the
        shares has none in Redis (and another process's request of that id may hold it there)."""
        if self._local_claims and claim in self._local_claims:
            self._local_claims.discard(claim)
            return
        self._enqueue("d", self._prefix + claim, "", "")

    async def _build(self, key: str, init: MoneyInit) -> None:
        state = await init()
        name = self._prefix + key
        await self._init(
            keys=[name, name + ":early"], args=[state.balance, 1 if state.activated else 0, state.credit_seq]
        )

    # -- after the request: queued, one script call per batch -----------------------------------------

    async def settle(self, key: str, reserved: int, actual: int) -> None:
        """Release `reserved` and charge `actual`, with the next batch (the reservation is held till then).
        A reservation taken from this process's share during an outage is released here: Redis is charged
        the cost only."""
        shares = self.shares
        if shares is not None and shares.settle(key, reserved, actual):
            reserved = 0
        name = self._names[key]
        self._settled_tag = hash_tag(name)
        self._enqueue("s", name, reserved, -actual)

    def mark_settled(self, key: str, row_id: str, cost: int) -> None:
        """Record a request's settled cost under its row id in the hash `key` (`key:{org}`, beside the
        counters just settled): queued right after its settlements, so it is written in their batch,
        atomically with them."""
        name = self._names[key]
        if self._settled_tag:  # the request's own settlements came just before (`queue_settlement`)
            name, self._settled_tag = f"{name}:{self._settled_tag}", ""
        self._records[row_id] = name
        self._queued_keys.append(name)
        self._queued_args += ("m", row_id, cost)

    def forget_settled(self, key: str, row_id: str) -> None:
        """A settlement record whose row is spooled: dropped with the next batch (never one of its own)."""
        self._forgotten.append((self._records.pop(row_id, None) or self._names[key], row_id))

    async def _record_hashes(self, key: str) -> list[str]:
        """The hashes of the settlement records `key` names: itself and its parts per hash tag."""
        name = self._prefix + key
        parts = [part.decode() async for part in self._redis.scan_iter(match=name + ":{*", count=1000)]
        return [name, *parts]

    async def settled(self, key: str, row_ids: Sequence[str]) -> dict[str, int]:
        """The settled costs recorded in the hash `key` (and its parts per hash tag) for these row ids."""
        if not row_ids:
            return {}
        # A stopped process's kept batch not written yet holds its record (`adopt_stopped`).
        kept = self._stopped_settled
        found = {row_id: kept[row_id] for row_id in row_ids if row_id in kept}
        row_ids = [row_id for row_id in row_ids if row_id not in found]
        if not row_ids:
            return found
        for name in await self._record_hashes(key):
            values = await self._redis.hmget(name, list(row_ids))
            for row_id, value in zip(row_ids, values, strict=True):
                if value is not None:
                    found[row_id] = int(value)
        return found

    async def matching(self, pattern: str) -> list[str]:
        """The counters whose keys match the glob `pattern` (a SCAN: for rare work, never a request's)."""
        prefix = self._prefix
        return [key.decode()[len(prefix) :] async for key in self._redis.scan_iter(match=prefix + pattern)]

    async def delete(self, keys: Sequence[str]) -> None:
        """Delete these keys, settlement records with their parts per hash tag (one slot at a time)."""
        for key in keys:
            for name in await self._record_hashes(key):
                await self._redis.delete(name)

    async def adjust(self, key: str, second: int, delta: int) -> None:
        """Correct a window's bucket by `delta` (a TPM reservation against the real usage), batched. A
        negative second is a bucket taken in this process's own window during an outage (`LocalShares.admit`):
        corrected there while the outage lasts, in Redis's window (where it was added) after it."""
        if second < 0:
            shares = self.shares
            if shares is not None and shares.active:
                await shares.adjust(key, -second, delta)
            else:  # the outage is over: its takes were added to Redis's windows (`_redis_back`)
                self._enqueue("w", self._windows[key], -second, delta)
            return
        self._enqueue("w", self._windows[key], second, delta)

    async def written(self) -> None:
        """Wait until what this process queued so far is in Redis (or kept for retry): a request's ledger
        row follows its settlement, as when settling was one call per request."""
        if self._queued_written is not None:
            await asyncio.shield(self._queued_written)

    def after_written(self, callback: Callable[[], object]) -> None:
        """Run `callback` once everything this process queued so far is written (or kept for retry): at once
        when nothing is queued. A request's ledger row follows its settlement this way, without its
        handler waiting for Redis."""
        pending = self._queued_written
        if pending is None:
            callback()
        else:
            pending.add_done_callback(lambda _: callback())

    def _enqueue(self, operation: str, name: str, first: int | str, second: int | str) -> None:
        self._queued_keys.append(name)
        self._queued_args += (operation, first, second)
        if self._queued_written is None:
            self._queued_written = asyncio.get_running_loop().create_future()
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write(), name="counters-batch")

    async def _write(self) -> None:
        """Write queued batches until none is left: each one script call (a task starts on the next loop
        tick, so everything queued in this one joins the first batch)."""
        try:
            while self._queued_keys:
                keys, args = self._queued_keys, self._queued_args
                self._queued_keys, self._queued_args = [], []
                done, self._queued_written = self._queued_written, None
                try:
                    await self._write_batch(keys, args)
                finally:
                    if done is not None and not done.done():
                        done.set_result(None)
        finally:
            self._writer = None

    async def _write_batch(self, keys: list[str], queued: list[int | str]) -> None:
        self._batches += 1
        args: list[int | str] = [self.process, self._batches, *queued]
        if self._forgotten:
            for name, row_id in self._forgotten:
                keys.append(name)
                args += ("f", row_id, 0)
            self._forgotten = []
        keys.append(self._applied)
        async with self._sending:
            kept = self._kept
            try:
                if kept:  # an earlier batch waits to be sent again: this one goes after it
                    last_keys, last_args = kept[-1]
                    if len(kept) > 1 and len(last_keys) + len(keys) <= _KEPT_KEYS:
                        # Only the first kept batch may have been sent (and applied, its answer lost): a later
                        # one never was, so this one joins it under its number (an outage's thousands of
                        # batches go back in a few calls).
                        last_keys[-1:-1] = keys[:-1]  # before the applied-batches key
                        last_args += args[2:]
                        self._write_kept(int(last_args[1]), keys, args)
                    else:
                        kept.append((keys, args))
                        self._write_kept(int(args[1]), keys, args)
                    shares = self.shares
                    if shares is not None and shares.active and time.monotonic() < self._local_until:
                        return  # Redis is down: tried again in a moment (`_keep`, `admit_request`)
                    await self._send_kept()
                else:
                    await self._complete(keys=keys, args=args)
            except RedisError as exc:
                if not kept:
                    log.error(
                        "redis: writing counters failed (%s); kept and written again once it is back",
                        redis_error(exc),
                    )
                    kept.append((keys, args))
                    self._write_kept(int(args[1]), keys, args)

    def _write_kept(self, number: int, keys: list[str], args: list[int | str]) -> None:
        """On disk before the batch's rows are spooled (a row follows its settlement's batch)."""
        if self._journal is not None:
            self._journal.keep(self.process, number, keys[:-1], args[2:])

    async def _complete(self, keys: list[str], args: list[int | str]) -> None:
        """Write one batch: one script call, or on a cluster one per slot (by hash tag), each guarded by
        the batch's number in its slot's `applied` hash; raises if any failed (the batch is then sent
        again whole, and the slots that applied it skip it)."""
        if not self._cluster:
            await self._complete_one(keys=keys, args=args)
            return
        head = args[:2]
        groups: dict[str, tuple[list[str], list[int | str]]] = {}
        for index, name in enumerate(keys[:-1]):
            group = groups.get(tag := _slot_group(name))
            if group is None:
                group = groups[tag] = ([], [*head])
            group[0].append(name)
            group[1].extend(args[2 + 3 * index : 5 + 3 * index])
        calls = []
        for tag, (names, values) in groups.items():
            applied = f"{self._applied}:{tag}"
            self._applied_in.add(applied)
            names.append(applied)
            calls.append(self._complete_one(keys=names, args=values))
        failures = [
            r for r in await asyncio.gather(*calls, return_exceptions=True) if isinstance(r, BaseException)
        ]
        if failures:
            raise failures[0]

    async def _send_kept(self) -> None:
        """Send the kept batches again, oldest first, until one fails (it and the later ones stay kept)."""
        kept = self._kept
        while kept:
            keys, args = kept[0]
            await self._complete(keys=keys, args=args)  # applied once, even if an earlier try was applied
            kept.popleft()
            if not kept:
                log.warning("redis: every kept batch of counters is written again")
                if self._journal is not None:
                    await self._journal.drained()

    async def adopt_stopped(self) -> int:
        """Take the kept batches that stopped processes left in the spool directory and send them now, or
        with this process's kept ones once Redis answers; returns how many batches were found. Before the
        ledger's replay: a crashed request settled in one of them is charged what it settled."""
        if self._journal is None:
            return 0
        self._journal.start()
        stopped = self._stopped = self._journal.adopt()
        if not stopped.files:
            return 0
        self._stopped_settled = stopped.settled()
        found = len(stopped.batches)
        log.warning(
            "redis: %d settlement batches kept by %d stopped gateway process(es) were found in the spool;"
            " they are written to Redis once it answers",
            found,
            len(stopped.processes),
        )
        try:
            await self.retry_settlements()
        except RedisError as exc:
            log.warning(
                "redis: unreachable at start (%s); the stopped processes' batches wait", redis_error(exc)
            )
        return found

    async def _send_stopped(self) -> None:
        """Send the stopped processes' batches, oldest first, each under its process's id and number (the
        applied-batches hash skips one Redis had applied); then release what those processes held and drop
        their batch numbers."""
        stopped = self._stopped
        batches = stopped.batches
        while batches:
            process, number, keys, operations = batches[0]
            await self._complete(keys=[*keys, self._applied], args=[process, number, *operations])
            if self._cluster:  # the slots' `applied` hashes its number went in
                stopped.applied.update((process, f"{self._applied}:{_slot_group(key)}") for key in keys)
            batches.popleft()
        self._stopped_settled = {}
        if self._journal is not None and stopped.files:  # first: a file found again would be sent again
            await self._journal.forget(stopped)
            log.warning(
                "redis: the settlements kept by %d stopped process(es) are written", len(stopped.processes)
            )
        for process in sorted(stopped.processes):
            await self.reclaim(process)
        for process, applied in sorted(stopped.applied):
            await self._redis.hdel(applied, process)
        stopped.processes.clear()
        stopped.applied.clear()

    async def flush(self) -> None:
        """Wait until everything queued so far is written (or kept for retry)."""
        while self._writer is not None:
            await asyncio.shield(self._writer)

    # -- the rest: reservations outside requests, events, liveness --------------------------------------

    async def reserve(
        self, key: str, amount: int, require_activation: bool, credit_limit: int, init: MoneyInit
    ) -> int:
        try:
            result = await self._reserve_checked(key, amount, require_activation, credit_limit, init)
        except RedisError as exc:
            if self.shares is not None:
                ask = MoneyAsk(key, amount, require_activation, credit_limit, init)
                admitted = await self._degraded(exc, [], [ask])
                return Reserve.OK if admitted.refusal == Refusal.NONE else admitted.money_outcome
            self._unavailable(exc)
            return Reserve.OK
        if self.shares is not None and self.shares.active:
            self._redis_back(self.shares)
        return result

    async def _reserve_checked(
        self, key: str, amount: int, require_activation: bool, credit_limit: int, init: MoneyInit
    ) -> int:
        keys = [self._prefix + key, await self._holding(self._prefix + key)]
        args = [amount, "1" if require_activation else "0", credit_limit, self.process]
        result = await self._reserve(keys=keys, args=args)
        if result == -2:
            await self._build(key, init)
            result = await self._reserve(keys=keys, args=args)
        return int(result)

    async def start(self, heartbeat_seconds: float = 5.0) -> None:
        """Announce this process and keep it alive; release reservations of dead ones; retry settlements."""
        self._liveness_seconds = heartbeat_seconds * 4
        self._keeper = asyncio.get_running_loop().create_task(self._keep(heartbeat_seconds), name="counters")

    async def _keep(self, every: float) -> None:
        shares = self.shares
        while True:
            try:
                await self.keep_once(ttl_seconds=self._liveness_seconds)
            except RedisError as exc:
                log.debug("redis: keeping counters failed: %s", redis_error(exc))
            except Exception:  # never the end of the keeper: liveness, kept settlements and releases need it
                log.exception("redis: keeping counters failed; tried again in a moment")
            # During an outage Redis is tried often: the sooner this process's spend is back in Redis, the
            # less the others admit there without it (docs/deploy.md, "Redis outages").
            await asyncio.sleep(_LOCAL_SECONDS if shares is not None and shares.active else every)

    async def keep_once(self, ttl_seconds: float) -> None:
        """One round of the keeper: liveness, kept settlements, the end of an outage, dead processes' holds,
        and the reading the shares of the next outage come from (raises while Redis is unreachable)."""
        await self.heartbeat(ttl_seconds)
        await self.retry_settlements()
        await self.release_kept()
        shares = self.shares
        if shares is not None and shares.active:  # back, and this process's outage spend is in Redis
            self._redis_back(shares)
        if time.monotonic() >= self._judge_after:
            await self.reclaim_dead()
        if shares is not None:
            await self.read_shares()

    async def heartbeat(self, ttl_seconds: float) -> None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(self._live, 1, px=int(ttl_seconds * 1000))
        pipe.sadd(self._processes, self.process)
        await pipe.execute()

    async def retry_settlements(self) -> None:
        """Send again the batches Redis did not answer, those of stopped processes first (raises while it
        still does not)."""
        stopped = self._stopped
        if self._kept or stopped.files or stopped.processes:
            async with self._sending:
                if stopped.files or stopped.processes:
                    await self._send_stopped()
                await self._send_kept()

    async def reclaim(self, process: str) -> None:
        """Release every reservation a stopped process still holds (a replay of its spool knows it is dead
        before its liveness key expires)."""
        if process == self.process:
            return
        tags = await self._release_held(process)
        if self._journal is not None and self._journal.holds_batches_of(process):
            return  # its kept batches are not all written: their numbers still guard them
        if self._cluster:
            for tag in tags:
                if tag:
                    await self._redis.hdel(f"{self._applied}:{tag}", process)
        await self._redis.hdel(self._applied, process)
        await self._redis.delete(f"{self._prefix}holds:{process}")

    async def _release_held(self, process: str) -> list[str]:
        """Release what `process` holds in every hash tag `holds:<process>` names (its batch numbers stay);
        returns those tags."""
        held, holds = f"{self._prefix}held:{process}", f"{self._prefix}holds:{process}"
        tags = sorted({member.decode() for member in await self._redis.smembers(holds)} | {""})
        for tag in tags:
            await self._reclaim(keys=[f"{held}:{tag}" if tag else held], args=[process])
        await self._redis.srem(self._processes, process)
        return tags

    async def reclaim_dead(self) -> int:
        """Release the reservations of processes whose liveness key expired; returns how many were dead.
        Their batch numbers stay: a process only cut off from Redis (or through an outage longer than its
        key) still sends its kept batches, and one Redis applied but never answered must not apply twice."""
        dead = 0
        for member in await self._redis.smembers(self._processes):
            process = member.decode() if isinstance(member, bytes) else member
            if process == self.process or await self._redis.exists(f"{self._prefix}live:{process}"):
                continue
            await self._release_held(process)
            dead += 1
        if dead:
            log.warning("redis: released the reservations of %d gateway process(es) that stopped", dead)
        return dead

    async def read_shares(self) -> None:
        """Read the headroom of the money counters this process asked lately, and how many gateway processes
        are live: what its shares are cut from if Redis becomes unreachable (degraded mode)."""
        shares = self.shares
        if shares is None:
            return
        members = [
            member.decode() if isinstance(member, bytes) else member
            for member in await self._redis.smembers(self._processes)
        ]
        keys = shares.watched()
        pipe = self._redis.pipeline(transaction=False)
        for process in members:
            pipe.exists(f"{self._prefix}live:{process}")
        for key in keys:
            pipe.hmget(self._prefix + key, "b", "r", "a")
        answers = await pipe.execute()
        live = sum(
            1 for process, alive in zip(members, answers, strict=False) if alive or process == self.process
        )
        readings: dict[str, tuple[int, int, bool] | None] = {}
        for key, (balance, reserved, activated) in zip(keys, answers[len(members) :], strict=True):
            readings[key] = (
                None if balance is None else (int(balance), int(reserved or 0), activated in (b"1", "1"))
            )
        shares.remember(readings, live + (self.process not in members))

    async def apply_event(self, key: str, seq: int, amount: int, activates: bool) -> bool:
        """Fold a committed balance event into the shared counter once (any process may announce it)."""
        name = self._prefix + key
        return bool(
            await self._apply(keys=[name, name + ":early"], args=[seq, amount, 1 if activates else 0])
        )

    async def money(self, key: str) -> tuple[int, int] | None:
        """(balance, reserved) once this process's queued settlements are written (observability, tests)."""
        await self.flush()
        values = await self._redis.hmget(self._prefix + key, "b", "r")
        return None if values[0] is None else (int(values[0]), int(values[1] or 0))

    async def admit(self, asks: Sequence[WindowAsk]) -> list[WindowResult]:
        """Take from every window, or from none, in one atomic script (one round trip)."""
        args: list[int] = [WINDOW_SECONDS]
        for _key, amount, limit in asks:
            args += (amount, limit)
        try:
            flat = await self._admit(keys=[self._windows[key] for key, _, _ in asks], args=args)
        except RedisError as exc:
            if self.shares is not None:
                return (await self._degraded(exc, asks, [])).windows
            self._unavailable(exc)
            now = int(time.time())
            return [WindowResult(True, 0, 0, now) for _ in asks]
        return [
            WindowResult(bool(flat[i]), int(flat[i + 1]), int(flat[i + 2]), int(flat[i + 3]))
            for i in range(0, len(flat), 4)
        ]

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
            log.error(
                "redis: releasing a slot of %s failed (%s); released once Redis answers",
                key,
                redis_error(exc),
            )
            self._unreleased.append(key)

    async def release_kept(self) -> None:
        """Release the slots whose release Redis did not answer, oldest first (raises while it still does
        not). One whose answer alone was lost is released twice: its count may read one low for a while
        (never below 0), where keeping it would have held a slot that is free for hours."""
        while self._unreleased:
            await self._release(keys=[self._prefix + self._unreleased[0]])
            self._unreleased.pop(0)

    async def close(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        try:
            await self.flush()
            await self.retry_settlements()
            await self.release_kept()
            # A clean stop holds nothing: its share is released now rather than when its key expires.
            for tag in sorted(self._held_in | {""}):
                await self._reclaim(keys=[self._held_of[tag]], args=[self.process])
            await self._redis.delete(self._live, self._holds)
            await self._redis.srem(self._processes, self.process)
            if not self._kept:  # nothing of it will be sent again: its batch numbers are no longer needed
                for applied in sorted(self._applied_in | {self._applied}):
                    await self._redis.hdel(applied, self.process)
        except RedisError as exc:
            kept = len(self._kept) + len(self._stopped.batches)
            if kept and self._journal is not None:
                log.warning(
                    "redis: unreachable at stop (%s): %d kept settlement batches wait in the spool for the"
                    " next start, and this process's reservations are released by the others",
                    redis_error(exc),
                    kept,
                )
            elif kept:
                log.error(
                    "redis: unreachable at stop (%s): %d kept settlement batches are lost",
                    redis_error(exc),
                    kept,
                )
            else:
                log.warning(
                    "redis: unreachable at stop (%s): this process's reservations are released by the others",
                    redis_error(exc),
                )
        if self._journal is not None:
            await self._journal.close()
        if self._wire is not None:
            self._wire.close()


def _admitted(answer: list) -> Admitted:
    """An `Admitted` from the script's answer (see `redis_scripts.ADMIT_REQUEST`)."""
    verdict = answer[0]
    if verdict == 1:
        now = answer[1]
        return Admitted(
            Refusal.NONE,
            [
                _window_result(WindowResult, (True, answer[i], answer[i + 1], now))
                for i in range(2, len(answer), 2)
            ],
        )
    if verdict == -1:
        return Admitted(Refusal.CLAIM, [])
    if verdict == -2:
        # Only the refused window's numbers are known (none was taken): the earlier ones are placeholders.
        refused = WindowResult(False, answer[2], answer[3], answer[4])
        return Admitted(Refusal.WINDOW, [refused] * int(answer[1]))
    # -3: that counter's outcome; -4 (still missing after rebuilding it): nothing to reserve on.
    outcome = int(answer[2]) if verdict == -3 else Reserve.INSUFFICIENT
    return Admitted(Refusal.MONEY, [], int(answer[1]) - 1, outcome)
