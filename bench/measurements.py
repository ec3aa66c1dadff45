"""Single-connection measurements: latency percentiles and streaming time to the first event."""

from __future__ import annotations

import time
from dataclasses import dataclass

from keepalive_client import Exchange, KeepAliveClient


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile of `values` (which need not be sorted)."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered)) - 1))
    return ordered[rank]


@dataclass(frozen=True, slots=True)
class Sequential:
    """Per-request times (ms) of N sequential requests on one keep-alive connection."""

    total_ms: list[float]
    first_body_ms: list[float]
    errors: int

    def p(self, pct: float) -> float:
        return percentile(self.total_ms, pct)

    def ttfb(self, pct: float) -> float:
        return percentile(self.first_body_ms, pct)


def sequential(
    port: int, request: bytes, count: int | None = None, *, seconds: float | None = None
) -> Sequential:
    """Send `request` one after the other over one connection: `count` times, or for `seconds` (at least
    once)."""
    total, first, errors = [], [], 0
    deadline = time.monotonic() + (seconds or 0.0)
    with KeepAliveClient(port) as client:
        while len(total) < count if count is not None else (not total or time.monotonic() < deadline):
            exchange = client.exchange(request)
            if exchange.status != 200:
                errors += 1
            total.append((exchange.done_ns - exchange.sent_ns) / 1e6)
            first.append((exchange.first_body_ns - exchange.sent_ns) / 1e6)
    return Sequential(total, first, errors)


def check_answers(name: str, port: int, plain: bytes, stream: bytes) -> None:
    """Fail loudly unless the target answers both request shapes the way the benchmark expects."""
    with KeepAliveClient(port) as client:
        answers: list[tuple[str, Exchange, bytes]] = [
            ("non-stream", client.exchange(plain), b'"usage"'),
            ("stream", client.exchange(stream), b"data: [DONE]"),
        ]
    for shape, exchange, marker in answers:
        if exchange.status != 200 or marker not in exchange.body:
            raise RuntimeError(
                f"{name}: unexpected {shape} answer {exchange.status}: {exchange.body[:300]!r}"
            )
