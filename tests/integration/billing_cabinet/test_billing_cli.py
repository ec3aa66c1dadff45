"""`modelgate billing …` as an operator runs it: on the configured storage, or through a running gateway."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest

from modelgate.storage import Database
from tests.integration.billing_cabinet.billing_client import (
    OPERATOR_TOKEN,
    BillingCabinet,
    BillingCabinetFactory,
    billing_config,
)

REPOSITORY = Path(__file__).parents[3]
PRO_FEE_MICROS = 49_000_000
_MODELS = (
    '[[providers]]\nname = "mock"\nkind = "mock"\n[[models]]\nname = "m"\nkinds = ["chat"]\n'
    '[[models.rows]]\nprovider = "mock"\n[[plans]]\ncode = "pro"\nmonthly_fee = 49.0\n'
)


async def run_billing(*args: str, token: str | None = None) -> tuple[int, str, str]:
    """Run `python -m modelgate billing …` without blocking the loop the test server runs on."""
    env = {k: v for k, v in os.environ.items() if k != "MODELGATE_OPERATOR_TOKEN"}
    if token is not None:
        env["MODELGATE_OPERATOR_TOKEN"] = token
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "modelgate",
        "billing",
        *args,
        cwd=REPOSITORY,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, out.decode(), err.decode()


def write_config(tmp_path: Path, storage_url: str, extra: str = "") -> str:
    path = tmp_path / "modelgate.toml"
    path.write_text(f'[storage]\nurl = "{storage_url}"\n{extra}\n{_MODELS}')
    return str(path)


class BillingListener:
    """A LISTEN on `modelgate_billing` of the test's PostgreSQL database (nothing on SQLite)."""

    def __init__(self) -> None:
        self.payloads: asyncio.Queue[str] = asyncio.Queue()
        self._conn: asyncpg.Connection | None = None

    async def start(self, db: Database, storage_url: str) -> None:
        if db.dialect == "postgres":
            self._conn = await asyncpg.connect(storage_url)
            await self._conn.add_listener("modelgate_billing", lambda *a: self.payloads.put_nowait(a[3]))

    async def next(self) -> str:
        return await asyncio.wait_for(self.payloads.get(), 10)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()


@pytest.fixture
async def listener(db: Database, storage_url: str):
    listening = BillingListener()
    await listening.start(db, storage_url)
    yield listening
    await listening.close()


async def test_mark_paid_pays_the_invoice_in_storage_and_notifies_gateways(
    cabinet: BillingCabinet, storage_url: str, tmp_path: Path, listener: BillingListener
) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)

    code, out, err = await run_billing(
        "mark-paid", invoice_id, "--config", write_config(tmp_path, storage_url)
    )

    assert code == 0, err
    assert f"marked paid: invoice {invoice_id} of organization {org_id}" in out
    assert "credited 49.00 USD; balance 49.00 USD" in out
    row = await cabinet.db.fetchrow("SELECT status, paid_at FROM invoices WHERE id = $1", invoice_id)
    assert row["status"] == "paid" and row["paid_at"] is not None
    assert await cabinet.balance(org_id) == PRO_FEE_MICROS
    assert (
        await cabinet.db.fetchval("SELECT activated_at FROM organizations WHERE id = $1", org_id) is not None
    )
    [entry] = [e for e in await cabinet.audit_events(owner) if e["event"] == "invoice.paid"]
    assert (entry["actor"]["type"], entry["details"]["via"]) == ("operator", "cli")
    if cabinet.db.dialect == "postgres":
        assert (await listener.next()).startswith(f"{org_id}|")
        assert "notified running gateways on modelgate_billing (PostgreSQL)" in out
    else:
        assert "notified running gateways on modelgate_billing (the host channel)" in out


async def test_paying_an_invoice_twice_from_the_cli_exits_2(
    cabinet: BillingCabinet, storage_url: str, tmp_path: Path
) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)
    config = write_config(tmp_path, storage_url)

    first = await run_billing("mark-paid", invoice_id, "--config", config)
    second = await run_billing("mark-paid", invoice_id, "--config", config)
    unknown = await run_billing("mark-paid", "inv_0123456789abcdef", "--config", config)

    assert first[0] == 0
    assert (second[0], second[2].strip()) == (2, "modelgate billing mark-paid: invoice already paid")
    assert (unknown[0], unknown[2].strip()) == (2, "modelgate billing mark-paid: invoice not found")
    assert await cabinet.balance(org_id) == PRO_FEE_MICROS


async def test_top_up_credits_the_balance_and_invoices_lists_it(
    cabinet: BillingCabinet, storage_url: str, tmp_path: Path, listener: BillingListener
) -> None:
    owner = await cabinet.register(legal_name="Initech", plan="pro")
    org_id = await cabinet.organization_id(owner)
    config = write_config(tmp_path, storage_url)

    code, out, err = await run_billing("top-up", org_id, "12.5", "--config", config)
    listed = await run_billing("invoices", org_id, "--config", config)

    assert code == 0, err
    assert "topped up: invoice inv_" in out and "credited 12.50 USD; balance 12.50 USD" in out
    assert await cabinet.balance(org_id) == 12_500_000
    kinds = await cabinet.db.fetch("SELECT kind, status FROM invoices WHERE organization_id = $1", org_id)
    assert sorted((r["kind"], r["status"]) for r in kinds) == [("plan", "open"), ("top_up", "paid")]
    assert listed[0] == 0, listed[2]
    lines = listed[1].splitlines()
    assert lines[0].startswith(f"organization {org_id} (Initech), plan pro, balance 12.50 USD, activated ")
    assert [line.split()[1:3] for line in lines[1:]] == [["top_up", "paid"], ["plan", "open"]]
    if cabinet.db.dialect == "postgres":
        assert (await listener.next()).startswith(f"{org_id}|")


