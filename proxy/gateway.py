"""The Gateway: every piece of runtime state, built once from the config and passed explicitly."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cabinet.storage import Database, apply_migrations, open_database
from config import Config
from plugins import ChainServices, PluginChain, default_chain
from plugins.request_id import InFlightIds
from proxy.forward import Forwarder
from proxy.keys import KeyDirectory
from proxy.model_api import ModelApi
from proxy.objects import ObjectStore
from proxy.routes import RouteTable
from proxy.routing import ModelCatalog, RowSelector
from proxy.upstream import Upstream, build_upstream

log = logging.getLogger("modelgate.gateway")


@dataclass(slots=True)
class Gateway:
    """The running gateway of one process."""

    config: Config
    db: Database
    keys: KeyDirectory
    upstreams: dict[str, Upstream]
    catalog: ModelCatalog
    chain: PluginChain
    objects: ObjectStore
    model_api: ModelApi

    @classmethod
    async def start(cls, config: Config, *, workers: int = 1) -> Gateway:
        """Open storage, apply migrations, build upstream clients and the plugin chain."""
        db = await open_database(config.storage.url, pool_size=config.storage.pool_size)
        try:
            await apply_migrations(db)
            # A key cache is only safe where every process hears every revocation.
            shared_channel = db.dialect == "postgres" or config.redis.url is not None
            keys = KeyDirectory(db, cache=workers == 1 or shared_channel)
            await keys.start()
            upstreams = {p.name: build_upstream(p) for p in config.providers}
            catalog = ModelCatalog(config, upstreams)
            objects = ObjectStore(db)
            chain = default_chain(
                ChainServices(RouteTable(), keys, catalog, objects, InFlightIds()), config.plugins.disabled
            )
            selector = RowSelector(config.routing.cooldown_seconds, config.routing.failure_threshold)
            model_api = ModelApi(chain, Forwarder(chain, selector), catalog)
        except BaseException:
            await db.close()
            raise
        log.info(
            "gateway ready: %d models, %d providers, storage %s, plugins %s",
            len(catalog.models),
            len(upstreams),
            db.dialect,
            ",".join(chain.names),
        )
        return cls(config, db, keys, upstreams, catalog, chain, objects, model_api)

    async def stop(self) -> None:
        """Flush what must be flushed, then close clients and storage."""
        await self.objects.drain()
        for upstream in self.upstreams.values():
            await upstream.close()
        await self.db.close()
