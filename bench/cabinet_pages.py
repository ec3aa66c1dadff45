"""How fast the web cabinet's pages load on the embedded defaults (SQLite) with 10,000 ledger rows.

Starts `modelgate serve` (a subprocess, embedded defaults, a fresh data folder), registers an organization
from the gateway's page (cookie session), writes 10,000 usage rows for it (through the ledger's flush) spread
over 60 days, 6 models, 8 keys and 3 systems, then loads each page 20 times the way the app does: every
request one page makes, one after another over one keep-alive connection (a browser runs them in parallel,
so this overstates a load).
Prints the median and the slowest load per page and whether the median is under 300 ms.

    /work/venv/bin/python bench/cabinet_pages.py [--loads 20] [--rows 10000]

With `--requests-log` it measures instead what issue #38 asks of the request log and the overview: the
server's time for each call the overview page makes (GET /api/overview, /api/meters, and the month's usage by
day and model that the chart reads) and for all three, for usage reports and for the requests page's first
page (unfiltered and by each filter) with 100,000 ledger rows of realistic statuses, written through the
ledger's own flush (which also keeps the daily sums the usage reports read); on SQLite and, given `--postgres
URL` (a server where it may create and drop a scratch database), on PostgreSQL; one table for both, against a
150 ms budget, after each backend's plans of the request-log queries and of the overview page's reads
(EXPLAIN ANALYZE on PostgreSQL, EXPLAIN QUERY PLAN on SQLite):

    /work/venv/bin/python bench/cabinet_pages.py --requests-log --postgres postgresql://127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import httpx

from modelgate.cabinet.request_log_repository import RequestFilter, newest_requests
from modelgate.cabinet.usage_repository import request_totals, usage_breakdown, usage_by
from modelgate.cabinet.web_assets import INDEX, WebAssets
from modelgate.domain.charges import charge_row
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.usage import Usage
from modelgate.storage import Database, open_database

BUDGET_MS = 300.0
LOG_BUDGET_MS = 150.0
# How the log's rows end, as (weight, status, outcome): mostly served, a share refused, a few failures.
ENDINGS = ((85, 200, "completed"), (9, 429, "refused"), (3, 402, "refused"), (2, 502, "upstream_error"),
           (1, 200, "client_closed"))  # fmt: skip
MODELS = ("mock-chat", "gpt-4o", "gpt-4o-mini", "claude-sonnet", "gemini-flash", "llama-70b")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(folder: Path, storage: str | None = None) -> tuple[subprocess.Popen, str, str]:
    port = _free_port()
    command = [sys.executable, "-m", "modelgate", "serve", "--port", str(port)]
    if storage is None:
        # The embedded defaults keep their SQLite file (and the ledger's spool) in the working directory.
        storage = f"sqlite:///{folder / 'modelgate.db'}"
    else:  # the embedded defaults with another storage
        defaults = (Path(__file__).parents[1] / "modelgate" / "config" / "defaults.toml").read_text()
        config = folder / "modelgate.toml"
        config.write_text(defaults.replace('url = "sqlite:///modelgate.db"', f'url = "{storage}"', 1))
        command += ["--config", str(config)]
    process = subprocess.Popen(
        command,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return process, base, storage
        except httpx.TransportError:
            pass
        time.sleep(0.05)  # waiting for a process to start, bounded by the deadline
    process.kill()
    raise SystemExit("the gateway did not start")


async def _write_rows(storage: str, rows: list[tuple]) -> float:
    """Write ledger rows (built by `charge_row`) the way the model API does, through the ledger's batched
    flush (which also adds them to the daily sums); returns the rows written per second."""
    db = await open_database(storage)
    try:
        writer = LedgerWriter(db, interval=3600.0, batch_size=1000, max_queue=len(rows) + 1)
        for row in rows:
            writer.add_row(row, False)
        started = time.perf_counter()
        await writer.flush()
        rate = len(rows) / (time.perf_counter() - started)
        if db.dialect == "postgres":
            # What autovacuum does after such a load (PostgreSQL 13 on vacuums insert-only tables too): the
            # visibility map it sets is what lets a query read a covering index alone.
            await db.execute("VACUUM (ANALYZE) usage_ledger")
            await db.execute("VACUUM (ANALYZE) usage_days")
        return rate
    finally:
        await db.close()


async def _fill_ledger(storage: str, organization_id: str, key_ids: list[str], rows: int) -> None:
    rng = random.Random(18)
    now = time.time()
    systems = ["sys_" + os.urandom(12).hex() for _ in range(3)]
    batch = []
    for n in range(rows):
        at = now - rng.uniform(0, 60 * 86400)
        usage = Usage(input_tokens=rng.randint(10, 4000), cached_input_tokens=rng.randint(0, 500),
                      output_tokens=rng.randint(10, 2000))  # fmt: skip
        row_id = f"led_{int(at * 1000):011x}{'0' * 16}{n:08x}"
        who = (row_id, organization_id, rng.choice(key_ids), rng.choice([*systems, None]), rng.choice(MODELS),
               None, "req_" + os.urandom(8).hex())  # fmt: skip
        batch.append(charge_row(*who, 200, "completed", usage, rng.randint(10, 20000), at, ()))
    await _write_rows(storage, batch)


def _pages(days: int) -> dict[str, list[str]]:
    """The requests each page makes (the app shell and its modules first)."""
    today = datetime.now(UTC).date()
    first = (today - timedelta(days=days - 1)).isoformat()
    span = f"from={first}&to={today.isoformat()}"
    # app.js imports every page module, so a first load fetches every file of modelgate/cabinet/web/.
    assets = [f"/assets/{name}" for name in WebAssets.load().names if name != INDEX]
    shell = ["/", *assets, "/api/auth/session", "/api/auth/sign-in-options"]
    return {
        f"app shell (/ + {len(assets)} files + session)": shell,
        "overview (+ 30-day usage by model/day)": [
            "/api/overview",
            f"/api/usage?{span}&groupBy=day",
            f"/api/usage?{span}&groupBy=model",
        ],
        "keys (overview)": ["/api/overview"],
        "usage by day, 30 days": [f"/api/usage?{span}&groupBy=day"],
        "usage by model, 30 days": [f"/api/usage?{span}&groupBy=model"],
        "usage by key, 30 days": [f"/api/usage?{span}&groupBy=key"],
        "usage by system, 30 days": [f"/api/usage?{span}&groupBy=system"],
        "audit log, first page": ["/api/audit-log?limit=50"],
    }


async def _fill_log(
    storage: str, organization_id: str, key_ids: list[str], systems: list[str], rows: int
) -> float:
    """`rows` ledger rows over 60 days with ids as the ledger makes them, and the ENDINGS' statuses, written
    through the ledger's flush; returns its rows per second."""
    rng = random.Random(38)
    now = time.time()
    writer = os.urandom(8).hex()
    endings = [ending for ending in ENDINGS for _ in range(ending[0])]
    batch = []
    for n in range(rows):
        at = now - rng.uniform(0, 60 * 86400)
        _, status, outcome = rng.choice(endings)
        served = status == 200
        usage = Usage(input_tokens=rng.randint(10, 4000), cached_input_tokens=rng.randint(0, 500),
                      output_tokens=rng.randint(10, 2000)) if served else None  # fmt: skip
        who = (f"led_{int((at - rng.uniform(0.2, 3) * served) * 1000):011x}{writer}{n:08x}", organization_id,
               rng.choice(key_ids), rng.choice([*systems, None]), rng.choice(MODELS),
               "openai/gpt-4o@api.openai.com" if served else None, "req_" + os.urandom(8).hex())  # fmt: skip
        cost = rng.randint(10, 20000) * served
        batch.append(charge_row(*who, status, outcome, usage, cost, at, ()))
    return await _write_rows(storage, batch)


