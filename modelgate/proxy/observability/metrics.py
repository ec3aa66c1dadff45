"""Prometheus metrics of one gateway process, served at GET /metrics.

Every process keeps its own CollectorRegistry (never prometheus-client's global one), so several gateways
in one Python process (tests) never collide. With `--workers N` each worker has its own registry and a
scrape of the shared port reaches whichever worker accepted the connection: scrape one worker per
instance (see docs/deploy.md), or sum per instance in PromQL.
"""

from __future__ import annotations

import gc
import hmac
import os
import socket
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Protocol

import orjson
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Info,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from modelgate.domain.usage import Usage
from modelgate.proxy.http.accept import listen_queue
from modelgate.proxy.upstream.http_client import POOL_WAIT_BUCKETS

if TYPE_CHECKING:
    from modelgate.proxy.observability.loop_lag import LoopLag
    from modelgate.proxy.upstream.providers import Upstream

if TYPE_CHECKING:
    from modelgate.config import Config
    from modelgate.domain.ledger import LedgerWriter
    from modelgate.domain.local_shares import LocalShares

# Model calls range from a cached embedding (milliseconds) to a long reasoning stream (minutes).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_INF = float("inf")


class RequestStats:
    """The instruments every request moves, as plain numbers in dicts, exported at scrape time.

    prometheus-client takes a lock per increment (ten per request here); one event loop per process needs
    none, and a dict update costs a fraction of a labelled child's `inc`. Histograms keep one count per
    bucket (not cumulative) and the sum; the scrape adds them up. Labels come from the config, never from
    client input, so the tables stay small.
    """

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str, str], int] = {}  # (route, model, row, status)
        self.durations: dict[tuple[str, str], list[float]] = {}  # (route, model) -> bucket counts + sum
        self.first_bytes: dict[tuple[str, str], list[float]] = {}
        self.tokens: dict[tuple[str, str], int] = {}  # (model, kind)
        self.in_flight = 0
        self.streams = 0

    @staticmethod
    def observe(table: dict[tuple[str, str], list[float]], labels: tuple[str, str], seconds: float) -> None:
        cells = table.get(labels)
        if cells is None:
            cells = table[labels] = [0] * (len(LATENCY_BUCKETS) + 1) + [0.0]
        cells[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        cells[-1] += seconds

    def count_tokens(self, model: str, usage: Usage) -> None:
        tokens = self.tokens
        for kind, amount in (
            ("input", usage.input_tokens),
            ("cached_input", usage.cached_input_tokens),
            ("output", usage.output_tokens),
        ):
            tokens[(model, kind)] = tokens.get((model, kind), 0) + amount

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "modelgate_requests",
            "Model API requests by route, model, routing row (provider/upstream model@host) and status.",
            labels=("route", "model", "row", "status"),
        )
        for labels, value in self.requests.items():
            requests.add_metric(labels, value)
        yield requests
        yield _histogram(
            "modelgate_request_duration_seconds",
            "Time from the request's arrival to the end of its answer (whole stream included).",
            self.durations,
        )
        yield _histogram(
            "modelgate_time_to_first_byte_seconds",
            "Time from the request's arrival to the first byte of an upstream answer sent to the client.",
            self.first_bytes,
        )
        tokens = CounterMetricFamily(
            "modelgate_tokens",
            "Tokens metered from upstream answers, by model and kind (input, cached_input, output).",
            labels=("model", "kind"),
        )
        for labels, value in self.tokens.items():
            tokens.add_metric(labels, value)
        yield tokens
        yield GaugeMetricFamily(
            "modelgate_requests_in_flight", "Model API requests being handled now.", value=self.in_flight
        )
        yield GaugeMetricFamily(
            "modelgate_active_streams", "Streamed answers being relayed now.", value=self.streams
        )

    def describe(self) -> Iterator[Metric]:
        return self.collect()


class UpstreamPoolStats:
    """The connection pools of the running config's upstreams, read at scrape time: connections in use and
    idle, requests waiting for one, how long they waited and how many gave up (`pool_wait_timeout`).

    The pools keep plain numbers; nothing here runs per request."""

    def __init__(self, upstreams: Callable[[], Mapping[str, Upstream]]) -> None:
        self._upstreams = upstreams

    def collect(self) -> Iterator[Metric]:
        connections = GaugeMetricFamily(
            "modelgate_upstream_connections",
            "Connections of this process to each upstream, in use (carrying a request) or idle (kept alive).",
            labels=("upstream", "state"),
        )
        limits = GaugeMetricFamily(
            "modelgate_upstream_pool_limit",
            "The operator's cap on connections to each upstream (pool_size); absent: no cap.",
            labels=("upstream",),
        )
        waiting = GaugeMetricFamily(
            "modelgate_upstream_pool_waiting",
            "Requests waiting now for a connection to each upstream (its pool_size cap is full).",
            labels=("upstream",),
        )
        waits = HistogramMetricFamily(
            "modelgate_upstream_pool_wait_seconds",
            "How long requests that found an upstream's pool full waited for a connection.",
            labels=("upstream",),
        )
        timeouts = CounterMetricFamily(
            "modelgate_upstream_pool_wait_timeouts",
            "Requests that found no connection to an upstream within pool_wait_timeout (failed over or 503).",
            labels=("upstream",),
        )
        for name, upstream in self._upstreams().items():
            pool = upstream.pool
            if pool is None:
                continue
            connections.add_metric((name, "in_use"), pool.busy)
            connections.add_metric((name, "idle"), pool.idle)
            if pool.limit is not None:
                limits.add_metric((name,), pool.limit)
            waiting.add_metric((name,), pool.waiting)
            cumulative, buckets = 0, []
            for bound, count in zip((*POOL_WAIT_BUCKETS, _INF), pool.wait_counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == _INF else floatToGoString(bound), cumulative))
            waits.add_metric((name,), buckets, sum_value=pool.wait_seconds)
            timeouts.add_metric((name,), pool.wait_timeouts)
        yield from (connections, limits, waiting, waits, timeouts)

    def describe(self) -> Iterator[Metric]:
        return self.collect()


