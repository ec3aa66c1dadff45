"""The per-request instruments kept in plain tables and exported as Prometheus families at scrape time."""

from __future__ import annotations

import gc

from prometheus_client.parser import text_string_to_metric_families

from modelgate.domain.usage import Usage
from modelgate.proxy.observability.metrics import LATENCY_BUCKETS, FrozenHeap, GatewayMetrics


def _samples(metrics: GatewayMetrics) -> dict[tuple[str, frozenset], float]:
    text = metrics.render().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_histogram_buckets_are_cumulative_and_a_value_on_a_bound_counts_in_it() -> None:
    metrics = GatewayMetrics()
    stats = metrics.stats
    for seconds in (0.005, 0.0051, 0.3, 1_000.0):  # on the first bound, just past it, mid-range, past all
        stats.observe(stats.durations, ("chat_completions", "m"), seconds)
    samples = _samples(metrics)

    def bucket(le: str) -> float:
        labels = frozenset({"route": "chat_completions", "model": "m", "le": le}.items())
        return samples[("modelgate_request_duration_seconds_bucket", labels)]

    assert bucket("0.005") == 1
    assert bucket("0.01") == 2
    assert bucket("0.25") == 2 and bucket("0.5") == 3
    assert bucket(str(float(LATENCY_BUCKETS[-1]))) == 3
    assert bucket("+Inf") == 4
    labels = frozenset({"route": "chat_completions", "model": "m"}.items())
    assert samples[("modelgate_request_duration_seconds_count", labels)] == 4
    assert abs(samples[("modelgate_request_duration_seconds_sum", labels)] - 1000.3101) < 1e-9


def test_counters_and_gauges_read_the_tables() -> None:
    metrics = GatewayMetrics()
    stats = metrics.stats
    stats.requests[("chat_completions", "m", "p/m@h", "200")] = 7
    stats.count_tokens("m", Usage(input_tokens=10, output_tokens=4, cached_input_tokens=3))
    stats.count_tokens("m", Usage(input_tokens=1, output_tokens=1))
    stats.in_flight, stats.streams = 2, 1
    samples = _samples(metrics)
    key = {"route": "chat_completions", "model": "m", "row": "p/m@h", "status": "200"}
    assert samples[("modelgate_requests_total", frozenset(key.items()))] == 7
    tokens = {
        kind: samples[("modelgate_tokens_total", frozenset({"model": "m", "kind": kind}.items()))]
        for kind in ("input", "cached_input", "output")
    }
    assert tokens == {"input": 11, "cached_input": 3, "output": 5}
    assert samples[("modelgate_requests_in_flight", frozenset())] == 2
    assert samples[("modelgate_active_streams", frozenset())] == 1


def test_a_scrape_reports_the_frozen_heap_without_walking_it(monkeypatch) -> None:
    # gc.get_freeze_count walks every frozen object: at each scrape that stalled the loop for milliseconds.
    heap = FrozenHeap()
    gc.collect()
    heap.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert heap.objects == frozen > 0
        monkeypatch.setattr("modelgate.proxy.observability.metrics.FROZEN_HEAP", heap)

        def walked() -> int:
            raise AssertionError("a scrape walked the frozen heap")

        monkeypatch.setattr(gc, "get_freeze_count", walked)
        assert _samples(GatewayMetrics())[("modelgate_gc_frozen_objects", frozenset())] == frozen
    finally:
        heap.unfreeze()
    assert heap.objects == 0