class _Recorder:
    """Takes the place of a database for one call of the repository, to learn the SQL it sends."""

    def __init__(self) -> None:
        self.sql = ""
        self.args: tuple = ()

    async def fetch(self, sql: str, *args: object) -> list:
        self.sql, self.args = sql, args
        return []

    async def fetchrow(self, sql: str, *args: object) -> None:
        self.sql, self.args = sql, args


async def _explain(storage: str, organization_id: str, filters: dict[str, RequestFilter]) -> None:
    """Each request-log query's plan, and those of the overview page's ledger reads: EXPLAIN ANALYZE on
    PostgreSQL, EXPLAIN QUERY PLAN on SQLite."""
    db = await open_database(storage)
    try:
        queries = []
        for name, only in filters.items():
            recorder = _Recorder()
            await newest_requests(recorder, organization_id, 51, None, only)
            queries.append((f"requests page, {name}", recorder.sql, recorder.args))
        today = datetime.now(UTC).date()
        month = today.replace(day=1)
        recorder = _Recorder()
        await request_totals(recorder, organization_id, month, today)
        queries.append(("GET /api/overview: this month's requests and cost", recorder.sql, recorder.args))
        recorder = _Recorder()
        await usage_by(cast(Database, recorder), organization_id, month, today, "day")
        queries.append(("GET /api/usage, this month by day", recorder.sql, recorder.args))
        recorder = _Recorder()
        await usage_breakdown(cast(Database, recorder), organization_id, month, today, "day", "model")
        queries.append(("GET /api/usage, this month by day: then=model", recorder.sql, recorder.args))
        print(f"\n== {db.dialect} plans")
        for name, sql, args in queries:
            print(f"-- {name}")
            if db.dialect == "postgres":
                for row in await db.fetch(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}", *args):
                    print("   ", row["QUERY PLAN"])
            else:
                for row in await db.fetch(f"EXPLAIN QUERY PLAN {sql}", *args):
                    print("   ", row["detail"])
    finally:
        await db.close()


