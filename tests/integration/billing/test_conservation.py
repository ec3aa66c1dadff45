"""Money is conserved under chaos: a seeded, bounded mix of streamed, cut, broken, failed, usage-less and
overrunning (a provider ignoring its cap) chats, `n > 1`, missing and small caps, realtime sessions of several
responses, background responses charged their final usage once they end (followed across the restarts),
non-streamed calls whose client left before the answer (read to their end and charged), top-ups and operator
adjustments while requests are in flight, a graceful restart and a SIGKILL of a gateway mid-mix — and
afterwards every organization's books balance to the micro-unit (Σ ledger costs = Σ provider-reported usage
x prices, overruns included and marked), on SQLite with one process and in-process counters, and on
PostgreSQL + Redis with two processes sharing them — and once more with a Redis of the run's own stopped
for OUTAGE_SECONDS at 15 % of the mix while both processes serve in `[redis] outage = "degraded"`
(issue #37): every invariant holds through it, the floor within the overspend bound of docs/deploy.md
"Redis outages" (tests/support/conservation_audit.py, `_floor_through_outages`); and with a Redis master,
its replica and a sentinel of the run's own, the master SIGKILLed at that point and the replica promoted:
every invariant as without an outage (nothing is admitted while no master answers: 503); and on a Redis
Cluster of the run's own (3 masters, 3 replicas, `[redis] cluster_nodes`), the master serving the busiest
organization's slot SIGKILLed there and its replica promoted by the cluster: every invariant as with
Sentinel; and that cluster stopped whole for OUTAGE_SECONDS, the gateways in degraded mode: every invariant
as through a single Redis's outage (tests/support/conservation_cluster.py); and with a
PostgreSQL primary and its synchronous streaming replica of the run's own (tests/support/pg_promotion.py),
the primary stopped at that point and the replica promoted OUTAGE_SECONDS later: every invariant as without
an outage (rows wait in the spools meanwhile; an operator's change then answered 503 may have been made).

The mix runs once per setup (a module fixture); each test checks one invariant of that run. The seed comes
from MODELGATE_CONSERVATION_SEED or is drawn at random; it is printed at the start and is in every assertion
message. What is counted is defined in tests/support/conservation_audit.py. With MODELGATE_CONSERVATION_DIR
set, each run keeps its config, SQLite file, gateway logs and a post-mortem (report.txt with every check's
findings, books.json, calls.json) in a directory of its own there.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from modelgate.storage import Database, open_database
from tests.fakes import FakeUpstream, Fault
from tests.fakes.faults import FOREVER
from tests.support.conservation_audit import (
    Evidence,
    MicroPrices,
    Opening,
    balance_never_below_the_floor,
    conservation_in_storage,
    events_match_what_was_sent,
    every_delivered_token_charged,
    late_usage_charged,
    live_counters_match_storage,
    no_reservation_left_held,
    one_row_per_admitted_request,
    overruns_charged_and_marked,
    summary,
    write_post_mortem,
)
from tests.support.conservation_cluster import (
    WholeCluster,
    cluster_chaos,
    cluster_failover,
    cluster_of_the_run,
    cluster_redis_toml,
)
from tests.support.conservation_mix import (
    BREAKING,
    FAILING,
    OVERRUNNING,
    SILENT,
    SLOW,
    STEADY,
    UNAVAILABLE,
    MixShape,
    plan_mix,
)
from tests.support.conservation_traffic import (
    ABANDON_DELAY,
    ADMITTED,
    BACKGROUND_MODEL,
    CLIENT_CUT,
    COMPLETED,
    GATEWAY_ERROR,
    SERVER_CUT,
    OutageRecord,
    Tenant,
    Traffic,
    adjust_endpoint_exists,
)
from tests.support.gateway import register_tenant
from tests.support.gateway_fleet import GatewayFleet
from tests.support.money_books import (
    BalanceWatch,
    RedisAt,
    WatchedOrganization,
    read_books,
    read_redis_money,
    redis_reader,
)
from tests.support.pg_pair import PostgresPair
from tests.support.pg_promotion import promote_mid_mix
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_sentinel import MASTER_NAME, SentinelTrio
from tests.support.redis_server import RedisServer
from tests.support.services import REDIS_URL, create_pg_database, drop_pg_database, service_unavailable

OPERATOR_TOKEN = "operator-conservation-token-0123456789"
SEED_VARIABLE = "MODELGATE_CONSERVATION_SEED"
KEEP_VARIABLE = "MODELGATE_CONSERVATION_DIR"
PRICES = MicroPrices(per_request=5, input=3, cached_input=1, output=11)
DEFAULT_MAX_TOKENS = 40
REALTIME_MODEL = "voice"
FLUSH_INTERVAL = 0.2
SETTLE_TIMEOUT = 30.0
# Reservations of a SIGKILLed process are released by the live ones once its liveness key expires
# (modelgate/domain/counters.py: a heartbeat every 5 s, the key lives 4 heartbeats, reclaims run every
# heartbeat).
RELEASE_TIMEOUT = 40.0
CONCURRENCY = 12
# The Redis outage of the degraded setup, and the bound on each wait around it (gateways read their headroom
# every 5 s heartbeat; a stopped Redis is noticed, and a returned one reconciled, within about a second).
OUTAGE_SECONDS = 5.0
OUTAGE_WAIT = 15.0
# A gateway has settled when these read 0 (one this gateway does not export reads 0).
PENDING_GAUGES = (
    "modelgate_requests_in_flight",
    "modelgate_realtime_sessions",
    "modelgate_ledger_queue_depth",
    "modelgate_ledger_backlog_rows",
)
# Opening balances in micro-units and credit limits: one organization never runs short, one runs out on a
# plan without credit, one spends into its credit line; top-ups and adjustments land on the last two.
FUNDING = (2_000_000, 8_000, 3_000)
CREDIT_PLAN = "credit"
CREDIT_LIMIT_MICROS = 4_000


@dataclass(frozen=True, slots=True)
class Setup:
    name: str
    gateways: int
    postgres: bool
    redis: bool
    # A Redis of the run's own stopped mid-mix, the gateways in degraded mode ("outage"); or a master of the
    # run's own killed mid-mix and its replica promoted by a sentinel ("failover"), or on a Redis Cluster of
    # the run's own the master of the busiest organization's slot ("cluster-failover") or the whole cluster,
    # the gateways in degraded mode ("cluster-outage"); or a PostgreSQL primary of the run's own stopped
    # mid-mix and its streaming replica promoted ("promotion").
    chaos: str = ""


SETUPS = [
    Setup("sqlite-one-process", 1, postgres=False, redis=False),
    Setup("postgres-redis-two-processes", 2, postgres=True, redis=True),
    Setup("postgres-redis-outage-degraded", 2, postgres=True, redis=True, chaos="outage"),
    Setup("postgres-redis-sentinel-failover", 2, postgres=True, redis=True, chaos="failover"),
    Setup("postgres-redis-cluster-failover", 2, postgres=True, redis=True, chaos="cluster-failover"),
    Setup("postgres-redis-cluster-outage-degraded", 2, postgres=True, redis=True, chaos="cluster-outage"),
    Setup("postgres-promotion-redis", 2, postgres=True, redis=True, chaos="promotion"),
]

# One fake upstream per behaviour, so each request's fate is decided by the model it names, not by the
# order in which concurrent requests reach a shared fault queue.
FAULTS = {
    STEADY: Fault(chunk_delay=0.02),
    BREAKING: Fault(disconnect_after_chunks=6, chunk_delay=0.02),
    FAILING: Fault(status=500),
    UNAVAILABLE: Fault(status=503),
    SILENT: Fault(omit_usage=True, chunk_delay=0.02),
    OVERRUNNING: Fault(ignore_output_cap=True, chunk_delay=0.02),
    SLOW: Fault(delay_before_headers=ABANDON_DELAY),  # answers after its (abandoning) client left
}


def _price_toml() -> str:
    return f"""[models.prices]