def _histogram(name: str, documentation: str, table: dict[tuple[str, str], list[float]]) -> Metric:
    family = HistogramMetricFamily(name, documentation, labels=("route", "model"))
    for labels, cells in table.items():
        cumulative, buckets = 0, []
        for bound, count in zip((*LATENCY_BUCKETS, _INF), cells, strict=False):
            cumulative += count
            buckets.append(("+Inf" if bound == _INF else floatToGoString(bound), cumulative))
        family.add_metric(labels, buckets, sum_value=cells[-1])
    return family


class FrozenHeap:
    """What `gc.freeze` took out of the collector's scans, counted once, as it freezes: reading
    `gc.get_freeze_count` walks every frozen object (3 ms for 84,000 here), and at every scrape that stalled
    the event loop, every open stream's next chunk with it (2 % of a loaded gateway's CPU at one scrape a
    second)."""

    __slots__ = ("objects",)

    def __init__(self) -> None:
        self.objects = 0

    def freeze(self) -> None:
        gc.freeze()
        self.objects = gc.get_freeze_count()

    def unfreeze(self) -> None:
        gc.unfreeze()
        self.objects = 0


FROZEN_HEAP = FrozenHeap()


class GatewayMetrics:
    """The instruments of one process; plugins and the server update them, /metrics renders them."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        # Which process answered a scrape (with --workers N, any of them may): cpu, memory, fds, start time.
        ProcessCollector(registry=registry)
        GCCollector(registry=registry)  # python_gc_*: collections by generation, objects collected
        Gauge(
            "modelgate_gc_frozen_objects",
            "Objects built at start that the garbage collector no longer scans (0: not frozen).",
            registry=registry,
        ).set_function(lambda: FROZEN_HEAP.objects)
        Info("modelgate_worker", "The gateway process that answered this scrape.", registry=registry).info(
            {"pid": str(os.getpid())}
        )
        self.stats = RequestStats()
        registry.register(self.stats)
        self.upstream_errors = Counter(
            "modelgate_upstream_errors",
            "Failed tries of a routing row: unreachable, an HTTP status that fails over, or a broken stream.",
            ["provider", "row", "reason"],
            registry=registry,
        )
        self.failovers = Counter(
            "modelgate_failovers",
            "Tries moved on to another routing row after a failure, by model.",
            ["model"],
            registry=registry,
        )
        self.rejections = Counter(
            "modelgate_rejections",
            "Requests the gateway itself refused (401, 402 balance or budget, 403, 429 rate limit, ...).",
            ["status", "reason"],
            registry=registry,
        )
        self.content_actions = Counter(
            "modelgate_content_policy_actions",
            "Content rules that blocked, redacted or flagged a request",
            ["rule", "action", "where"],
            registry=registry,
        )
        self.charge_over_reservation = Counter(
            "modelgate_charge_over_reservation",
            "Requests charged more than their reservation (the provider billed past the gateway's bound).",
            ["model"],
            registry=registry,
        )
        self.charge_over_reservation_micros = Counter(
            "modelgate_charge_over_reservation_micros",
            "Micro-units charged over the reservations of those requests.",
            ["model"],
            registry=registry,
        )
        self.charge_implausible_usage = Counter(
            "modelgate_charge_implausible_usage",
            "Requests whose reported usage was beyond what the model can produce (charged at that bound).",
            ["model"],
            registry=registry,
        )
        self.realtime_sessions = Gauge(
            "modelgate_realtime_sessions",
            "Open realtime (WebSocket) sessions of this process.",
            registry=registry,
        )
        self.ledger_queue_depth = Gauge(
            "modelgate_ledger_queue_depth",
            "Usage entries waiting in memory for the next ledger flush.",
            registry=registry,
        )
        self.ledger_backlog = Gauge(
            "modelgate_ledger_backlog_rows",
            "Usage rows not yet in the database (in memory or only in the spool); grows during an outage.",
            registry=registry,
        )
        self.ledger_flush_lag = Gauge(
            "modelgate_ledger_flush_lag_seconds",
            "Seconds since the ledger last flushed successfully (about the flush interval when healthy; "
            "grows while storage refuses writes).",
            registry=registry,
        )
        self.config_reloads = Counter(
            "modelgate_config_reloads",
            "Config reloads on SIGHUP: applied, or refused (the previous config kept).",
            ["result"],
            registry=registry,
        )
        for result in ("applied", "refused"):
            self.config_reloads.labels(result)

    def count_overrun(self, model: str, over_micros: int, implausible: bool) -> None:
        """One request charged over its reservation (`over_micros` > 0) and/or with implausible usage."""
        if over_micros:
            self.charge_over_reservation.labels(model).inc()
            self.charge_over_reservation_micros.labels(model).inc(over_micros)
        if implausible:
            self.charge_implausible_usage.labels(model).inc()

    def watch_ledger(self, ledger: LedgerWriter) -> None:
        """Read the ledger's queue depth, backlog and flush lag at every scrape."""
        self.ledger_queue_depth.set_function(lambda: ledger.queued)
        self.ledger_backlog.set_function(lambda: ledger.backlog)
        self.ledger_flush_lag.set_function(lambda: max(0.0, time.time() - ledger.last_flush_at))

    def watch_upstreams(self, upstreams: Callable[[], Mapping[str, Upstream]]) -> None:
        """Read the connection pools of `upstreams()` (the running config's: a reload swaps them) at every
        scrape."""
        self.registry.register(UpstreamPoolStats(upstreams))

    def watch_loop_lag(self, lag: LoopLag) -> None:
        """Read the event loop's lag at every scrape."""
        Gauge(
            "modelgate_event_loop_lag_seconds",
            "How late the event loop runs timers (worst of the last ~2 s): every open stream's next chunk "
            "waits about this long; /readyz answers 503 past server.max_event_loop_lag_seconds.",
            registry=self.registry,
        ).set_function(lambda: lag.seconds)

    def watch_listeners(self, listeners: Sequence[socket.socket]) -> None:
        """Read the accept queues of the worker's listening sockets at every scrape."""
        Gauge(
            "modelgate_listen_queue_connections",
            "Connections the system has accepted on this worker's listening sockets that the worker has not "
            "taken yet: above 0 for long, clients wait for their connection (the worker is out of CPU).",
            registry=self.registry,
        ).set_function(lambda: sum(listen_queue(sock) for sock in listeners))

    def watch_outage_shares(self, shares: LocalShares) -> None:
        """Read this process's shares of the headroom in a Redis outage (degraded mode) at every scrape."""
        registry = self.registry
        Gauge(
            "modelgate_redis_outage_degraded",
            "1 while Redis is unreachable and this process admits against its shares (outage = degraded).",
            registry=registry,
        ).set_function(lambda: 1 if shares.active else 0)
        Gauge(
            "modelgate_redis_outage_share_used_ratio",
            "How far into its share of the most used money counter this process is during a Redis outage "
            "(reserved and spent over the share; 1: full, further requests on it get 402).",
            registry=registry,
        ).set_function(shares.used_ratio)
        Gauge(
            "modelgate_redis_outage_known_counters",
            "Money counters whose headroom this process last read from Redis: an outage gives it a share of "
            "each (a counter it does not know refuses with 503).",
            registry=registry,
        ).set_function(lambda: shares.known)
        Gauge(
            "modelgate_redis_outage_processes",
            "Live gateway processes at the last reading: each share is this part of a counter's headroom.",
            registry=registry,
        ).set_function(lambda: shares.processes)
        Gauge(
            "modelgate_redis_outage_share_micros",
            "This process's shares of every money counter's headroom during a Redis outage (micro-units).",
            registry=registry,
        ).set_function(lambda: shares.totals()[0])
        Gauge(
            "modelgate_redis_outage_used_micros",
            "Reserved and spent of those shares so far (micro-units); settled into Redis when it is back.",
            registry=registry,
        ).set_function(lambda: shares.totals()[1])

    def watch_realtime(self, sessions: Sized) -> None:
        """Count the open realtime sessions at every scrape."""
        self.realtime_sessions.set_function(lambda: len(sessions))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _authorized(request: web.Request, token: str) -> bool:
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())


class MetricsSource(Protocol):
    """What the /metrics endpoint reads of the running gateway (modelgate.gateway.Gateway)."""

    @property
    def config(self) -> Config: ...
    @property
    def metrics(self) -> GatewayMetrics: ...


def metrics_handler(gateway: MetricsSource) -> Callable[[web.Request], Awaitable[web.Response]]:
    """GET /metrics: open when `server.metrics_token` is unset, else `Authorization: Bearer <token>`."""

    async def metrics(request: web.Request) -> web.Response:
        # Read per request, so a token changed by a config reload applies at once.
        token = gateway.config.server.metrics_token
        if token is not None and not _authorized(request, token):
            return web.Response(
                status=401,
                body=orjson.dumps({"error": "metrics require Authorization: Bearer <server.metrics_token>"}),
                content_type="application/json",
                headers={"www-authenticate": 'Bearer realm="metrics"'},
            )
        return web.Response(body=gateway.metrics.render(), headers={"content-type": CONTENT_TYPE_LATEST})

    return metrics
