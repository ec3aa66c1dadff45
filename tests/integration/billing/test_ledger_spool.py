"""The usage ledger loses nothing and charges nothing twice: SIGKILL, database outages, replayed spools.

The gateway runs as a real `modelgate serve` process; PostgreSQL outages are made by a loopback TCP proxy
in front of the machine's PostgreSQL (tests/fakes/tcp_proxy.py), never by stopping the server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from modelgate.domain.ledger import LedgerWriter
from modelgate.infra.spool import Spool, database_identity
from modelgate.storage import Database, open_database
from tests.fakes.tcp_proxy import TcpProxy
from tests.support.gateway import GatewayProcess, register_tenant
from tests.support.ledger_rows import add_row, new_organization

PER_REQUEST_MICROS = 1200
OPENING_MICROS = 1000 * 1_000_000  # register_tenant funds 1000 USD


def _config(
    tmp_path: Path, storage_url: str, *, flush_interval: float, billing: str = "", server: str = ""
) -> Path:
    path = tmp_path / "spool.toml"
    path.write_text(f"""
[server]
shutdown_grace_seconds = 5.0
{server}

[storage]
url = "{storage_url}"

[billing]
ledger_flush_interval_seconds = {flush_interval}
ledger_batch_size = 1000
{billing}

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "metered"
kinds = ["chat"]
[[models.rows]]
provider = "mock"
[models.prices]
per_request = {PER_REQUEST_MICROS / 1_000_000}

[[plans]]
code = "free"
rpm = 0
tpm = 0
""")
    return path


def _serve(base_url: str, api_key: str, count: int, *, concurrency: int = 8) -> list[str]:
    """Send `count` chat requests; the request ids of those answered 200 (a killed gateway answers none)."""
    served: list[str] = []

    async def run() -> None:
        queue = iter(range(count))
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:

            async def worker() -> None:
                for n in queue:
                    try:
                        reply = await client.post(
                            "/v1/chat/completions",
                            headers={"authorization": f"Bearer {api_key}"},
                            json={"model": "metered", "messages": [{"role": "user", "content": f"n {n}"}]},
                        )
                    except httpx.TransportError:
                        return  # the gateway is gone
                    if reply.status_code == 200:
                        served.append(reply.headers["x-request-id"])

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    asyncio.run(run())
    return served


async def _ledger(storage_url: str, email: str) -> tuple[list[tuple[str, int]], int]:
    """The tenant's ledger rows (request id, cost) and its stored balance."""
    db = await open_database(storage_url)
    try:
        org_id = await db.fetchval("SELECT organization_id FROM users WHERE email = $1", email)
        rows = await db.fetch(
            "SELECT request_id, cost_micros FROM usage_ledger WHERE organization_id = $1", org_id
        )
        balance = await db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", org_id)
        return [(row["request_id"], int(row["cost_micros"])) for row in rows], int(balance)
    finally:
        await db.close()


def _ledger_now(storage_url: str, email: str) -> tuple[list[tuple[str, int]], int]:
    return asyncio.run(_ledger(storage_url, email))


def _wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)  # polling an observable condition, bounded by the deadline
    return False


def _assert_charged_once(storage_url: str, email: str, served: list[str]) -> None:
    rows, balance = _ledger_now(storage_url, email)
    ids = [request_id for request_id, _ in rows]
    assert len(ids) == len(set(ids)), "a request has two ledger rows"
    assert set(served) <= set(ids), f"{len(set(served) - set(ids))} served requests have no ledger row"
    assert all(cost == PER_REQUEST_MICROS for _, cost in rows)
    assert balance == OPENING_MICROS - sum(cost for _, cost in rows)


def _rows_of(storage_url: str, email: str) -> int:
    return len(_ledger_now(storage_url, email)[0])


