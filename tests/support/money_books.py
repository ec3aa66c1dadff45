"""What storage and Redis say about an organization's money: its stored balance, ledger rows and balance
events, its live Redis counter, and a background watch of the lowest balance reached while traffic runs."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import ClusterError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from modelgate.domain.accounts import balance_key
from modelgate.storage import Database, open_database

# The live money counter in Redis: the gateway's key prefix + domain.accounts.balance_key. Its fields, as
# modelgate/domain/counters.py defines them: the balance less spend the ledger has not written yet, and the
# amount reserved by requests in flight.
REDIS_PREFIX = "mg:"
BALANCE_FIELD = "b"
RESERVED_FIELD = "r"
SAMPLE_INTERVAL = 0.1


@dataclass(frozen=True, slots=True)
class LedgerRow:
    request_id: str
    status: int
    outcome: str
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    cost_micros: int
    over_reservation_micros: int = 0  # charged past the reservation (issue #32: the charge is the truth)
    usage_implausible: bool = False
    usage_estimated: bool = False  # no usage was reported: the gateway's estimate, said on the row


@dataclass(frozen=True, slots=True)
class BalanceEventRow:
    id: str
    seq: int
    kind: str
    amount_micros: int
    reference_id: str | None


@dataclass(frozen=True, slots=True)
class Books:
    """One organization's money as storage holds it."""

    balance_micros: int
    credit_seq: int
    rows: tuple[LedgerRow, ...]
    events: tuple[BalanceEventRow, ...]

    @property
    def spent_micros(self) -> int:
        return sum(row.cost_micros for row in self.rows)

    @property
    def over_reservation_micros(self) -> int:
        """Σ charged past the reservations: how far below its floor the balance may have gone."""
        return sum(row.over_reservation_micros for row in self.rows)

    def events_after(self, seq: int) -> tuple[BalanceEventRow, ...]:
        return tuple(event for event in self.events if event.seq > seq)


async def read_books(db: Database, organization_id: str) -> Books:
    organization = await db.fetchrow(
        "SELECT balance_micros, credit_seq FROM organizations WHERE id = $1", organization_id
    )
    rows = await db.fetch(
        "SELECT request_id, status, outcome, input_tokens, cached_input_tokens, output_tokens, cost_micros,"
        " over_reservation_micros, usage_implausible, usage_estimated FROM usage_ledger"
        " WHERE organization_id = $1"
        " ORDER BY created_at, id",
        organization_id,
    )
    events = await db.fetch(
        "SELECT id, seq, kind, amount_micros, reference_id FROM balance_events WHERE organization_id = $1"
        " ORDER BY seq",
        organization_id,
    )
    return Books(
        int(organization["balance_micros"]),
        int(organization["credit_seq"]),
        tuple(
            LedgerRow(
                r["request_id"],
                int(r["status"]),
                r["outcome"],
                int(r["input_tokens"]),
                int(r["cached_input_tokens"]),
                int(r["output_tokens"]),
                int(r["cost_micros"]),
                int(r["over_reservation_micros"]),
                bool(r["usage_implausible"]),
                bool(r["usage_estimated"]),
            )
            for r in rows
        ),
        tuple(
            BalanceEventRow(e["id"], int(e["seq"]), e["kind"], int(e["amount_micros"]), e["reference_id"])
            for e in events
        ),
    )


@dataclass(frozen=True, slots=True)
class RedisMoney:
    """The live counter of one organization in Redis (None fields: the counter does not exist)."""

    balance: int | None
    reserved: int | None
    raw: dict[str, str]


# Where the test reads Redis: a server's URL, the `host:port` of nodes of a Redis Cluster, or none.
RedisAt = str | tuple[str, ...] | None
# What reading Redis raises while it is down or a master is being failed over.
UNREADABLE = (RedisConnectionError, RedisTimeoutError, ClusterError)


def redis_reader(at: RedisAt) -> Redis | RedisCluster | None:
    """A client that reads the Redis `at` names (a cluster's: routed by slot, following its failovers)."""
    if isinstance(at, tuple):
        nodes = [ClusterNode(host, int(port)) for host, _, port in (node.rpartition(":") for node in at)]
        return RedisCluster(startup_nodes=nodes, socket_timeout=2, socket_connect_timeout=1)
    return Redis.from_url(at) if at else None


async def read_redis_money(redis, organization_id: str) -> RedisMoney:
    raw = {
        k.decode(): v.decode()
        for k, v in (await redis.hgetall(REDIS_PREFIX + balance_key(organization_id))).items()
    }
    balance, reserved = raw.get(BALANCE_FIELD), raw.get(RESERVED_FIELD)
    return RedisMoney(
        int(balance) if balance is not None else None, int(reserved) if reserved is not None else None, raw
    )


