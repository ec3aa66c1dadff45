"""The HTTP server: one aiohttp application on one event loop serving /v1, /api, the web cabinet (/ and
/assets/), /healthz, /readyz, /metrics.

Graceful shutdown on SIGTERM/SIGINT: realtime sessions are closed (1001 going away) and new ones refused,
/readyz answers 503 (for `server.drain_seconds`, still serving), then stop accepting, let in-flight requests
and streams finish within the configured grace period, flush, exit 0.
SIGHUP reloads the config file (modelgate/reload.py). `--workers N` runs N such processes sharing one port
(SO_REUSEPORT); the parent forwards SIGTERM, SIGINT and SIGHUP to them.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import signal
import socket
import sys
from functools import partial

import orjson
from aiohttp import web

from modelgate.cabinet.app import build_cabinet_app
from modelgate.cabinet.services import CabinetServices
from modelgate.cabinet.web_assets import WebAssets, add_web_routes
from modelgate.config import Config
from modelgate.gateway import Gateway
from modelgate.proxy.http.accept import AcceptingSite
from modelgate.proxy.http.client_address import forwarded_client, forwarded_client_middleware
from modelgate.proxy.http.connection_guard import EdgeLimits, GuardedServer, name_the_server
from modelgate.proxy.http.listen import ListenError, address_text, bind_listeners, bound_port
from modelgate.proxy.http.open_files import open_files_text, raise_open_files_limit
from modelgate.proxy.observability.logs import configure_logging, flush_logs, flush_logs_periodically
from modelgate.proxy.observability.metrics import FROZEN_HEAP, metrics_handler
from modelgate.proxy.pipeline.route_table import ROUTES
from modelgate.reload import Reloader
from modelgate.runtime import ModelApiDispatcher

log = logging.getLogger("modelgate.server")

# Python collects its youngest generation once 700 more container objects exist than at the last collection.
# A gateway serving 32 connections swings by ~3,000 of them as requests start and end, while hardly any
# become garbage: at 700 the collector ran every ~40 requests to find next to nothing (4.3 µs a request, 4 %
# of the CPU, and a full collection of the whole heap about once a second).
YOUNG_GENERATION_THRESHOLD = 10_000
# The middle generation is collected once every this many young collections (Python's default: 10). With
# thousands of streams open, each stream's objects outlive a few young collections, so each middle
# collection scanned ~100,000 live objects to find next to nothing: at 3,000 open streams, 90 ms every 2 s
# (4.5 % of the CPU, and a 90 ms stall of every stream). At 100, most of them end before it comes.
MIDDLE_GENERATION_THRESHOLD = 100

# Connections the system may hold accepted for us before we take them: the kernel caps this at its own
# net.core.somaxconn (4,096 by default). A burst of thousands of connects (clients coming back after a restart
# behind a load balancer) outruns a small backlog, and the surplus connects are dropped and retried by their
# clients a second or more later.
LISTEN_BACKLOG = 65_535

GATEWAY = web.AppKey("gateway", Gateway)
MODEL_API = web.AppKey("model_api", ModelApiDispatcher)
# Bodies are bounded per route by the body_limits plugin; this only lifts aiohttp's own 1 MiB default.
_CLIENT_MAX_SIZE = 101 * 1024 * 1024


async def healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"}, dumps=lambda o: orjson.dumps(o).decode())


async def readyz(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    if gateway.shutting_down:
        return web.Response(
            status=503, content_type="application/json", body=b'{"status":"shutting down","checks":{}}'
        )
    checks: dict[str, str] = {}
    server = gateway.config.server
    # Load first: a process at its cap of open requests, or whose loop runs late, should get no new ones.
    lag = gateway.loop_lag.seconds
    lagging = lag > server.max_event_loop_lag_seconds
    checks["event_loop"] = f"lagging: {lag:.3f}s" if lagging else "ok"
    open_requests = gateway.metrics.stats.in_flight
    at_capacity = server.max_open_requests and open_requests >= server.max_open_requests
    checks["capacity"] = f"at capacity: {open_requests} open requests" if at_capacity else "ok"
    try:
        await asyncio.wait_for(gateway.db.ping(), timeout=2)
        checks["storage"] = "ok"
    except Exception as exc:
        checks["storage"] = f"unavailable: {exc.__class__.__name__}"
    if gateway.redis is not None:
        try:
            await asyncio.wait_for(gateway.redis.ping(), timeout=2)
            checks["redis"] = "ok"
        except Exception as exc:
            checks["redis"] = f"unavailable: {exc.__class__.__name__}"
            if gateway.config.redis.outage_mode == "degraded":  # it serves within its shares meanwhile
                checks["redis"] = f"degraded: {exc.__class__.__name__}"
    ready = all(v == "ok" or v.startswith("degraded: ") for v in checks.values())
    return web.Response(
        status=200 if ready else 503,
        content_type="application/json",
        body=orjson.dumps(
            {
                "status": "ready" if ready else "not ready",
                "checks": checks,
                "ledger_backlog": gateway.ledger.backlog,  # usage rows not yet in the database
            }
        ),
    )


def build_app(gateway: Gateway) -> web.Application:
    """The root application: the model API at /v1, the cabinet at /api and its web app at / and /assets/,
    health endpoints."""
    trusted_proxies = gateway.config.server.trusted_proxies
    # Only when configured: a middleware costs every request, and the default trusts no forwarded header.
    middlewares = [forwarded_client_middleware(trusted_proxies)] if trusted_proxies else []
    app = web.Application(client_max_size=_CLIENT_MAX_SIZE, middlewares=middlewares)
    app[GATEWAY] = gateway
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler(gateway))
    model_api = app[MODEL_API] = ModelApiDispatcher(gateway)
    handle = model_api.handle
    # Served before the router by GatewayRunner; these routes keep the paths reachable through the router
    # too (requests with `Expect: 100-continue`, and when a middleware must see every request).
    # The model API's fixed paths as plain resources, which aiohttp finds by a dict lookup; the catch-all
    # below (a regex tried in order) then only sees ids, unknown paths and the rest.
    for path in sorted({route.path for route in ROUTES if "{" not in route.path}):
        app.router.add_route("*", path, handle)
    app.router.add_route("*", "/v1", handle)
    app.router.add_route("*", "/v1/{tail:.*}", handle)
    services = CabinetServices(
        gateway.config, gateway.db, gateway.keys, gateway.accounts, accounts=gateway.accounts
    )
    gateway.follow_config(lambda config: setattr(services, "config", config))
    cabinet = build_cabinet_app(services)
    app.add_subapp("/api", cabinet)
    add_web_routes(app.router, WebAssets.load())
    return app


class GatewayRunner(web.AppRunner):
    """The root application's runner: connections start on the lean front (modelgate/proxy/http/front.py),
    which serves plain model API requests and hands the rest to aiohttp under the guard
    (modelgate/proxy/http/connection_guard.py); there the model API is still served ahead of aiohttp's router.

    Every model API request is `/v1` or under it and has one handler, so routing it through the
    application (router lookup, match info, the middleware wrapper that sub-applications add to every
    handler) is pure cost on the hot path. Only when the application has no middleware of its own (none
    unless `server.trusted_proxies` is set) and the request does not expect `100 Continue` (the
    application's expect handler sends that).
    """

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        app = self.app
        gateway = app[GATEWAY]
        server = GuardedServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            limits=EdgeLimits.from_config(gateway.config.server),
            **plain._kwargs,
        )
        # New connections get the limits of a reloaded config; open ones keep theirs.
        gateway.follow_config(lambda config: setattr(server, "limits", EdgeLimits.from_config(config.server)))
        model_api = app[MODEL_API].handle
        trusted = gateway.config.server.trusted_proxies
        if gateway.config.server.model_api_front and len(app.middlewares) == (1 if trusted else 0):
            # Plain model API requests never reach aiohttp (modelgate/proxy/http/front.py); the front reads
            # the forwarded client address itself.
            server.front = model_api
            server.front_client = forwarded_client(trusted) if trusted else None
        if app.middlewares:
            return server
        through_app = server.request_handler

        async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
            path = request.path
            if (
                (path == "/v1" or path.startswith("/v1/"))
                and "expect" not in request.headers
                and isinstance(request, web.Request)  # the application's request factory makes every one
            ):
                return await model_api(request)
            return await through_app(request)

        server.request_handler = dispatch
        return server


async def serve(
    config: Config,
    *,
    host: str,
    port: int,
    workers: int = 1,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    sock: socket.socket | None = None,
    freeze_heap: bool = False,
    open_files: tuple[int, int] | None = None,
) -> None:
    """Run one gateway process until SIGTERM/SIGINT (or `stop` is set), then shut down gracefully.
    `freeze_heap`: once started, `freeze_startup_heap` (the process is the gateway's own); `open_files`: the
    open-files limit before and after the process raised it, logged once it listens."""
    # Bound first: a taken port is one clear error before anything starts or says it is ready.
    listeners = [sock] if sock is not None else bind_listeners(host, port, reuse_port=workers > 1)
    try:
        gateway = await Gateway.start(config, workers=workers)
    except BaseException:
        for listener in listeners:
            listener.close()
        raise
    name_the_server()
    app = build_app(gateway)
    runner = GatewayRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=config.server.shutdown_grace_seconds,
        # request bodies are decoded within their limits (modelgate/proxy/http/body_decoding.py)
        auto_decompress=False,
    )
    await runner.setup()
    log_flusher = asyncio.get_running_loop().create_task(flush_logs_periodically(), name="log-flush")
    realtime_closed: asyncio.Task | None = None
    if freeze_heap:
        freeze_startup_heap()  # before the first connection, which would wait for its full collection
    try:
        for listener in listeners:
            await AcceptingSite(runner, listener, backlog=LISTEN_BACKLOG).start()
        gateway.metrics.watch_listeners(listeners)
        where = address_text(host, bound_port(listeners))  # the port the system chose for --port 0
        log.info("modelgate listening on http://%s (pid %d)", where, os.getpid())
        if open_files is not None:
            log.info(open_files_text(*open_files))
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        reloader = Reloader(gateway)
        for signum, handler in (
            (signal.SIGTERM, stop.set),
            (signal.SIGINT, stop.set),
            (signal.SIGHUP, partial(_reload, reloader, freeze_heap)),
        ):
            try:
                loop.add_signal_handler(signum, handler)
            except (NotImplementedError, RuntimeError):  # not the main thread (tests run us in a thread)
                pass
        if ready is not None:
            ready.set()
        await stop.wait()
        gateway.shutting_down = True
        # Realtime sessions are told at once (1001 going away), not waited out: see _close_realtime.
        realtime_closed = loop.create_task(_close_realtime(gateway), name="close-realtime")
        drain = gateway.config.server.drain_seconds
        if drain > 0:
            log.info("draining: /readyz answers 503; still serving for %gs", drain)
            await asyncio.sleep(drain)
        log.info(
            "shutting down: waiting up to %gs for in-flight requests", config.server.shutdown_grace_seconds
        )
    finally:
        await (realtime_closed or _close_realtime(gateway))
        await runner.cleanup()
        await gateway.stop()
        log.info("stopped")
        log_flusher.cancel()
        flush_logs()


def freeze_startup_heap() -> None:
    """Keep the garbage collector off the request path: what the process built to start (config, catalog,
    plugin chain, compiled rules: ~77,000 objects) leaves its scans for good (`gc.freeze`), and the youngest
    generation may grow to YOUNG_GENERATION_THRESHOLD, so collections follow garbage cycles building up, not
    requests coming and going. Process-wide: for the gateway's own processes, never for a program that runs
    a gateway among other things (the tests)."""
    gc.collect()
    FROZEN_HEAP.freeze()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, MIDDLE_GENERATION_THRESHOLD, gc.get_threshold()[2])


def _reload(reloader: Reloader, refreeze: bool) -> None:
    if reloader.reload() and refreeze:
        FROZEN_HEAP.unfreeze()  # the replaced runtime's reference cycles, frozen at start, can be collected
        freeze_startup_heap()


async def _close_realtime(gateway: Gateway) -> None:
    """Close the realtime sessions and wait (within the grace period) until their responses are settled and
    written. Before aiohttp's shutdown: from its start it drops every byte a client sends, WebSocket frames
    included, so a session could no longer hear its client's `response.create` or close."""
    await gateway.realtime.sessions.close_all(gateway.config.server.shutdown_grace_seconds)


def run(config: Config, *, host: str, port: int, workers: int) -> int:
    """Blocking entry point of `modelgate serve`; returns the exit code. Raises ListenError when the
    address cannot be bound."""
    if workers <= 1:
        _run_loop(config, host, port, 1)
        return 0
    for probe in bind_listeners(host, port, reuse_port=True):  # a taken port: one error, before any worker
        probe.close()
    return _run_workers(config, host, port, workers)


def _run_loop(config: Config, host: str, port: int, workers: int) -> None:
    # Until serve() installs the reload handler, a SIGHUP must not end the process (its default action).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Each open stream holds two descriptors; before the connection cap is clamped to the limit (serve).
    open_files = raise_open_files_limit()
    main = serve(config, host=host, port=port, workers=workers, freeze_heap=True, open_files=open_files)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def _worker_main(config: Config, host: str, port: int, workers: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent turns Ctrl-C into one SIGTERM per worker
    configure_logging(config.logging)  # a spawned process starts with Python's default logging
    try:
        _run_loop(config, host, port, workers)
    except ListenError as exc:  # the port was taken after the parent's check
        print(f"modelgate: {exc}", file=sys.stderr)
        sys.exit(1)


def _run_workers(config: Config, host: str, port: int, workers: int) -> int:
    """N processes bound to one port with SO_REUSEPORT; the parent forwards SIGTERM/SIGINT and waits."""
    context = multiprocessing.get_context("spawn")
    # Workers inherit an ignored SIGHUP through exec, so a reload signal forwarded while one is still
    # starting cannot kill it (its default action); each worker installs its reload handler when serving.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    processes = [
        context.Process(target=_worker_main, args=(config, host, port, workers), daemon=False)
        for _ in range(workers)
    ]
    for process in processes:
        process.start()

    def forward(signum: int, _frame: object) -> None:
        for process in processes:
            if process.is_alive() and process.pid:
                os.kill(process.pid, signal.SIGHUP if signum == signal.SIGHUP else signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, forward)  # each worker re-reads the config file
    for process in processes:
        process.join()
    failed = [p.exitcode for p in processes if p.exitcode not in (0, -signal.SIGTERM)]
    if failed:
        print(f"modelgate: {len(failed)} worker(s) exited with an error: {failed}", file=sys.stderr)
        return 1
    return 0