per_request = {PRICES.per_request / 1_000_000:.6f}
input_per_mtok = {PRICES.input}
cached_input_per_mtok = {PRICES.cached_input}
output_per_mtok = {PRICES.output}
"""


def conservation_toml(
    storage_url: str, redis_url: str | None, upstreams: dict[str, FakeUpstream], redis_more: str = ""
) -> str:
    url = f'url = "{redis_url}"\n' if redis_url else ""
    redis = f"[redis]\n{url}{redis_more}" if url or redis_more else ""
    providers = "".join(
        f'[[providers]]\nname = "{name}"\nkind = "openai"\nbase_url = "{fake.base_url}/v1"\n\n'
        for name, fake in upstreams.items()
    )
    models = "".join(
        f'[[models]]\nname = "chat-{name}"\nkinds = ["chat"]\ndefault_max_tokens = {DEFAULT_MAX_TOKENS}\n'
        f'[[models.rows]]\nprovider = "{name}"\nupstream_model = "gpt-4o-mini"\n{_price_toml()}\n'
        for name in upstreams
    )
    return f"""
[server]
operator_token = "{OPERATOR_TOKEN}"
shutdown_grace_seconds = 10.0

[storage]
url = "{storage_url}"

{redis}
[billing]
ledger_flush_interval_seconds = {FLUSH_INTERVAL}
background_poll_seconds = 0.05
background_poll_max_seconds = 0.2
background_lease_seconds = 1.0