async def test_bad_amounts_and_unknown_organizations_exit_2_and_change_nothing(
    cabinet: BillingCabinet, storage_url: str, tmp_path: Path
) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    config = write_config(tmp_path, storage_url)

    for amount, message in (
        ("abc", "not an amount: 'abc'"),
        ("0", "the amount must be a positive number"),
        ("1.0000001", "the amount has more than 6 decimal places"),
        ("nan", "not an amount: 'nan'"),
    ):
        code, _, err = await run_billing("top-up", org_id, amount, "--config", config)

        assert code == 2, amount
        assert err.startswith(f"modelgate billing top-up: {message}"), err
    unknown = await run_billing("top-up", "org_0123456789abcdef", "5", "--config", config)
    listing = await run_billing("invoices", "org_0123456789abcdef", "--config", config)

    assert (unknown[0], unknown[2].strip()) == (2, "modelgate billing top-up: organization not found")
    assert (listing[0], listing[2].strip()) == (2, "modelgate billing invoices: organization not found")
    assert await cabinet.balance(org_id) == 0


async def test_with_redis_configured_the_cli_also_publishes_on_the_billing_channel(
    cabinet: BillingCabinet, storage_url: str, tmp_path: Path, redis_url: str
) -> None:
    from redis.asyncio import Redis

    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    redis = Redis.from_url(redis_url)
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe("modelgate_billing")
    try:
        code, out, err = await run_billing(
            "mark-paid",
            await cabinet.open_invoice_id(owner),
            "--config",
            write_config(tmp_path, storage_url, f'[redis]\nurl = "{redis_url}"\n'),
        )
        message = None
        for _ in range(50):
            message = await pubsub.get_message(timeout=0.2)
            if message is not None:
                break
    finally:
        await pubsub.aclose()
        await redis.aclose()

    assert code == 0, err
    assert "Redis" in out
    assert message is not None and message["data"].startswith(f"{org_id}|{PRO_FEE_MICROS}|bev_".encode())


async def test_through_a_running_gateway_the_operator_api_does_the_work(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    cabinet = await start_billing_cabinet()
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)
    url = str(cabinet.client.make_url("/"))

    paid = await run_billing("mark-paid", invoice_id, "--url", url, token=OPERATOR_TOKEN)
    topped = await run_billing("top-up", org_id, "1", "--url", url, "--operator-token", OPERATOR_TOKEN)
    listed = await run_billing("invoices", org_id, "--url", url + "api", token=OPERATOR_TOKEN)

    assert paid[0] == 0, paid[2]
    assert f"marked paid: invoice {invoice_id} of organization {org_id}" in paid[1]
    assert topped[0] == 0, topped[2]
    assert "balance 50.00 USD" in topped[1]
    assert listed[0] == 0, listed[2]
    assert len(listed[1].splitlines()) == 3
    # The running process heard both credits through its billing sink.
    assert cabinet.billing.credited == [(org_id, PRO_FEE_MICROS), (org_id, 1_000_000)]


async def test_through_a_gateway_a_wrong_or_missing_token_exits_2(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    cabinet = await start_billing_cabinet()
    disabled = await start_billing_cabinet(billing_config(operator_token=None))
    owner = await cabinet.register()
    invoice_id = await cabinet.open_invoice_id(owner)
    url = str(cabinet.client.make_url("/"))

    wrong = await run_billing("mark-paid", invoice_id, "--url", url, token="wrong")
    missing = await run_billing("mark-paid", invoice_id, "--url", url)
    off = await run_billing("mark-paid", invoice_id, "--url", str(disabled.client.make_url("/")), token="x")
    unreachable = await run_billing("mark-paid", invoice_id, "--url", "http://127.0.0.1:9", token="x")

    assert (wrong[0], wrong[2].strip()) == (
        2,
        "modelgate billing mark-paid: the gateway answered HTTP 401: invalid operator token",
    )
    assert missing[0] == 2 and "--url needs the operator token" in missing[2]
    assert off[0] == 2 and "HTTP 404: not found (is server.operator_token configured" in off[2]
    assert unreachable[0] == 2 and "cannot reach the gateway at http://127.0.0.1:9" in unreachable[2]
    assert cabinet.billing.credited == []


async def test_a_missing_or_unmigrated_sqlite_database_exits_2(tmp_path: Path) -> None:
    missing = await run_billing(
        "invoices",
        "org_0123456789abcdef",
        "--config",
        write_config(tmp_path, f"sqlite:///{tmp_path}/none.db"),
    )
    (tmp_path / "empty.db").write_bytes(b"")
    empty = await run_billing(
        "invoices",
        "org_0123456789abcdef",
        "--config",
        write_config(tmp_path, f"sqlite:///{tmp_path}/empty.db"),
    )

    assert missing[0] == 2 and f"no database at {tmp_path}/none.db" in missing[2]
    assert not (tmp_path / "none.db").exists()
    assert empty[0] == 2 and "the database schema is at version 0" in empty[2]
    assert "run `modelgate migrate`" in empty[2]
