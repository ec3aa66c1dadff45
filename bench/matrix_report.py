"""The matrix's printed report: one side-by-side table, the reference rows, workers, Redis and targets."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import aiohttp
from report import NOISY_CORES, TARGET_RSS_MB, align_rows
from workload import chat_body

_SCRIPT_COMMANDS = frozenset({"eval", "evalsha", "fcall"})  # and their _ro variants

if TYPE_CHECKING:
    from matrix import CaseRun, MatrixResult


def _table(rows: list[tuple[str, ...]]) -> str:
    return align_rows(rows, " | ")


def _rps(case: CaseRun, floor: CaseRun | None = None) -> str:
    rps = case.run.load.rps
    text = f"{rps:,.0f}"
    if floor is not None and floor.run.load.rps:
        text += f" ({rps / floor.run.load.rps:.2f}x)"
    return text


def _added(case: CaseRun, direct: CaseRun) -> str:
    """The probe's latency minus the upstream's own at the same load: p50/p99 in ms."""
    mine, base = case.latency, direct.latency
    return f"{mine.p(50) - base.p(50):+.3f}/{mine.p(99) - base.p(99):+.3f}"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _main_table(result: MatrixResult) -> str:
    rows = [
        (
            "case",
            "floor rps",
            "embedded rps (x)",
            "production rps (x)",
            "added p50/p99 ms emb",
            "prod",
            "CPU s/1k emb",
            "prod",
            "RSS MB emb",
            "prod",
        )
    ]
    for case in result.cases:
        direct, floor = result.runs["direct"][case.name], result.runs["floor"][case.name]
        emb, prod = result.runs["embedded"][case.name], result.runs["production"][case.name]
        rows.append(
            (
                case.name,
                _rps(floor),
                _rps(emb, floor),
                _rps(prod, floor),
                _added(emb, direct),
                _added(prod, direct),
                _num(emb.run.cpu_s_per_1k, 3),
                _num(prod.run.cpu_s_per_1k, 3),
                _num(emb.run.rss_mb, 1),
                _num(prod.run.rss_mb, 1),
            )
        )
    return _table(rows)


def _reference_table(result: MatrixResult) -> str:
    rows = [
        (
            "case",
            "direct rps",
            "direct p50/p99 ms",
            "floor added p50/p99 ms",
            "floor CPU s/1k",
            "floor RSS MB",
        )
    ]
    for case in result.cases:
        direct, floor = result.runs["direct"][case.name], result.runs["floor"][case.name]
        latency = f"{direct.latency.p(50):.3f}/{direct.latency.p(99):.3f}"
        rows.append(
            (
                case.name,
                _rps(direct),
                latency,
                _added(floor, direct),
                _num(floor.run.cpu_s_per_1k, 3),
                _num(floor.run.rss_mb, 1),
            )
        )
    return _table(rows)


def _workers_table(result: MatrixResult, name: str) -> str:
    rows = [("case", "rps", "rps per worker", "rps per gateway core", "CPU s/1k", "largest process MB")]
    for case_name, case in result.runs[name].items():
        run = case.run
        per_core = 1000 / run.cpu_s_per_1k if run.cpu_s_per_1k else None
        rows.append(
            (
                case_name,
                _rps(case),
                f"{run.load.rps / result.workers:,.0f}",
                _num(per_core, 0),
                _num(run.cpu_s_per_1k, 3),
                _num(run.rss_mb, 1),
            )
        )
    return _table(rows)


def _redis_line(result: MatrixResult) -> str:
    tally = result.redis
    if not tally.requests:
        return "Redis commands per request (production): no requests measured"
    total = sum(tally.calls.values()) / tally.requests
    top = sorted(tally.calls.items(), key=lambda item: -item[1])[:6]
    detail = ", ".join(f"{name} {calls / tally.requests:.2f}" for name, calls in top) or "none"
    scripts = sum(calls for name, calls in tally.calls.items() if name.split("_")[0] in _SCRIPT_COMMANDS)
    line = (
        f"Redis commands per request (production, INFO commandstats over the {tally.requests:,} requests of "
        f"its measured runs): {total:.2f}  ({detail}); commands run inside Lua scripts count too, "
        f"script calls: {scripts / tally.requests:.2f} per request"
    )
    if tally.foreign_clients:
        line += (
            f"\nWARNING: up to {tally.foreign_clients} other Redis clients were connected: the counts are "
            "server-wide and include their commands (run on a quiet Redis, or set MODELGATE_BENCH_REDIS)"
        )
    return line


def _targets(result: MatrixResult) -> list[str]:
    rss = {
        name: max((case.run.rss_mb or 0.0) for case in runs.values())
        for name, runs in result.runs.items()
        if name not in ("direct", "floor")
    }
    worst = max(rss.values())
    verdict = "ok" if worst <= TARGET_RSS_MB else "MISSED"
    detail = ", ".join(f"{name} {value:.1f}" for name, value in rss.items())
    lines = [f"  RSS <= {TARGET_RSS_MB:g} MB per worker: largest {worst:.1f} MB  [{verdict}]  ({detail})"]
    for name, total in result.rss_total.items():
        lines.append(f"  ({name}: all workers + supervisor together {total:.1f} MB)")
    return lines


def _warnings(result: MatrixResult) -> list[str]:
    lines = []
    for name, runs in result.runs.items():
        errors = sum(case.run.load.errors + case.latency.errors for case in runs.values())
        noisy = [case_name for case_name, case in runs.items() if case.run.other_cores > NOISY_CORES]
        if errors:
            lines.append(f"WARNING: {name}: {errors} failed requests (non-2xx or socket errors)")
        if noisy:
            lines.append(
                f"WARNING: {name}: other processes used CPU during {', '.join(noisy)}; numbers disturbed"
            )
    return lines


def render_matrix(result: MatrixResult, args: argparse.Namespace, load_name: str) -> str:
    """The whole matrix report as text."""
    workers_name = f"production x{result.workers}"
    parts = [
        f"\nmodelgate matrix: {args.duration:g}s per run, {len(chat_body())} B chat body, stream = 11 SSE "
        f"events, load: {load_name}; python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}",
        "floor = bare aiohttp passthrough; embedded = SQLite, no Redis; production = PostgreSQL + Redis; "
        "one process each, alone on the first core",
        "added p50/p99 = latency of one client's sequential requests while wrk keeps the case's other "
        "connections busy, minus the upstream's own (direct) measured the same way; (x) = ratio to the floor",
        "",
        _main_table(result),
        "",
        "reference rows (same runs):",
        _reference_table(result),
        "",
        f"production, --workers {result.workers} (the workers share every core with the load generator; "
        "rps per gateway core = requests per CPU-second of all gateway processes):",
        _workers_table(result, workers_name),
        "",
        _redis_line(result),
        "",
        "targets:",
        *_targets(result),
    ]
    parts += _warnings(result)
    if result.problems:
        parts += [
            "",
            "gateway log warnings/errors (first few per phase):",
            *(f"  {p}" for p in result.problems),
        ]
    return "\n".join(parts)