async def _scratch_database(server_url: str, create: bool, name: str) -> str:
    import asyncpg

    admin = await asyncpg.connect(server_url)
    try:
        if create:
            await admin.execute(f'CREATE DATABASE "{name}"')
        else:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def _requests_log(loads: int, rows: int, postgres: str | None) -> None:
    backends: list[tuple[str, str | None]] = [("SQLite", None)]
    if postgres:
        backends.append(("PostgreSQL", postgres))
    results: dict[str, dict[str, tuple[float, float]]] = {}
    for backend, server_url in backends:
        scratch = f"bench_requests_{os.getpid()}"
        storage = asyncio.run(_scratch_database(server_url, True, scratch)) if server_url else None
        try:
            with tempfile.TemporaryDirectory() as folder:
                process, base, storage = _start(Path(folder), storage)
                try:
                    results[backend] = _measure_log(base, storage, loads, rows)
                finally:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=60)
        finally:
            if server_url:
                asyncio.run(_scratch_database(server_url, False, scratch))
    names = list(next(iter(results.values())))
    print(f"\n{rows} ledger rows; median and slowest of {loads} loads, ms (server and loopback)\n")
    header = "".join(f" {backend + ' median':>18} {'max':>7}" for backend in results)
    print(f"{'request':44}{header}  under {LOG_BUDGET_MS:.0f} ms")
    for name in names:
        cells = "".join(f" {results[b][name][0]:>18.1f} {results[b][name][1]:>7.1f}" for b in results)
        verdict = "yes" if all(results[b][name][0] < LOG_BUDGET_MS for b in results) else "NO"
        print(f"{name:44}{cells}  {verdict}")