def test_every_served_request_has_one_ledger_row_after_a_sigkill_under_load(
    tmp_path: Path, storage_url: str
) -> None:
    # A flush interval far beyond the test: until the restart, the rows exist only in the spool.
    config = _config(tmp_path, storage_url, flush_interval=600.0)
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    restarted: GatewayProcess | None = None
    try:
        tenant = register_tenant(gateway.base_url)
        served: list[str] = []
        load = threading.Thread(target=lambda: served.extend(_serve(gateway.base_url, tenant.api_key, 300)))
        load.start()
        assert _wait_until(lambda: len(served) >= 150 or not load.is_alive(), timeout=60)
        gateway.kill()  # SIGKILL while requests are in flight
        load.join(timeout=60)
        assert len(served) >= 150
        assert _rows_of(storage_url, tenant.email) == 0, "rows reached the database before the kill"

        restarted = GatewayProcess(config, cwd=tmp_path).start()
        assert _wait_until(lambda: _rows_of(storage_url, tenant.email) >= len(served), timeout=60)
        _assert_charged_once(storage_url, tenant.email, served)
        rows = _rows_of(storage_url, tenant.email)
        assert rows - len(served) <= 8, "more unanswered rows than requests in flight"
    finally:
        gateway.kill()
        if restarted is not None:
            restarted.kill()


def _log_lines(gateway: GatewayProcess, needle: str) -> int:
    return sum(needle in line for line in gateway.output().splitlines())


def _readyz(gateway: GatewayProcess) -> dict:
    return httpx.get(f"{gateway.base_url}/readyz", timeout=10).json()


def _metric(gateway: GatewayProcess, name: str) -> float:
    for line in httpx.get(f"{gateway.base_url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not exported")


def test_requests_are_served_through_a_postgres_outage_and_every_row_is_written_once_after_it(
    tmp_path: Path, fresh_pg_url: str
) -> None:
    with TcpProxy(5432) as proxy:
        url = proxy.url(fresh_pg_url)
        # A memory queue smaller than the outage's rows: the rest is read back from the spool.
        config = _config(tmp_path, url, flush_interval=0.2, billing="ledger_max_queue = 10")
        with GatewayProcess(config, cwd=tmp_path) as gateway:
            tenant = register_tenant(gateway.base_url)
            before = _serve(gateway.base_url, tenant.api_key, 3)  # the key cache and the counters are warm
            assert _wait_until(lambda: _rows_of(fresh_pg_url, tenant.email) == 3)

            proxy.cut()
            during = _serve(gateway.base_url, tenant.api_key, 40, concurrency=4)
            assert len(during) == 40, "requests were refused during the outage"
            # The ledger's own flush failed (the refused connections alone may all be other readers', done
            # before its next flush on a fast machine), then several attempts while the database is away.
            assert _wait_until(lambda: _log_lines(gateway, "LEDGER STORAGE UNAVAILABLE") == 1, timeout=30)
            assert _wait_until(lambda: proxy.refused >= 4, timeout=30)
            ready = _readyz(gateway)
            assert ready["status"] == "not ready" and ready["ledger_backlog"] == 40
            assert _metric(gateway, "modelgate_ledger_backlog_rows") == 40
            assert _metric(gateway, "modelgate_ledger_queue_depth") <= 10
            assert _rows_of(fresh_pg_url, tenant.email) == 3

            proxy.restore()
            assert _wait_until(lambda: _rows_of(fresh_pg_url, tenant.email) == 43)
            assert _wait_until(lambda: _log_lines(gateway, "LEDGER STORAGE BACK") == 1, timeout=10)
            assert _readyz(gateway)["ledger_backlog"] == 0
            log = gateway.output()
        _assert_charged_once(fresh_pg_url, tenant.email, before + during)
    assert sum("LEDGER STORAGE UNAVAILABLE" in line for line in log.splitlines()) == 1
    assert "Traceback" not in log and '"exc":' not in log


