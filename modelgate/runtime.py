"""The reloadable part of a running gateway: upstream clients, model catalog, plugin chain and model API.

A runtime is built from one config on the gateway's lasting state (storage, Redis, counters, ledger, key
directory, policies, metrics). A config reload builds a new runtime beside the current one and swaps it
in; each request keeps the runtime it started on, which counts it, so an old runtime closes its upstream
clients only after its last request finished.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, overload

from aiohttp import web

from modelgate.config import Config
from modelgate.plugins import ChainServices, PluginChain, default_chain
from modelgate.proxy.http.front_request import FrontRequest, FrontStream
from modelgate.proxy.pipeline.forward import Forwarder
from modelgate.proxy.pipeline.model_api import Completions, LocalHandler, ModelApi
from modelgate.proxy.pipeline.route_table import RouteTable
from modelgate.proxy.pipeline.videos import VideoList
from modelgate.proxy.realtime.relay import RealtimeRelay
from modelgate.proxy.realtime.secrets import ClientSecretIssuer
from modelgate.proxy.upstream.model_rows import ModelCatalog, RowSelector
from modelgate.proxy.upstream.providers import Upstream, build_upstreams

if TYPE_CHECKING:
    from modelgate.gateway import Gateway

log = logging.getLogger("modelgate.runtime")


class ModelRuntime:
    """Everything built from the reloadable config, with a count of the requests running on it."""

    def __init__(
        self,
        config: Config,
        upstreams: dict[str, Upstream],
        catalog: ModelCatalog,
        chain: PluginChain,
        handlers: Callable[[RowSelector], dict[str, LocalHandler]] | None = None,
        shutting_down: Callable[[], bool] = lambda: False,
        completions: Completions | None = None,
        complete_inline: bool = False,
    ) -> None:
        self.config = config
        self.upstreams = upstreams
        self.catalog = catalog
        self.chain = chain
        selector = RowSelector(config.routing.cooldown_seconds, config.routing.failure_threshold)
        local = handlers(selector) if handlers is not None else {}
        self.model_api = ModelApi(
            chain,
            Forwarder(chain, selector, expose_provider=config.server.expose_provider_header),
            catalog,
            local,
            shutting_down,
            completions,
            finish_abandoned=config.billing.abandoned_calls == "finish",
            complete_inline=complete_inline,
        )
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    def enter(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def retire(self) -> None:
        """Wait for the requests still running on this runtime, then close its upstream clients."""
        if self.in_flight:
            log.info(
                "previous config: %d request(s) still in flight; closing its clients after them",
                self.in_flight,
            )
        try:
            await self._idle.wait()
        finally:  # also when the gateway stops first
            await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for upstream in self.upstreams.values():
            try:
                await upstream.close()
            except Exception:
                log.exception("closing the upstream client of %s failed", upstream.name)


def build_runtime(config: Config, gateway: Gateway) -> ModelRuntime:
    """Upstream clients, catalog, chain and model API for `config`, on the gateway's lasting state."""
    upstreams = build_upstreams(config.providers)
    if gateway.tracer is not None:
        upstreams = {name: gateway.tracer.traced_upstream(u) for name, u in upstreams.items()}
    catalog = ModelCatalog(config, upstreams)
    services = ChainServices(
        RouteTable(),
        gateway.keys,
        catalog,
        gateway.objects,
        gateway.in_flight_ids,
        config,
        gateway.policies,
        gateway.counters,
        gateway.accounts,
        gateway.ledger,
        gateway.audit,
        gateway.metrics,
        gateway.tracer,
        gateway.realtime.secrets,
        gateway.background,
        gateway.overruns,
    )

    def handlers(selector: RowSelector) -> dict[str, LocalHandler]:
        """Routes answered by the gateway itself once the chain admitted them (async, unlike models)."""
        return {
            "videos_list": VideoList(gateway.objects).handle,
            "realtime_client_secrets": ClientSecretIssuer(gateway.realtime.secrets).handle,
            "realtime": RealtimeRelay(
                selector,
                gateway.realtime,
                gateway.accounts,
                gateway.ledger,
                gateway.completions,
                gateway.overruns,
            ).handle,
        }

    chain = default_chain(services, config.plugins.disabled)
    # With Redis the completion hooks really wait: they run in tasks a leaving client cannot cut short.
    # Without, they run inline; the completions still hold the handlers whose client left (the stop waits).
    return ModelRuntime(
        config,
        upstreams,
        catalog,
        chain,
        handlers,
        lambda: gateway.shutting_down,
        gateway.completions,
        complete_inline=gateway.redis is None,
    )


class ModelApiDispatcher:
    """The handler of every /v1 path: each request runs on the runtime current when it arrived."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    @overload
    async def handle(self, request: web.Request) -> web.StreamResponse: ...

    @overload
    async def handle(self, request: FrontRequest) -> web.StreamResponse | FrontStream: ...

    async def handle(self, request: web.Request | FrontRequest) -> web.StreamResponse | FrontStream:
        """Serve a request of aiohttp's router (answered with aiohttp's response) or of the lean front
        (modelgate/proxy/http/front.py, which may be answered with a `FrontStream`)."""
        runtime = self._gateway.runtime
        stats = self._gateway.metrics.stats
        runtime.enter()
        stats.in_flight += 1
        try:
            # A stream's answer is fully relayed when this returns; a plain answer no longer needs upstream.
            return await runtime.model_api.handle(request)
        finally:
            stats.in_flight -= 1
            runtime.leave()
