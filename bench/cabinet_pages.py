"""How fast the web cabinet's pages load on the embedded defaults (SQLite) with 10,000 ledger rows.

Starts `modelgate serve` (a subprocess, embedded defaults, a fresh data folder), registers an organization
from the gateway's page (cookie session), writes 10,000 usage rows for it spread over 60 days, 6 models,
8 keys and 3 systems, then loads each page 20 times the way the app does: every request one page makes, one
after another over one keep-alive connection (a browser runs them in parallel, so this overstates a load).
Prints the median and the slowest load per page and whether the median is under 300 ms.

    /work/venv/bin/python bench/cabinet_pages.py [--loads 20] [--rows 10000]
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

from modelgate.cabinet.web_assets import INDEX, WebAssets
from modelgate.storage import open_database

BUDGET_MS = 300.0
MODELS = ("mock-chat", "gpt-4o", "gpt-4o-mini", "claude-sonnet", "gemini-flash", "llama-70b")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(folder: Path) -> tuple[subprocess.Popen, str, str]:
    port = _free_port()
    # The embedded defaults keep their SQLite file (and the ledger's spool) in the working directory.
    storage = f"sqlite:///{folder / 'modelgate.db'}"
    process = subprocess.Popen(
        [sys.executable, "-m", "modelgate", "serve", "--port", str(port)],
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
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