def test_a_sigterm_during_a_postgres_outage_keeps_the_rows_for_the_next_start(
    tmp_path: Path, fresh_pg_url: str
) -> None:
    with TcpProxy(5432) as proxy:
        config = _config(tmp_path, proxy.url(fresh_pg_url), flush_interval=0.2)
        gateway = GatewayProcess(config, cwd=tmp_path).start()
        restarted: GatewayProcess | None = None
        try:
            tenant = register_tenant(gateway.base_url)
            before = _serve(gateway.base_url, tenant.api_key, 3)
            assert _wait_until(lambda: _rows_of(fresh_pg_url, tenant.email) == 3)

            proxy.cut()
            during = _serve(gateway.base_url, tenant.api_key, 30, concurrency=4)
            assert len(during) == 30
            stopping = time.monotonic()
            gateway.terminate()
            assert gateway.wait(timeout=30) == 0
            assert time.monotonic() - stopping < 5.0 + 5.0  # the shutdown grace, and the process's own exit
            assert "usage rows not written at shutdown" in gateway.output()
            assert _rows_of(fresh_pg_url, tenant.email) == 3

            proxy.restore()
            restarted = GatewayProcess(config, cwd=tmp_path).start()
            assert _wait_until(lambda: _rows_of(fresh_pg_url, tenant.email) == 33)
            assert _wait_until(lambda: _readyz(restarted)["ledger_backlog"] == 0, timeout=10)
            _assert_charged_once(fresh_pg_url, tenant.email, before + during)
        finally:
            gateway.kill()
            if restarted is not None:
                restarted.kill()


# -- the writer and its spool on each storage backend ----------------------------------------------------


async def _organization(db: Database, balance: int) -> str:
    return await new_organization(db, "Spool Test", balance)


def _add(writer: LedgerWriter, org_id: str, n: int, cost: int = 100, **marks: str | bool) -> None:
    add_row(writer, org_id, f"req_spool_{n}", cost, key_id="key_spool", **marks)


def _writer(db: Database, directory: Path, storage_url: str, **options) -> tuple[LedgerWriter, Spool]:
    spool = Spool(directory, database_identity(storage_url), fsync="never", fsync_interval=1.0)
    return LedgerWriter(db, interval=600.0, batch_size=4, spool=spool, **options), spool


async def _stored(db: Database, org_id: str) -> tuple[list[str], int]:
    rows = await db.fetch("SELECT request_id FROM usage_ledger WHERE organization_id = $1", org_id)
    balance = await db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", org_id)
    return sorted(row["request_id"] for row in rows), int(balance)


