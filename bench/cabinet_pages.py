"""How fast the web cabinet's pages load on the embedded defaults (SQLite) with 10,000 ledger rows.

Starts `modelgate serve` (a subprocess, embedded defaults, a fresh data folder), registers an organization
from the gateway's page (cookie session), writes 10,000 usage rows for it spread over 60 days, 6 models,
8 keys and 3 systems, then loads each page 20 times the way the app does: every request one page makes, one
after another over one keep-alive connection (a browser runs them in parallel, so this overstates a load).
Prints the median and the slowest load per page and whether the median is under 300 ms.

    /work/venv/bin/python bench/cabinet_pages.py [--loads 20] [--rows 10000]

With `--requests-log` it measures instead what issue #38 asks of the request log: the server's time for the
requests page's first page (GET /api/requests, unfiltered and by each indexed filter) and for the overview
(GET /api/overview, and the overview page's three calls) with 100,000 ledger rows of realistic statuses, on
SQLite and, given `--postgres URL` (a server where it may create and drop a scratch database), on
PostgreSQL; one table for both, against a 150 ms budget, after each backend's plans of the request-log queries
and of the overview's month sum (EXPLAIN ANALYZE on PostgreSQL, EXPLAIN QUERY PLAN on SQLite):

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

import httpx

from modelgate.cabinet.request_log_repository import RequestFilter, newest_requests
from modelgate.cabinet.usage_repository import request_totals
from modelgate.cabinet.web_assets import INDEX, WebAssets
from modelgate.storage import open_database

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


async def _fill_ledger(storage: str, organization_id: str, key_ids: list[str], rows: int) -> None:
    db = await open_database(storage)
    rng = random.Random(18)
    now = time.time()
    systems = ["sys_" + os.urandom(12).hex() for _ in range(3)]
    batch = [
        (
            "use_" + os.urandom(12).hex(),
            organization_id,
            rng.choice(key_ids),
            rng.choice([*systems, None]),
            rng.choice(MODELS),
            "req_" + os.urandom(8).hex(),
            200,
            rng.randint(10, 4000),
            rng.randint(0, 500),
            rng.randint(10, 2000),
            rng.randint(10, 20000),
            now - rng.uniform(0, 60 * 86400),
        )
        for _ in range(rows)
    ]
    try:
        async with db.transaction() as tx:
            await tx.executemany(
                "INSERT INTO usage_ledger (id, organization_id, key_id, system_id, model, request_id, status,"
                " input_tokens, cached_input_tokens, output_tokens, cost_micros, created_at)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                batch,
            )
    finally:
        await db.close()


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


async def _fill_log(storage: str, organization_id: str, key_ids: list[str], rows: int) -> None:
    """`rows` ledger rows over 60 days with ids as the ledger makes them, and the ENDINGS' statuses."""
    db = await open_database(storage)
    rng = random.Random(38)
    now = time.time()
    systems = ["sys_" + os.urandom(12).hex() for _ in range(3)]
    writer = os.urandom(8).hex()
    endings = [ending for ending in ENDINGS for _ in range(ending[0])]
    batch = []
    for n in range(rows):
        at = now - rng.uniform(0, 60 * 86400)
        _, status, outcome = rng.choice(endings)
        served = status == 200
        batch.append(
            (
                f"led_{int((at - rng.uniform(0.2, 3) * served) * 1000):011x}{writer}{n:08x}",
                organization_id,
                rng.choice(key_ids),
                rng.choice([*systems, None]),
                rng.choice(MODELS),
                "openai/gpt-4o@api.openai.com" if served else None,
                "req_" + os.urandom(8).hex(),
                status,
                outcome,
                rng.randint(10, 4000) * served,
                rng.randint(0, 500) * served,
                rng.randint(10, 2000) * served,
                rng.randint(10, 20000) * served,
                at,
            )
        )
    try:
        async with db.transaction() as tx:
            await tx.executemany(
                "INSERT INTO usage_ledger (id, organization_id, key_id, system_id, model, row_key,"
                " request_id, status, outcome, input_tokens, cached_input_tokens, output_tokens, cost_micros,"
                " created_at)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
                batch,
            )
        if db.dialect == "postgres":
            # What autovacuum does after such a load (PostgreSQL 13 on vacuums insert-only tables too): the
            # visibility map it sets is what lets the overview's sum read its covering index alone.
            await db.execute("VACUUM (ANALYZE) usage_ledger")
    finally:
        await db.close()


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
    """Each request-log query's plan, and the overview's month sum's: EXPLAIN ANALYZE on PostgreSQL, EXPLAIN
    QUERY PLAN on SQLite."""
    db = await open_database(storage)
    try:
        queries = []
        for name, only in filters.items():
            recorder = _Recorder()
            await newest_requests(recorder, organization_id, 51, None, only)
            queries.append((f"requests page, {name}", recorder.sql, recorder.args))
        recorder = _Recorder()
        await request_totals(recorder, organization_id, time.time() - 30 * 86400, time.time())
        queries.append(("overview, this month's requests and cost", recorder.sql, recorder.args))
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
        asyncio.run(_fill_log(storage, organization_id, key_ids, rows))
        today = datetime.now(UTC).date()
        span = f"from={(today - timedelta(days=29)).isoformat()}&to={today.isoformat()}"
        checks = {
            "GET /api/overview": ["/api/overview"],
            "overview page (overview + 2 usage reports)": [
                "/api/overview",
                f"/api/usage?{span}&groupBy=day&then=model",
                f"/api/usage?{span}&groupBy=model",
            ],
            "GET /api/requests (first page, 50)": ["/api/requests"],
            "requests page (overview + first page)": ["/api/overview", "/api/requests"],
            "GET /api/requests?keyId=": [f"/api/requests?keyId={key_ids[3]}"],
            "GET /api/requests?model=": ["/api/requests?model=claude-sonnet"],
            "GET /api/requests?status=502": ["/api/requests?status=502"],
            "GET /api/requests?outcome=client_closed": ["/api/requests?outcome=client_closed"],
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
                "outcome=client_closed (no index of its own)": RequestFilter(outcome="client_closed"),
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