[routing]
# Failing upstreams stay in rotation: every request to them reaches them and fails there.
failure_threshold = 1000000

{providers}
{models}
[[models]]
name = "{BACKGROUND_MODEL}"
kinds = ["responses"]
default_max_tokens = {DEFAULT_MAX_TOKENS}
[[models.rows]]
provider = "{STEADY}"
upstream_model = "gpt-4o-mini"
{_price_toml()}

[[models]]
name = "{REALTIME_MODEL}"
kinds = ["realtime"]
default_max_tokens = {DEFAULT_MAX_TOKENS}
[[models.rows]]
provider = "{STEADY}"
upstream_model = "gpt-realtime"
{_price_toml()}

[[plans]]
code = "free"
rpm = 0
tpm = 0
realtime_concurrency = 8

[[plans]]
code = "{CREDIT_PLAN}"
credit_limit = {CREDIT_LIMIT_MICROS / 1_000_000:.6f}
rpm = 0
tpm = 0
realtime_concurrency = 8
"""


def _seed() -> int:
    configured = os.environ.get(SEED_VARIABLE)
    return int(configured) if configured else random.SystemRandom().randrange(1, 2**31)


@dataclass(slots=True)
class Run:
    setup: Setup
    evidence: Evidence
    workdir: Path

    def report(self) -> str:
        return f"[{self.setup.name}] {summary(self.evidence)}\ngateway logs: {self.workdir}"


@pytest.fixture(scope="module", params=SETUPS, ids=[s.name for s in SETUPS])
def conservation(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    setup: Setup = request.param
    seed = _seed()
    print(f"\n[{setup.name}] {SEED_VARIABLE}={seed}", flush=True)
    workdir = _workdir(tmp_path_factory, setup, seed)
    with ExitStack() as stack:
        pair = None
        if setup.chaos == "promotion":
            pair = _own(
                stack, PostgresPair(synchronous=True), "a PostgreSQL primary and replica of the test's own"
            )
        storage_url = pair.url if pair else _storage(stack, setup, workdir)
        redis_server = (
            _own(stack, RedisServer(), "a redis-server of the test's own")
            if setup.chaos == "outage"
            else None
        )
        trio = None
        if setup.chaos == "failover":
            trio = _own(stack, SentinelTrio(), "a Redis master, replica and sentinel of the test's own")
        redis_url = redis_server.url if redis_server else _redis(setup)
        redis_more = 'outage = "degraded"\n' if redis_server else ""
        if (
            trio
        ):  # the gateways follow the sentinel; the test reads the replica, the master after the failover
            redis_url = f"redis://127.0.0.1:{trio.replica_port}/0"
            redis_more = f'sentinels = ["{trio.sentinel}"]\nsentinel_master = "{MASTER_NAME}"\n'
        cluster = cluster_of_the_run(setup.chaos)
        if cluster:
            _own(stack, cluster, "a Redis Cluster of the test's own")
            redis_url, redis_more = None, cluster_redis_toml(cluster, setup.chaos)
        upstreams = {name: stack.enter_context(FakeUpstream(name)) for name in FAULTS}
        for name, fault in FAULTS.items():
            upstreams[name].add_fault("/v1/chat/completions", fault, times=FOREVER)
        config_path = workdir / "conservation.toml"
        config_path.write_text(
            conservation_toml(storage_url, redis_url, upstreams, redis_more), encoding="utf-8"
        )
        fleet = GatewayFleet(config_path, workdir, setup.gateways)
        try:
            fleet.start_all()
            registered = [
                register_tenant(fleet.base_url(0), fund_usd=amount / 1_000_000) for amount in FUNDING
            ]
            evidence = asyncio.run(
                _run(
                    seed,
                    setup,
                    fleet,
                    storage_url,
                    tuple(cluster.nodes) if cluster else redis_url,
                    registered,
                    upstreams,
                    redis_server or trio or pair or (cluster and cluster_chaos(cluster, setup.chaos)),
                )
            )
        finally:
            problems = fleet.stop_all()
        run = Run(setup, evidence, workdir)
        if problems:
            print(f"[{setup.name}] stopping the gateways: {problems}")
        print(run.report(), flush=True)
        print(f"[{setup.name}] post-mortem: {write_post_mortem(evidence, workdir)}", flush=True)
        yield run


def _workdir(tmp_path_factory: pytest.TempPathFactory, setup: Setup, seed: int) -> Path:
    """Where the run keeps its config, SQLite file and gateway logs: under MODELGATE_CONSERVATION_DIR when
    set (kept for a post-mortem; pytest prunes its own temporary directories), else a pytest one."""
    kept = os.environ.get(KEEP_VARIABLE)
    if not kept:
        return tmp_path_factory.mktemp(f"conservation-{setup.name}")
    workdir = Path(kept) / f"{setup.name}-seed{seed}-{time.strftime('%H%M%S')}"
    workdir.mkdir(parents=True)
    return workdir


def _storage(stack: ExitStack, setup: Setup, workdir: Path) -> str:
    if not setup.postgres:
        return f"sqlite:///{workdir / 'conservation.db'}"
    try:
        url = asyncio.run(create_pg_database())
    except Exception as exc:
        service_unavailable("PostgreSQL at 127.0.0.1:5432", exc)
        raise
    stack.callback(lambda: asyncio.run(drop_pg_database(url)))
    return url


def _redis(setup: Setup) -> str | None:
    if not setup.redis:
        return None
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except Exception as exc:
        service_unavailable("Redis at 127.0.0.1:6379", exc)
    return REDIS_URL


_Own = TypeVar("_Own", RedisServer, SentinelTrio, RedisClusterNodes, PostgresPair)


def _own(stack: ExitStack, servers: _Own, what: str) -> _Own:
    """Servers of the run's own, started now and closed with the run."""
    stack.callback(servers.close)
    try:
        servers.start()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        service_unavailable(what, exc)
        raise
    return servers