async def test_a_replayed_spool_whose_rows_were_committed_is_not_charged_twice(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    directory = tmp_path / "spool"
    org_id = await _organization(db, 10_000)
    first, first_spool = _writer(db, directory, storage_url)
    await first.open()
    for n in range(5):
        _add(first, org_id, n)
    # The process dies between the commit and the deletion of the segment: the file outlives its rows.
    (segment,) = directory.glob("*.spool")
    shutil.copy(segment, directory / "ledger-dead-000001.spool")
    assert await first.flush() == 5
    for n in range(5, 10):
        _add(first, org_id, n)
    await first_spool.close()  # and then dies: the rows added since stay in their segment, unwritten

    second, _ = _writer(db, directory, storage_url)
    assert await second.open() == 10
    assert second.pending_cost(org_id) == 1000
    assert await second.flush() == 5  # only the rows the database did not have
    await second.stop(5.0)

    request_ids, balance = await _stored(db, org_id)
    assert request_ids == sorted(f"req_spool_{n}" for n in range(10))
    assert balance == 10_000 - 10 * 100
    assert second.pending_cost(org_id) == 0 and second.backlog == 0
    assert list(directory.glob("*.spool")) == []


async def test_pending_cost_counts_rows_that_are_only_in_the_spool(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    org_id = await _organization(db, 10_000)
    writer, _ = _writer(db, tmp_path / "spool", storage_url, max_queue=2)
    await writer.open()
    for n in range(7):
        _add(writer, org_id, n, cost=100 + n)
    assert writer.queued <= 2 and writer.backlog == 7
    assert writer.pending_cost(org_id) == sum(100 + n for n in range(7))

    assert await writer.flush() == 7  # read back from the spool, in batches of 4
    await writer.stop(5.0)
    request_ids, balance = await _stored(db, org_id)
    assert request_ids == sorted(f"req_spool_{n}" for n in range(7))
    assert balance == 10_000 - sum(100 + n for n in range(7))
    assert writer.pending_cost(org_id) == 0


async def test_the_content_action_and_the_estimate_mark_survive_the_spool_and_a_replay(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    org_id = await _organization(db, 10_000)
    marks = [("", False), ("flagged", False), ("", True), ("redacted", True)]
    directory = tmp_path / "spool"
    first, first_spool = _writer(db, directory, storage_url, max_queue=1)
    await first.open()
    for n, (action, estimated) in enumerate(marks[:2]):
        _add(first, org_id, n, content_action=action, estimated=estimated)
    assert await first.flush() == 2  # read back from the spool (a queue of one)
    for n, (action, estimated) in enumerate(marks[2:], start=2):
        _add(first, org_id, n, content_action=action, estimated=estimated)
    await first_spool.close()  # and dies: the last two are replayed by the next process

    second, _ = _writer(db, directory, storage_url)
    assert await second.open() == 2
    assert await second.flush() == 2
    await second.stop(5.0)
    rows = await db.fetch(
        "SELECT request_id, content_action, usage_estimated FROM usage_ledger WHERE organization_id = $1",
        org_id,
    )
    stored = {row["request_id"]: (row["content_action"], bool(row["usage_estimated"])) for row in rows}
    assert stored == {f"req_spool_{n}": mark for n, mark in enumerate(marks)}


async def test_a_row_added_after_the_stop_never_lands_in_a_reused_descriptor(
    db: Database, tmp_path: Path, storage_url: str
) -> None:
    org_id = await _organization(db, 10_000)
    writer, _ = _writer(db, tmp_path / "spool", storage_url)
    await writer.open()
    await writer.stop(5.0)
    # The spool's descriptors are closed: the next file opened takes the lowest free number.
    bystander = tmp_path / "bystander"
    fd = os.open(bystander, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        _add(writer, org_id, 1)
    finally:
        os.close(fd)
    assert bystander.read_bytes() == b""
    assert writer.backlog == 1


def test_a_sigterm_while_postgres_does_not_answer_stops_within_the_grace_and_keeps_the_rows(
    tmp_path: Path, fresh_pg_url: str
) -> None:
    with TcpProxy(5432) as proxy:
        config = _config(tmp_path, proxy.url(fresh_pg_url), flush_interval=0.2)
        gateway = GatewayProcess(config, cwd=tmp_path).start()
        restarted: GatewayProcess | None = None
        try:
            tenant = register_tenant(gateway.base_url)
            before = _serve(gateway.base_url, tenant.api_key, 3)
            assert _wait_until(lambda: _rows_of(fresh_pg_url, tenant.email) == 3)

            proxy.stall()  # a partition: the flush waits on a connection nobody answers
            during = _serve(gateway.base_url, tenant.api_key, 10, concurrency=2)
            assert len(during) == 10
            assert _wait_until(lambda: proxy.refused >= 1, timeout=30)
            stopping = time.monotonic()
            gateway.terminate()
            assert gateway.wait(timeout=60) == 0
            assert time.monotonic() - stopping < 5.0 + 5.0  # the shutdown grace, and the process's own exit

            proxy.restore()
            restarted = GatewayProcess(config, cwd=tmp_path).start()
            assert _wait_until(lambda: _rows_of(fresh_pg_url, tenant.email) == 13)
            _assert_charged_once(fresh_pg_url, tenant.email, before + during)
        finally:
            gateway.kill()
            if restarted is not None:
                restarted.kill()