async def _debits(db: Database, organization_id: str) -> int:
    """Σ of the negative balance events so far (debits, sets that lowered the balance): ≤ 0."""
    value = await db.fetchval(
        "SELECT COALESCE(SUM(amount_micros), 0) FROM balance_events WHERE organization_id = $1"
        " AND amount_micros < 0",
        organization_id,
    )
    return int(value)


@dataclass(slots=True)
class LowestPoint:
    """The sample of one organization's money that came closest to (or went past) its floor.

    The floor is -credit limit + Σ negative balance events so far: spend alone can never take a balance
    below -credit limit, but an operator's debit may take it anywhere."""

    margin: int | None = None  # value - floor at that sample; negative: below the floor
    value: int = 0
    floor: int = 0
    seconds: float = 0.0  # since the watch started

    def offer(self, value: int, floor: int, seconds: float) -> None:
        margin = value - floor
        if self.margin is None or margin < self.margin:
            self.margin, self.value, self.floor, self.seconds = margin, value, floor, seconds


@dataclass(slots=True)
class WatchedOrganization:
    organization_id: str
    credit_limit_micros: int
    stored: LowestPoint = field(default_factory=LowestPoint)  # organizations.balance_micros
    live: LowestPoint = field(default_factory=LowestPoint)  # Redis balance
    live_headroom: LowestPoint = field(default_factory=LowestPoint)  # Redis balance - reserved
    # (monotonic time, Redis balance - reserved - floor) of every sample: the headroom a gateway could read.
    headroom_samples: list[tuple[float, int]] = field(default_factory=list)
    # (monotonic time, which balance, value - floor) of every sample, for a floor that changes over time.
    margins: list[tuple[float, str, int]] = field(default_factory=list)
    live_unreadable: int = 0  # samples taken while Redis did not answer (an outage): storage only

    def highest_headroom(self, since: float, until: float) -> int:
        """The most headroom Redis showed between two monotonic times (0 when none was sampled)."""
        return max((margin for at, margin in self.headroom_samples if since <= at <= until), default=0)


class BalanceWatch:
    """Samples every organization's stored balance (and its Redis counter) every ~100 ms in a background
    thread with its own event loop, keeping the lowest point of each relative to its floor."""

    def __init__(self, storage_url: str, redis_at: RedisAt, organizations: list[WatchedOrganization]):
        self._storage_url = storage_url
        self._redis_at = redis_at
        self.organizations = organizations
        self.samples = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="balance-watch", daemon=True)

    def start(self) -> BalanceWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._thread.is_alive():
            self.errors.append("the balance watch did not stop within 10 s")

    def _run(self) -> None:
        try:
            asyncio.run(self._watch())
        except Exception as exc:  # reported by the test, which asserts that samples were taken
            self.errors.append(f"the balance watch failed: {exc!r}")

    async def _watch(self) -> None:
        db = await open_database(self._storage_url, pool_size=2)
        redis = redis_reader(self._redis_at)
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    await self._sample(db, redis, time.monotonic() - started)
                    self.samples += 1
                except Exception as exc:  # a busy SQLite file, say: the next sample comes soon
                    if len(self.errors) < 20:
                        self.errors.append(repr(exc))
                await asyncio.sleep(SAMPLE_INTERVAL)  # the sampling period, not a synchronisation
        finally:
            await db.close()
            if redis is not None:
                await redis.aclose()

    async def _sample(self, db: Database, redis, seconds: float) -> None:
        for watched in self.organizations:
            organization_id = watched.organization_id
            # Redis first: the debits read after it include every debit it can already hold.
            live = None
            if redis is not None:
                try:
                    live = await read_redis_money(redis, organization_id)
                except UNREADABLE:  # a Redis outage: storage is still watched
                    watched.live_unreadable += 1
            stored = await db.fetchval(
                "SELECT balance_micros FROM organizations WHERE id = $1", organization_id
            )
            floor = -watched.credit_limit_micros + await _debits(db, organization_id)
            watched.stored.offer(int(stored), floor, seconds)
            now = time.monotonic()
            watched.margins.append((now, "stored balance", int(stored) - floor))
            if live is not None and live.balance is not None:
                watched.live.offer(live.balance, floor, seconds)
                headroom = live.balance - (live.reserved or 0)
                watched.live_headroom.offer(headroom, floor, seconds)
                watched.headroom_samples.append((now, headroom - floor))
                watched.margins.append((now, "Redis balance", live.balance - floor))
                watched.margins.append((now, "Redis balance - reserved", headroom - floor))
