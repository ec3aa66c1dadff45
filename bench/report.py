"""The benchmark's one table, the targets from the issue, and load-core diagnostics."""

from __future__ import annotations

from dataclasses import dataclass

TARGET_RPS_RATIO = 0.8
TARGET_ADDED_MS = 1.0
TARGET_RSS_MB = 80.0
NOISY_CORES = 0.1  # CPU of other processes (in cores) above which a run counts as disturbed


@dataclass(frozen=True, slots=True)
class TargetResult:
    """Everything measured for one target (direct, passthrough or modelgate)."""

    name: str
    rps: float
    p50_ms: float
    p99_ms: float
    ttfb_p50_ms: float
    cpu_s_per_1k: float | None  # None for the upstream called directly (no proxy process)
    rss_mb: float | None
    errors: int
    proxy_core_busy: float | None  # share of the proxy's cores busy during the load run
    load_core_busy: float  # share of the load generator's + upstream's core busy during the load run
    other_cores: float  # cores' worth of CPU used by processes not started by the benchmark, same window


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_table(results: list[TargetResult], connections: int) -> str:
    """Rows direct / passthrough / modelgate, aligned; added latency is against the direct row."""
    direct = results[0]
    header = (
        "target",
        f"rps@{connections}",
        "p50@1 ms",
        "p99@1 ms",
        "added p50 ms",
        "TTFB p50 ms",
        "CPU s/1k req",
        "RSS MB",
    )
    rows = [header]
    for r in results:
        added = None if r is direct else r.p50_ms - direct.p50_ms
        rows.append(
            (
                r.name,
                f"{r.rps:,.0f}",
                _fmt(r.p50_ms, 3),
                _fmt(r.p99_ms, 3),
                _fmt(added, 3),
                _fmt(r.ttfb_p50_ms, 3),
                _fmt(r.cpu_s_per_1k, 3),
                _fmt(r.rss_mb, 1),
            )
        )
    return align_rows(rows)


def align_rows(rows: list[tuple[str, ...]], separator: str = "  ") -> str:
    """A text table: the first row a header underlined with dashes, the first column left-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        separator.join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, separator.replace("|", "+").join("-" * w for w in widths))
    return "\n".join(lines)


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def render_targets(results: list[TargetResult], connections: int) -> str:
    """The ratio line and each target of the issue with the measured value and a verdict."""
    direct, floor, gateway = results
    ratio = gateway.rps / floor.rps if floor.rps else 0.0
    added_p50 = gateway.p50_ms - direct.p50_ms
    floor_added_p50 = floor.p50_ms - direct.p50_ms
    added_ttfb = gateway.ttfb_p50_ms - direct.ttfb_p50_ms
    floor_added_ttfb = floor.ttfb_p50_ms - direct.ttfb_p50_ms
    rss = gateway.rss_mb or 0.0
    cpu_ratio = (
        floor.cpu_s_per_1k / gateway.cpu_s_per_1k if floor.cpu_s_per_1k and gateway.cpu_s_per_1k else 0.0
    )
    disturbed = (
        "  (disturbed by other processes: trust the CPU-second ratio)"
        if max(floor.other_cores, gateway.other_cores) > NOISY_CORES
        else ""
    )
    return "\n".join(
        [
            f"modelgate / passthrough rps ratio: {ratio:.2f}",
            f"modelgate / passthrough requests per CPU-second: {cpu_ratio:.2f} "
            "(the same ratio from CPU time, which other load on the machine disturbs less)",
            "",
            "targets (from the issue):",
            f"  modelgate >= {TARGET_RPS_RATIO}x the floor's rps at {connections} connections: "
            f"{ratio:.2f}x  [{_verdict(ratio >= TARGET_RPS_RATIO)}]{disturbed}",
            f"  added p50 <= {TARGET_ADDED_MS:g} ms at one connection: {added_p50:+.3f} ms  "
            f"[{_verdict(added_p50 <= TARGET_ADDED_MS)}]  (passthrough: {floor_added_p50:+.3f} ms)",
            f"  added streaming TTFB <= {TARGET_ADDED_MS:g} ms: {added_ttfb:+.3f} ms  "
            f"[{_verdict(added_ttfb <= TARGET_ADDED_MS)}]  (passthrough: {floor_added_ttfb:+.3f} ms)",
            f"  RSS <= {TARGET_RSS_MB:g} MB: {rss:.1f} MB  [{_verdict(rss <= TARGET_RSS_MB)}]",
        ]
    )


def render_diagnostics(
    results: list[TargetResult], proxy_cores: str, load_cores: str, *, shared_cores: bool = False
) -> str:
    """How busy each core set was during the rps runs, what other processes used, and errors seen."""
    lines = [f"core use during the rps runs (proxy cores {proxy_cores}, load+upstream cores {load_cores}):"]
    for r in results:
        proxy = "-" if r.proxy_core_busy is None else f"{r.proxy_core_busy:.0%}"
        lines.append(
            f"  {r.name:<12} proxy {proxy:>4}   load+upstream {r.load_core_busy:>4.0%}   "
            f"other processes {r.other_cores:.2f} cores   errors {r.errors}"
        )
    noisy = [r.name for r in results if r.other_cores > NOISY_CORES]
    if noisy:
        lines.append(
            f"WARNING: other processes on this machine used CPU during {', '.join(noisy)}; "
            "the numbers are disturbed, run again on a quiet machine"
        )
    saturated = [r.name for r in results[1:] if r.load_core_busy > 0.9 and r.other_cores <= NOISY_CORES]
    if saturated and not shared_cores:
        lines.append(
            f"WARNING: the load core was saturated during {', '.join(saturated)}: rps may be understated"
        )
    return "\n".join(lines)
