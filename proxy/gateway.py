"""The Gateway: every piece of runtime state, built once from the config and passed explicitly."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cabinet.storage import Database, apply_migrations, open_database
from config import Config
from plugins import ChainServices, PluginChain, default_chain
from plugins.request_id import InFlightIds
from proxy.billing.accounts import BILLING_CHANNEL, POLICY_CHANNEL, Accounts
from proxy.billing.counters import Counters, InProcessCounters, RedisCounters
from proxy.billing.ledger import LedgerWriter
from proxy.billing.policy import PolicyDirectory
from proxy.forward import Forwarder
from proxy.keys import REVOCATION_CHANNEL, KeyDirectory
from proxy.model_api import ModelApi
from proxy.objects import ObjectStore
from proxy.routes import RouteTable
from proxy.routing import ModelCatalog, RowSelector
from proxy.shared_state import RedisBus
from proxy.upstream import Upstream, build_upstream

log = logging.getLogger("modelgate.gateway")


async def _never_claimed(_token: str) -> bool:
    return False


@dataclass(slots=True)
class Gateway:
    """The running gateway of one process."""

    config: Config
    db: Database
    redis: RedisBus | None
    keys: KeyDirectory
    upstreams: dict[str, Upstream]
    catalog: ModelCatalog
    chain: PluginChain
    objects: ObjectStore
    counters: Counters
    ledger: LedgerWriter
    policies: PolicyDirectory
    accounts: Accounts
    model_api: ModelApi

    @classmethod
    async def start(cls, config: Config, *, workers: int = 1) -> Gateway:
        """Open storage (and Redis), apply migrations, build upstream clients, counters and the chain."""
        db = await open_database(config.storage.url, pool_size=config.storage.pool_size)
        bus: RedisBus | None = None
        try:
            await apply_migrations(db)
            if config.redis.url:
                bus = RedisBus(config.redis.url)
                try:
                    await bus.ping()
                except Exception as exc:  # start anyway; /readyz and requests report it
                    log.error("REDIS UNAVAILABLE at start (%r); fail_open = %s", exc, config.redis.fail_open)
            elif workers > 1:
                log.warning(
                    "several workers without Redis: rate limits and balances are counted per process; "
                    "configure [redis] for exact shared limits"
                )
            # A key cache is only safe where every process hears every revocation.
            keys = KeyDirectory(db, cache=workers == 1 or db.dialect == "postgres" or bus is not None)
            counters: Counters = (
                RedisCounters(bus.client, fail_open=config.redis.fail_open) if bus else InProcessCounters()
            )
            ledger = LedgerWriter(
                db,
                interval=config.billing.ledger_flush_interval_seconds,
                batch_size=config.billing.ledger_batch_size,
            )
            policies = PolicyDirectory(db)
            accounts = Accounts(
                db,
                config,
                counters,
                ledger,
                policies,
                shared=bus is not None,
                claim_nonce=bus.claim if bus else _never_claimed,
            )
            await _connect_channels(db, bus, keys, accounts)
            upstreams = {p.name: build_upstream(p) for p in config.providers}
            catalog = ModelCatalog(config, upstreams)
            objects = ObjectStore(db)
            services = ChainServices(
                RouteTable(),
                keys,
                catalog,
                objects,
                InFlightIds(),
                config,
                policies,
                counters,
                accounts,
                ledger,
            )
            chain = default_chain(services, config.plugins.disabled)
            selector = RowSelector(config.routing.cooldown_seconds, config.routing.failure_threshold)
            model_api = ModelApi(chain, Forwarder(chain, selector), catalog)
            ledger.start()
        except BaseException:
            if bus is not None:
                await bus.close()
            await db.close()
            raise
        log.info(
            "gateway ready: %d models, %d providers, storage %s, redis %s, plugins %s",
            len(catalog.models),
            len(upstreams),
            db.dialect,
            "on" if bus else "off",
            ",".join(chain.names),
        )
        return cls(
            config,
            db,
            bus,
            keys,
            upstreams,
            catalog,
            chain,
            objects,
            counters,
            ledger,
            policies,
            accounts,
            model_api,
        )

    async def stop(self) -> None:
        """Flush what must be flushed (ledger, object bindings), then close clients and storage."""
        await self.ledger.stop()
        await self.objects.drain()
        for upstream in self.upstreams.values():
            await upstream.close()
        if self.redis is not None:
            await self.redis.close()
        await self.db.close()


async def _connect_channels(
    db: Database, bus: RedisBus | None, keys: KeyDirectory, accounts: Accounts
) -> None:
    """Revocations, credits and policy changes reach every process: PostgreSQL NOTIFY and Redis pub/sub."""
    await keys.start()
    await db.listen(BILLING_CHANNEL, accounts.on_billing_message)
    await db.listen(POLICY_CHANNEL, accounts.on_policy_message)
    if db.dialect == "postgres":
        accounts.add_broadcast(db.notify)
    if bus is not None:
        bus.on(REVOCATION_CHANNEL, keys.forget)
        bus.on(BILLING_CHANNEL, accounts.on_billing_message)
        bus.on(POLICY_CHANNEL, accounts.on_policy_message)
        keys.add_publisher(bus.publish)
        accounts.add_broadcast(bus.publish)
        await bus.start()
