"""The Gateway: every piece of runtime state, built once from the config and passed explicitly."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from modelgate.config import Config
from modelgate.domain.accounts import (
    BILLING_CHANNEL,
    PLAN_CHANNEL,
    POLICY_CHANNEL,
    Accounts,
    CrashSettlements,
)
from modelgate.domain.allowance import AllowanceGrants
from modelgate.domain.audit_writer import AuditWriter
from modelgate.domain.background_responses import BackgroundResponses
from modelgate.domain.counters import Counters, InProcessCounters
from modelgate.domain.kept_batches import KeptJournal
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.overruns import OverrunReport
from modelgate.domain.policy_decisions import PolicyDirectory
from modelgate.domain.redis_counters import RedisCounters
from modelgate.infra.redis_client import redis_error
from modelgate.infra.spool import Spool, database_identity, default_spool_dir
from modelgate.plugins import PluginChain
from modelgate.plugins.request_id import InFlightIds
from modelgate.proxy.observability.loop_lag import LoopLag
from modelgate.proxy.observability.metrics import GatewayMetrics
from modelgate.proxy.observability.tracing import Tracer
from modelgate.proxy.pipeline.model_api import Completions, ModelApi
from modelgate.proxy.realtime.relay import RealtimeSessions, RealtimeState
from modelgate.proxy.realtime.secrets import InProcessSecrets, RedisSecrets
from modelgate.proxy.state.background_follower import BackgroundFollower, FollowTiming
from modelgate.proxy.state.host_channel import HostChannel
from modelgate.proxy.state.keys import REVOCATION_CHANNEL, KeyDirectory
from modelgate.proxy.state.objects import ObjectStore
from modelgate.proxy.state.shared_state import RedisBus
from modelgate.proxy.upstream.model_rows import ModelCatalog
from modelgate.proxy.upstream.providers import Upstream
from modelgate.runtime import ModelRuntime, build_runtime
from modelgate.storage import Database, apply_migrations, open_database
from modelgate.storage.presence import ProcessLease

log = logging.getLogger("modelgate.gateway")


@dataclass(slots=True)
class Gateway:
    """The running gateway of one process: lasting state, and the runtime a config reload replaces."""

    db: Database
    redis: RedisBus | None
    keys: KeyDirectory
    objects: ObjectStore
    counters: Counters
    ledger: LedgerWriter
    audit: AuditWriter  # the model API's own audit entries (content rules), written in batches
    policies: PolicyDirectory
    accounts: Accounts
    in_flight_ids: InFlightIds
    metrics: GatewayMetrics
    tracer: Tracer | None
    realtime: RealtimeState  # client secrets (Redis when configured) and open sessions
    runtime: ModelRuntime = field(init=False)
    host_channel: HostChannel | None = None  # SQLite: the processes of this host tell each other
    allowances: AllowanceGrants | None = None  # monthly allowances of plans, granted once across processes
    background: BackgroundFollower | None = None  # background responses followed to their final usage
    lease: ProcessLease | None = None  # PostgreSQL: this process's lease (exact revocation without Redis)
    overruns: OverrunReport | None = None  # charges past their reservation: counted, audited, logged
    shutting_down: bool = False  # set on SIGTERM: /readyz answers 503 so load balancers drain
    completions: Completions = field(default_factory=Completions)  # of requests whose client left
    loop_lag: LoopLag = field(default_factory=LoopLag)  # how late the event loop runs (/readyz, /metrics)
    _config_followers: list[Callable[[Config], None]] = field(default_factory=list)
    _retiring: set[asyncio.Task] = field(default_factory=set)

    @property
    def config(self) -> Config:
        return self.runtime.config

    @property
    def upstreams(self) -> dict[str, Upstream]:
        return self.runtime.upstreams

    @property
    def catalog(self) -> ModelCatalog:
        return self.runtime.catalog

    @property
    def chain(self) -> PluginChain:
        return self.runtime.chain

    @property
    def model_api(self) -> ModelApi:
        return self.runtime.model_api

    @classmethod
    async def start(cls, config: Config, *, workers: int = 1) -> Gateway:
        """Open storage (and Redis), apply migrations, build upstream clients, counters and the chain."""
        tracer = Tracer(config.tracing) if config.tracing.enabled else None
        db = await open_database(config.storage.url, pool_size=config.storage.pool_size)
        if tracer is not None:
            db = tracer.traced_database(db)
        bus: RedisBus | None = None
        host: HostChannel | None = None
        ledger: LedgerWriter | None = None
        try:
            await apply_migrations(db)
            host = _open_host_channel(config)
            if config.redis.enabled:
                bus = RedisBus(config.redis)
                try:
                    await bus.ping()
                except Exception as exc:  # start anyway; /readyz and requests report it
                    log.error(
                        "REDIS UNAVAILABLE at start (%s); outage = %s",
                        redis_error(exc),
                        config.redis.outage_mode,
                    )
            elif workers > 1:
                log.warning(
                    "several workers without Redis: rate limits and balances are counted per process; "
                    "configure [redis] for exact shared limits"
                )
            # A key cache is only safe where every process hears every revocation.
            heard_everywhere = db.dialect == "postgres" or bus is not None or host is not None
            keys = KeyDirectory(db, cache=workers == 1 or heard_everywhere)
            counters: Counters = (
                RedisCounters(
                    bus.client,
                    outage=config.redis.outage_mode,
                    journal=KeptJournal(_spool(config, kind="kept")),
                )
                if bus
                else InProcessCounters()
            )
            ledger = LedgerWriter(
                db,
                interval=config.billing.ledger_flush_interval_seconds,
                batch_size=config.billing.ledger_batch_size,
                max_queue=config.billing.ledger_max_queue,
                spool=_spool(config),
                # Row ids name the process that holds their reservations in Redis (see LedgerWriter.open).
                writer_id=counters.process if isinstance(counters, RedisCounters) else None,
            )
            if isinstance(counters, RedisCounters):  # before the ledger's replay (`adopt_stopped`)
                await counters.adopt_stopped()
            settlements = None
            if bus is not None:  # the counters outlive this process: settlements are recorded by row id
                settlements = CrashSettlements(counters)
                ledger.on_row_spooled = settlements.spooled
            # Adopts what dead processes left in the spool, before serving.
            await ledger.open(settlements)
            # Content rules compile in a worker thread (RE2 programs kept small: see content_rules.py), so
            # one organization's rules never hold up another's requests.
            policies = PolicyDirectory(db, ThreadPoolExecutor(1, thread_name_prefix="content-rules"))
            accounts = Accounts(
                db,
                config,
                counters,
                ledger,
                policies,
                shared=bus is not None,
            )
            lease = ProcessLease(db) if db.dialect == "postgres" else None
            await _connect_channels(
                db, bus, host, keys, accounts, lease, config.storage.serve_cached_during_outage
            )
            metrics = GatewayMetrics()
            metrics.watch_ledger(ledger)
            gateway = cls(
                db=db,
                redis=bus,
                keys=keys,
                objects=ObjectStore(db),
                counters=counters,
                ledger=ledger,
                audit=AuditWriter(db),
                policies=policies,
                accounts=accounts,
                in_flight_ids=InFlightIds(bus.client if bus else None),
                metrics=metrics,
                tracer=tracer,
                host_channel=host,
                lease=lease,
                realtime=RealtimeState(
                    RedisSecrets(bus.client) if bus else InProcessSecrets(), RealtimeSessions()
                ),
            )
            metrics.watch_realtime(gateway.realtime.sessions)
            if isinstance(counters, RedisCounters) and counters.shares is not None:
                metrics.watch_outage_shares(counters.shares)
            billing = config.billing
            gateway.overruns = OverrunReport(gateway.audit, metrics.count_overrun)
            gateway.background = BackgroundFollower(
                BackgroundResponses(db, secrets.token_hex(8)),
                accounts,
                counters,
                ledger,
                lambda: gateway.catalog,
                FollowTiming(
                    billing.background_poll_seconds,
                    billing.background_poll_max_seconds,
                    billing.background_follow_seconds,
                    billing.background_lease_seconds,
                ),
                gateway.overruns,
            )
            gateway.runtime = build_runtime(config, gateway)
            metrics.watch_upstreams(lambda: gateway.runtime.upstreams)
            gateway.loop_lag.start()
            metrics.watch_loop_lag(gateway.loop_lag)
            gateway.follow_config(accounts.use_config)
            ledger.start()
            gateway.background.start()  # also adopts the follows of stopped processes
            gateway.audit.start()
            await counters.start()
            # Also where channels exist: NOTIFY and pub/sub drop what is sent while a listener reconnects.
            accounts.follow_stored_events()
            gateway.allowances = AllowanceGrants(db, config, accounts.balance_changed)
            gateway.follow_config(gateway.allowances.use_config)
            gateway.allowances.start()
        except BaseException:
            if ledger is not None:  # releases its spool files, for the next start
                await ledger.stop(0.0)
            if bus is not None:
                await bus.close()
            if host is not None:
                host.close()
            await db.close()
            raise
        log.info(
            "gateway ready: %d models, %d providers, storage %s, redis %s, plugins %s",
            len(gateway.catalog.models),
            len(gateway.upstreams),
            db.dialect,
            "on" if bus else "off",
            ",".join(gateway.chain.names),
        )
        return gateway

    def follow_config(self, follower: Callable[[Config], None]) -> None:
        """Something built once from the config (the cabinet, the accounts) that a reload must update."""
        self._config_followers.append(follower)

    def swap(self, runtime: ModelRuntime) -> None:
        """Make `runtime` serve new requests at once; the old one closes after its last request."""
        old, self.runtime = self.runtime, runtime
        for follower in self._config_followers:
            follower(runtime.config)
        task = asyncio.get_running_loop().create_task(old.retire(), name="retire-runtime")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def stop(self) -> None:
        """Flush what must be flushed (ledger, object bindings), then close clients and storage."""
        self.loop_lag.stop()
        if self.allowances is not None:
            await self.allowances.stop()
        # Their ledger rows and settlements come first (a realtime session that outlived its close too).
        await self.completions.drain(self.config.server.shutdown_grace_seconds)
        if self.background is not None:  # its follows charged their crash cost and handed over
            await self.background.stop()
        await self.counters.flush()  # the rows that follow their settlements' batch (UsageMetering)
        # Within the grace: rows the database does not take (an outage) stay in the spool for the next start.
        await self.ledger.stop(self.config.server.shutdown_grace_seconds)
        await self.audit.stop(self.config.server.shutdown_grace_seconds)
        await self.objects.drain(self.config.server.shutdown_grace_seconds)
        retiring = list(self._retiring)
        for task in retiring:  # every request has ended (or was cancelled): old clients close now
            task.cancel()
        await asyncio.gather(*retiring, return_exceptions=True)
        await self.runtime.close()
        if self.tracer is not None:
            await self.tracer.flush()
        await self.accounts.stop()
        if self.lease is not None:  # no request runs any more: nobody needs to wait for this process
            await self.lease.stop()
        self.policies.close()
        await self.counters.close()  # hands back what this process held in Redis
        if self.redis is not None:
            await self.redis.close()
        if self.host_channel is not None:
            self.host_channel.close()
        await self.db.close()


def _spool(config: Config, kind: str = "ledger") -> Spool:
    """The spool directory for the ledger's segments, or for the counters' kept batches (`kind` "kept")."""
    billing = config.billing
    return Spool(
        Path(billing.spool_dir).absolute() if billing.spool_dir else default_spool_dir(config.storage.url),
        database_identity(config.storage.url),
        fsync=billing.spool_fsync,
        fsync_interval=billing.spool_fsync_interval_seconds,
        kind=kind,
    )


def _open_host_channel(config: Config) -> HostChannel | None:
    """The channel file beside a SQLite database; None for PostgreSQL, or when the file cannot be made
    (several workers then run without a key cache, unless Redis joins them)."""
    try:
        return HostChannel.open(config.storage.url)
    except OSError as exc:
        log.warning("cannot open the host channel beside the database (%r): workers are not told", exc)
        return None


async def _connect_channels(
    db: Database,
    bus: RedisBus | None,
    host: HostChannel | None,
    keys: KeyDirectory,
    accounts: Accounts,
    lease: ProcessLease | None,
    serve_cached_during_outage: bool,
) -> None:
    """Revocations, credits, plan and policy changes reach every process: PostgreSQL NOTIFY (acknowledged:
    see storage/presence.py), Redis pub/sub, and on SQLite the host channel (polled by every key lookup)."""
    if lease is not None:
        keys.use_lease(lease)
        keep_aside = serve_cached_during_outage
        lease.on_trust_lost(lambda: keys.distrust(keep_aside))
        lease.on_trust_lost(lambda: accounts.policies_untrusted(keep_aside))
        lease.on_trust_regained(keys.trust)
        lease.on_trust_regained(accounts.policies_trusted)
    await keys.start()
    # NOTIFY delivers nothing sent while the listening connection is down: after it is made again, cached
    # keys and policies are read afresh (balance events are read from the database every second anyway).
    db.on_listen_restored(keys.forget_all)
    db.on_listen_restored(accounts.policies_changed_unseen)
    await db.listen(BILLING_CHANNEL, accounts.on_billing_message)
    on_policy = accounts.on_policy_message
    await db.listen(POLICY_CHANNEL, lease.acknowledging(on_policy) if lease is not None else on_policy)
    accounts.add_broadcast(_plan_changes_here(keys))
    if lease is not None:
        accounts.add_broadcast(_acknowledged_broadcast(db, lease))
        await lease.start()  # after every LISTEN: a registered process hears what is sent from then on
    for channels in (bus, host):
        if channels is None:
            continue
        channels.on(REVOCATION_CHANNEL, keys.forget)
        channels.on(BILLING_CHANNEL, accounts.on_billing_message)
        channels.on(POLICY_CHANNEL, accounts.on_policy_message)
        channels.on(PLAN_CHANNEL, keys.forget_organization)
        keys.add_publisher(channels.publish)
        accounts.add_broadcast(channels.publish)
    if host is not None:
        host.on_missed(keys.forget_all)
        host.on_missed(accounts.policies_changed_unseen)
        keys.poll_before_lookups(host.poll)
    if bus is not None:
        await bus.start()


def _acknowledged_broadcast(db: Database, lease: ProcessLease) -> Callable[[str, str], Awaitable[None]]:
    """Plan and policy changes sent through PostgreSQL: the cabinet answers once every live process acted
    on them (balance events stay a plain NOTIFY: they are also read from the database every second)."""

    async def broadcast(channel: str, payload: str) -> None:
        if channel not in (PLAN_CHANNEL, POLICY_CHANNEL):
            await db.notify(channel, payload)
            return
        async with db.transaction() as tx:
            token = await lease.send(tx, channel, payload)
        await lease.settled(token)

    return broadcast


def _plan_changes_here(keys: KeyDirectory) -> Callable[[str, str], Awaitable[None]]:
    """A broadcast to this very process: its own plan changes reach its key cache before the cabinet
    answers (the other processes hear them on PLAN_CHANNEL)."""

    async def deliver(channel: str, organization_id: str) -> None:
        if channel == PLAN_CHANNEL:
            keys.forget_organization(organization_id)

    return deliver