def _measure_log(base: str, storage: str, loads: int, rows: int) -> dict[str, tuple[float, float]]:
    with httpx.Client(base_url=base, timeout=60) as client:
        page = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
        signed_in = client.post(
            "/api/auth/register",
            json={"legalName": "Bench", "email": "bench@example.com", "password": "correct horse battery",
                  "planCode": "free"},
            headers=page,
        )  # fmt: skip
        signed_in.raise_for_status()
        csrf = {"X-CSRF-Token": signed_in.json()["csrfToken"]}
        key_ids = [
            client.post("/api/organization/api-keys", json={"alias": f"key-{n}"}, headers=csrf).json()["id"]
            for n in range(8)
        ]
        organization_id = client.get("/api/auth/session").json()["organization"]["id"]
        systems = ["sys_" + os.urandom(12).hex() for _ in range(3)]
        rate = asyncio.run(_fill_log(storage, organization_id, key_ids, systems, rows))
        print(f"{rows} ledger rows written by the ledger's flush (batches of 1,000): {rate:,.0f} rows/s")
        today = datetime.now(UTC).date()
        span = f"from={(today - timedelta(days=29)).isoformat()}&to={today.isoformat()}"
        month = f"from={today.replace(day=1).isoformat()}&to={today.isoformat()}"
        # The overview page's calls (modelgate/cabinet/web/pages/overview.js), one by one and together.
        overview_page = ["/api/overview", "/api/meters", f"/api/usage?{month}&groupBy=day&then=model"]
        checks = {
            "GET /api/overview": ["/api/overview"],
            "GET /api/meters": ["/api/meters"],
            "GET /api/usage (month by day, then model)": [overview_page[2]],
            "overview page (its 3 calls)": overview_page,
            "GET /api/usage (30 days by model)": [f"/api/usage?{span}&groupBy=model"],
            "GET /api/usage (30 days by key)": [f"/api/usage?{span}&groupBy=key"],
            "GET /api/requests (first page, 50)": ["/api/requests"],
            "requests page (overview + first page)": ["/api/overview", "/api/requests"],
            "GET /api/requests?keyId=": [f"/api/requests?keyId={key_ids[3]}"],
            "GET /api/requests?systemId=": [f"/api/requests?systemId={systems[1]}"],
            "GET /api/requests?model=": ["/api/requests?model=claude-sonnet"],
            "GET /api/requests?status=502": ["/api/requests?status=502"],
            "GET /api/requests?outcome=client_closed": ["/api/requests?outcome=client_closed"],
            "GET /api/requests?outcome=crashed (none)": ["/api/requests?outcome=crashed"],
            "GET /api/requests, 7 days, status=429": [
                f"/api/requests?from={(today - timedelta(days=6)).isoformat()}&status=429"
            ],
        }
        # The second page: where the first one ends.
        cursor = client.get("/api/requests").json()["nextCursor"]
        checks["GET /api/requests (second page)"] = [f"/api/requests?cursor={cursor}"]
        measured: dict[str, tuple[float, float]] = {}
        for name, paths in checks.items():
            times = []
            for _ in range(loads + 1):
                started = time.perf_counter()
                for path in paths:
                    reply = client.get(path)
                    if reply.status_code != 200:
                        raise SystemExit(f"{path}: {reply.status_code} {reply.text[:200]}")
                times.append((time.perf_counter() - started) * 1000)
            times = times[1:]  # the first load warms caches
            measured[name] = (statistics.median(times), max(times))
    asyncio.run(
        _explain(
            storage,
            organization_id,
            {
                "no filter": RequestFilter(),
                "keyId": RequestFilter(key_id=key_ids[3]),
                "model": RequestFilter(model="claude-sonnet"),
                "status=502": RequestFilter(status=502),
                "systemId": RequestFilter(system_id=systems[1]),
                "outcome=client_closed": RequestFilter(outcome="client_closed"),
                "outcome=crashed (none)": RequestFilter(outcome="crashed"),
            },
        )
    )
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--rows", type=int, default=None, help="10,000; 100,000 with --requests-log")
    parser.add_argument("--requests-log", action="store_true", help="the request log's figures (issue #38)")
    parser.add_argument("--postgres", help="with --requests-log: a PostgreSQL server URL to measure too")
    args = parser.parse_args()
    if args.requests_log:
        _requests_log(args.loads, args.rows or 100_000, args.postgres)
        return
    args.rows = args.rows or 10_000
    with tempfile.TemporaryDirectory() as folder:
        process, base, storage = _start(Path(folder))
        try:
            _run(base, storage, args.loads, args.rows)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


def _run(base: str, storage: str, loads: int, rows: int) -> None:
    with httpx.Client(base_url=base, timeout=30) as client:
        page = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
        signed_in = client.post(
            "/api/auth/register",
            json={"legalName": "Bench", "email": "bench@example.com", "password": "correct horse battery",
                  "planCode": "free"},
            headers=page,
        )  # fmt: skip
        signed_in.raise_for_status()
        csrf = {"X-CSRF-Token": signed_in.json()["csrfToken"]}
        key_ids = [
            client.post("/api/organization/api-keys", json={"alias": f"key-{n}"}, headers=csrf).json()["id"]
            for n in range(8)
        ]
        organization_id = client.get("/api/auth/session").json()["organization"]["id"]
        asyncio.run(_fill_ledger(storage, organization_id, key_ids, rows))
        print(f"{rows} ledger rows over 60 days, {len(MODELS)} models, {len(key_ids)} keys; {loads} loads\n")
        print(f"{'page':42} {'requests':>8} {'median ms':>10} {'max ms':>8}  under {BUDGET_MS:.0f} ms")
        for name, paths in _pages(30).items():
            times = []
            for _ in range(loads + 1):
                started = time.perf_counter()
                for path in paths:
                    reply = client.get(path)
                    if reply.status_code != 200:
                        raise SystemExit(f"{path}: {reply.status_code} {reply.text[:200]}")
                times.append((time.perf_counter() - started) * 1000)
            times = times[1:]  # the first load warms caches
            median = statistics.median(times)
            verdict = "yes" if median < BUDGET_MS else "NO"
            print(f"{name:42} {len(paths):>8} {median:>10.1f} {max(times):>8.1f}  {verdict}")


if __name__ == "__main__":
    main()