OwnRedis = RedisServer | SentinelTrio | RedisClusterNodes | WholeCluster


async def _failover(fleet: GatewayFleet, trio: SentinelTrio, record: OutageRecord) -> None:
    """SIGKILL the master mid-mix; the sentinel promotes the replica, which the gateways follow. The outage
    ends once every gateway finds Redis ready again: a process stopped while it cannot reach Redis keeps its
    unsent settlements from Redis's counters for good (docs/deploy.md: keep restarts and outages apart)."""
    record.served_from_shares = False
    await asyncio.to_thread(trio.kill_master)
    record.stopped_at = time.monotonic()
    record.begun.set()
    try:
        await asyncio.to_thread(trio.wait_for_failover, OUTAGE_WAIT)
    except RuntimeError as exc:
        record.problems.append(f"the sentinel promoted no replica within {OUTAGE_WAIT} s: {exc}")
        return
    record.started_at = time.monotonic()
    if await fleet.redis_ready(OUTAGE_WAIT):
        record.reconciled_at = time.monotonic()
    else:
        record.problems.append(f"a gateway did not find the promoted master within {OUTAGE_WAIT} s")


async def _until(fleet: GatewayFleet, condition, within: float = OUTAGE_WAIT) -> bool:
    """Wait (bounded) until every live gateway's /metrics samples meet `condition`."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        samples = [await fleet.metrics(generation) for generation in fleet.live()]
        if all(condition(sample) for sample in samples):
            return True
        await asyncio.sleep(0.1)  # the polling period of a bounded wait
    return False


def _outage_metric(samples: dict[str, float], name: str) -> float:
    return samples.get(f"modelgate_redis_outage_{name}", -1.0)


async def _redis_outage(
    fleet: GatewayFleet, server: RedisServer | WholeCluster, record: OutageRecord, organizations: int
) -> None:
    """Stop Redis once every gateway has read a headroom (every organization's, when it served each within a
    heartbeat) and counted the fleet, hold the outage while the mix goes on, start Redis again and wait until
    every gateway has sent its kept settlements. An organization a process never read gets 503 from it."""

    def read(counters: int):
        return lambda m: (
            _outage_metric(m, "known_counters") >= counters and _outage_metric(m, "processes") >= len(fleet)
        )

    if not await _until(fleet, read(organizations), within=6.0) and not await _until(fleet, read(1)):
        readings = [
            {name: _outage_metric(await fleet.metrics(g), name) for name in ("known_counters", "processes")}
            for g in fleet.live()
        ]
        record.problems.append(f"a gateway read no headroom before the outage: {readings}")
    await asyncio.to_thread(server.stop)
    record.stopped_at = time.monotonic()
    record.begun.set()
    if await _until(fleet, lambda m: _outage_metric(m, "degraded") == 1):
        record.degraded_at = time.monotonic()
    else:
        record.problems.append(f"a gateway was not degraded within {OUTAGE_WAIT} s of the stop")
    # The outage's length, not a synchronisation: the mix runs on meanwhile.
    await asyncio.sleep(max(0.0, record.stopped_at + record.operation.seconds - time.monotonic()))
    await asyncio.to_thread(server.start)
    record.started_at = time.monotonic()
    if await _until(fleet, lambda m: _outage_metric(m, "degraded") == 0):
        record.reconciled_at = time.monotonic()
    else:
        record.problems.append(f"a gateway did not reconcile within {OUTAGE_WAIT} s of Redis's return")


def _chaos(fleet: GatewayFleet, own: OwnRedis | PostgresPair | None, storage_url: str, tenants: list[Tenant]):
    """The mix's outage for the setup's own servers (None: the setup has none)."""
    if isinstance(own, PostgresPair):
        return lambda record: promote_mid_mix(fleet, own, record, OUTAGE_SECONDS)
    if isinstance(own, RedisServer | WholeCluster):
        return lambda record: _redis_outage(fleet, own, record, len(tenants))
    if isinstance(own, RedisClusterNodes):
        organizations = [tenant.organization_id for tenant in tenants]
        return lambda record: cluster_failover(fleet, own, record, storage_url, organizations, OUTAGE_WAIT)
    if isinstance(own, SentinelTrio):
        return lambda record: _failover(fleet, own, record)
    return None


async def _run(
    seed,
    setup: Setup,
    fleet: GatewayFleet,
    storage_url: str,
    redis_url: RedisAt,
    registered,
    fleet_upstreams: dict[str, FakeUpstream],
    own_redis: OwnRedis | PostgresPair | None = None,
):
    db = await open_database(storage_url, pool_size=2)
    redis = redis_reader(redis_url)
    try:
        tenants = await _tenants(db, registered)
        openings = [await _opening(db, tenant) for tenant in tenants]
        adjust = await adjust_endpoint_exists(fleet.base_url(0), tenants[0].organization_id, OPERATOR_TOKEN)
        print(f"[{setup.name}] operator adjust endpoint present: {adjust}", flush=True)
        watched = [WatchedOrganization(t.organization_id, t.credit_limit_micros) for t in tenants]
        watch = BalanceWatch(storage_url, redis_url, watched).start()
        try:
            traffic = Traffic(
                fleet,
                tenants,
                operator_token=OPERATOR_TOKEN,
                default_max_tokens=DEFAULT_MAX_TOKENS,
                realtime_model=REALTIME_MODEL,
                adjust_available=adjust,
                concurrency=CONCURRENCY,
                finish_background=fleet_upstreams[STEADY].finish_background,
                redis_outage=_chaos(fleet, own_redis, storage_url, tenants),
            )
            outage = OUTAGE_SECONDS if setup.chaos else 0.0
            shape = MixShape(organizations=len(tenants), gateways=setup.gateways, redis_outage=outage)
            log = await traffic.run(plan_mix(seed, shape))
            settled = await _settle(fleet, db, redis, tenants)
            released = await _released(redis, tenants) if redis is not None else None
        finally:
            watch.stop()
        books = [await read_books(db, tenant.organization_id) for tenant in tenants]
        live = [await read_redis_money(redis, t.organization_id) for t in tenants] if redis else None
        return Evidence(seed, tenants, openings, log, books, live, watch, PRICES, settled, released)
    finally:
        await db.close()
        if redis is not None:
            await redis.aclose()


async def _tenants(db: Database, registered) -> list[Tenant]:
    """The registered organizations; the last moves to the credit plan before its first model request (so
    no gateway has cached its key with the old plan)."""
    tenants = []
    for index, tenant in enumerate(registered):
        organization_id = await db.fetchval(
            "SELECT organization_id FROM users WHERE email = $1", tenant.email
        )
        credit = 0
        if index == len(registered) - 1:
            await db.execute(
                "UPDATE organizations SET plan_code = $1 WHERE id = $2", CREDIT_PLAN, organization_id
            )
            credit = CREDIT_LIMIT_MICROS
        tenants.append(Tenant(index, organization_id, tenant.api_key, credit))
    return tenants


async def _opening(db: Database, tenant: Tenant) -> Opening:
    row = await db.fetchrow(
        "SELECT balance_micros, credit_seq FROM organizations WHERE id = $1", tenant.organization_id
    )
    return Opening(int(row["balance_micros"]), int(row["credit_seq"]))


async def _settle(fleet: GatewayFleet, db: Database, redis, tenants: list[Tenant]) -> bool:
    """Wait (bounded) until no gateway has a request, session or ledger entry pending and the books stopped
    moving across a few flush intervals; False when the deadline passed first."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    previous = None
    while time.monotonic() < deadline:
        quiet = True
        for generation in fleet.live():
            samples = await fleet.metrics(generation)
            if not samples or any(samples.get(name, 0) for name in PENDING_GAUGES):
                quiet = False
        state = []
        for tenant in tenants:
            books = await read_books(db, tenant.organization_id)
            state.append((books.balance_micros, books.credit_seq, len(books.rows), books.spent_micros))
            if redis is not None:
                state.append((await read_redis_money(redis, tenant.organization_id)).raw)
        # A background response is settled once charged (its follow may outlive a killed process).
        following = await db.fetchval("SELECT COUNT(*) FROM background_responses WHERE settled_at IS NULL")
        if following:
            quiet = False
        if quiet and state == previous:
            return True
        previous = state if quiet else None
        await asyncio.sleep(3 * FLUSH_INTERVAL)  # the polling period of a bounded wait
    return False


async def _released(redis, tenants: list[Tenant]) -> float | None:
    """Wait (bounded) until no Redis counter holds a reservation; how long it took (None: it never did)."""
    started = time.monotonic()
    while time.monotonic() - started < RELEASE_TIMEOUT:
        held = [(await read_redis_money(redis, t.organization_id)).reserved for t in tenants]
        if not any(held):
            return time.monotonic() - started
        await asyncio.sleep(0.5)  # the polling period of a bounded wait
    return None


def _check(run: Run, findings: list[str]) -> None:
    assert not findings, "\n".join([run.report(), "findings:", *findings[:40]])


# -- the invariants ------------------------------------------------------------------------------------------


def test_the_mix_ran_as_planned(conservation: Run) -> None:
    """The run exercised what it claims to: every outcome class, both restarts with requests under way, and
    the books settled before they were read."""
    log = conservation.evidence.log
    results = {record.result for record in log.calls}
    expected = (COMPLETED, CLIENT_CUT, SERVER_CUT, GATEWAY_ERROR)
    problems = [f"no {name} call" for name in expected if name not in results]
    problems += [f"timed out: {operation}" for operation in log.timed_out]
    problems += [f"failed: {failure}" for failure in log.failed]
    problems += [
        f"{r.ended.name} {r.ended.stop_problem}" for r in log.restarts if r.ended and r.ended.stop_problem
    ]
    if not any(record.status == 101 for record in log.calls):
        problems.append("no realtime session was upgraded")
    if len(log.restarts) != 2 or any(r.ended is None for r in log.restarts):
        problems.append(f"restarts: {[(r.operation, r.ended) for r in log.restarts]}")
    if not conservation.evidence.settled:
        problems.append(f"the books did not settle within {SETTLE_TIMEOUT} s")
    outages = log.outages
    if len(outages) != int(bool(conservation.setup.chaos)):
        problems.append(f"{len(outages)} Redis outages in a setup with chaos {conservation.setup.chaos!r}")
    for outage in outages:
        problems += outage.problems
        if not outage.served_from_shares:
            continue  # a failover: 503 until the replica is promoted
        during = [
            r
            for r in log.calls
            if r.result in ADMITTED and outage.stopped_at < r.started_at < outage.started_at
        ]
        if not during:
            problems.append("no request was admitted during the Redis outage")
    _check(conservation, problems)


def test_money_is_conserved_in_storage(conservation: Run) -> None:
    _check(conservation, conservation_in_storage(conservation.evidence))


def test_balance_events_are_what_the_operator_sent(conservation: Run) -> None:
    _check(conservation, events_match_what_was_sent(conservation.evidence))


# In-process counters live and end inside the gateway process; storage is checked on its own for them.
_SHARED_COUNTERS = pytest.mark.parametrize(
    "conservation", [s for s in SETUPS if s.redis], ids=[s.name for s in SETUPS if s.redis], indirect=True
)


@_SHARED_COUNTERS
def test_live_counters_hold_the_stored_balance(conservation: Run) -> None:
    _check(conservation, live_counters_match_storage(conservation.evidence))


@_SHARED_COUNTERS
def test_no_reservation_is_left_held(conservation: Run) -> None:
    """Once no request is under way, Redis holds no reservation: a SIGKILLed process's are released by the
    live processes when its liveness key expires (modelgate/domain/counters.py), which the run waits for."""
    _check(conservation, no_reservation_left_held(conservation.evidence))


def test_no_balance_went_below_the_credit_limit(conservation: Run) -> None:
    _check(conservation, balance_never_below_the_floor(conservation.evidence))


def test_every_admitted_request_has_one_ledger_row(conservation: Run) -> None:
    _check(conservation, one_row_per_admitted_request(conservation.evidence))


def test_every_delivered_token_is_charged(conservation: Run) -> None:
    """Σ ledger costs = Σ provider-reported usage x prices: each row costs its tokens at the model's prices,
    and a call read to the end carries the usage the provider reported, past its reservation too."""
    _check(conservation, every_delivered_token_charged(conservation.evidence))


def test_overruns_are_charged_in_full_and_marked(conservation: Run) -> None:
    _check(conservation, overruns_charged_and_marked(conservation.evidence))


def test_late_usage_is_charged_once_as_the_provider_reports_it(conservation: Run) -> None:
    """Background responses: Σ of their rows = the final usage the provider reported x prices, once, across
    the restarts (a crash row and the adopter's rest, or one row); abandoned calls: the provider's usage."""
    _check(conservation, late_usage_charged(conservation.evidence))
