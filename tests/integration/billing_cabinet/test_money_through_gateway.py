"""The operator's money and plan actions as a running gateway sees them, driven with the openai SDK: a paid
0.00 invoice plus a monthly allowance, a budget of 0, a plan change (in this process and in others), and a
CLI top-up on SQLite."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from modelgate.domain.allowance import allowance_event_id
from modelgate.storage import open_database
from tests.support.gateway import ThreadedGateway, write_config

OPERATOR_TOKEN = "operator-token-for-money-tests-0123456789"
REPOSITORY = Path(__file__).parents[3]
CHAT = {"model": "metered", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
PASSWORD = "correct horse battery"


def money_toml(storage_url: str, redis_url: str | None) -> str:
    redis = f'[redis]\nurl = "{redis_url}"\n' if redis_url else ""
    return f"""
[server]
operator_token = "{OPERATOR_TOKEN}"

[storage]
url = "{storage_url}"

{redis}
[billing]
ledger_flush_interval_seconds = 0.2

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "metered"
kinds = ["chat"]
default_max_tokens = 50
[[models.rows]]
provider = "mock"
[models.prices]
per_request = 0.01

[[plans]]
code = "free"
monthly_allowance = 1.0

[[plans]]
code = "pro"
monthly_fee = 49.0

[[plans]]
code = "enterprise"
credit_limit = 100.0
"""


@dataclass(frozen=True, slots=True)
class Tenant:
    """A registered organization: its id, its owner's session and an API key."""

    organization_id: str
    session: str
    api_key: str


def register(gateway: ThreadedGateway, plan: str) -> Tenant:
    """Register an organization on a self-service plan and issue an API key, over the cabinet API."""
    email = f"owner-{os.urandom(6).hex()}@example.com"
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        reply = client.post(
            "/api/auth/register",
            json={"legalName": "Money Org", "email": email, "password": PASSWORD, "planCode": plan},
        )
        assert reply.status_code == 201, reply.text
        auth = {"authorization": f"Bearer {reply.json()['token']}"}
        session = client.get("/api/auth/session", headers=auth).json()
        key = client.post("/api/organization/api-keys", json={"alias": "app"}, headers=auth)
        assert key.status_code == 201, key.text
    return Tenant(session["organization"]["id"], reply.json()["token"], key.json()["secret"])


def cabinet(gateway: ThreadedGateway, method: str, path: str, token: str, body: dict | None = None) -> dict:
    reply = httpx.request(
        method, f"{gateway.base_url}/api{path}", json=body, headers={"authorization": f"Bearer {token}"}
    )
    assert reply.status_code < 300, reply.text
    return reply.json()


def operator(gateway: ThreadedGateway, path: str, body: dict | None = None) -> dict:
    return cabinet(gateway, "POST", f"/operator{path}", OPERATOR_TOKEN, body)


def chat_status(gateway: ThreadedGateway, tenant: Tenant) -> int:
    """The status of one chat request through the openai SDK (200, or the error's status)."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)
    try:
        answer = client.chat.completions.create(**CHAT)
    except openai.APIStatusError as exc:
        return exc.status_code
    assert answer.choices[0].message.content
    return 200


def eventually_status(gateway: ThreadedGateway, tenant: Tenant, status: int, within: float = 10.0) -> int:
    """Poll until a chat answers `status` (another process hears of a change asynchronously)."""
    deadline = time.monotonic() + within
    seen = chat_status(gateway, tenant)
    while seen != status and time.monotonic() < deadline:
        time.sleep(0.05)  # polling an observable condition, bounded by the deadline
        seen = chat_status(gateway, tenant)
    return seen


@pytest.fixture
def start_gateway(tmp_path: Path, storage_url: str) -> Iterator[Callable[..., ThreadedGateway]]:
    """Start gateways on the test's storage (SQLite file or PostgreSQL), optionally with Redis."""
    running: list[ThreadedGateway] = []

    def start(redis_url: str | None = None) -> ThreadedGateway:
        path = tmp_path / f"money{len(running)}.toml"
        gateway = ThreadedGateway(write_config(path, money_toml(storage_url, redis_url))).start()
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        gateway.stop()


def test_a_free_plan_with_a_monthly_allowance_chats_right_after_registering(start_gateway) -> None:
    gateway = start_gateway()
    tenant = register(gateway, "free")
    [invoice] = cabinet(gateway, "GET", "/invoices", tenant.session)["invoices"]

    status = chat_status(gateway, tenant)

    # Its 0.00 invoice was paid as it was opened: active at once, with the month's allowance of 1.00.
    assert (invoice["amountMicros"], invoice["status"]) == (0, "paid")
    assert status == 200


def test_a_budget_of_zero_refuses_every_request_that_costs_with_402(start_gateway) -> None:
    gateway = start_gateway()
    tenant = register(gateway, "pro")
    operator(gateway, f"/organizations/{tenant.organization_id}/top-up", {"amountMicros": 10_000_000})
    assert chat_status(gateway, tenant) == 200

    rule = cabinet(
        gateway,
        "POST",
        "/policy-rules",
        tenant.session,
        {
            "subjectType": "organization",
            "effect": "allow",
            "models": ["*"],
            "budget": {"amountMicros": 0, "period": "day"},
        },
    )
    frozen = chat_status(gateway, tenant)
    cabinet(gateway, "PATCH", f"/policy-rules/{rule['id']}", tenant.session, {"budget": None})
    thawed = chat_status(gateway, tenant)

    assert (frozen, thawed) == (402, 200)


def test_a_plan_change_takes_effect_at_once_in_the_gateway_that_made_it(start_gateway) -> None:
    gateway = start_gateway()
    tenant = register(gateway, "pro")

    unpaid = chat_status(gateway, tenant)  # the key is now cached with plan "pro"
    operator(gateway, f"/organizations/{tenant.organization_id}/plan", {"planCode": "enterprise"})
    on_credit = chat_status(gateway, tenant)
    operator(gateway, f"/organizations/{tenant.organization_id}/plan", {"planCode": "pro"})
    back = chat_status(gateway, tenant)

    assert (unpaid, on_credit, back) == (402, 200, 402)


@pytest.mark.parametrize("setup", ["postgres", "postgres+redis", "sqlite", "sqlite+redis"])
def test_a_plan_change_reaches_every_other_gateway_process(
    setup: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # SQLite without Redis: the two gateways share the host channel file beside the database.
    backend, _, redis = setup.partition("+")
    storage = (
        request.getfixturevalue("fresh_pg_url") if backend == "postgres" else f"sqlite:///{tmp_path}/x.db"
    )
    redis_url = request.getfixturevalue("redis_url") if redis else None
    gateways = [
        ThreadedGateway(write_config(tmp_path / f"g{n}.toml", money_toml(storage, redis_url))).start()
        for n in range(2)
    ]
    try:
        changer, server = gateways
        tenant = register(changer, "pro")
        cached = chat_status(server, tenant)  # the serving process caches the key with plan "pro"
        operator(changer, f"/organizations/{tenant.organization_id}/plan", {"planCode": "enterprise"})
        heard = eventually_status(server, tenant, 200)
    finally:
        for gateway in gateways:
            gateway.stop()

    assert (cached, heard) == (402, 200)


def test_a_cli_top_up_on_sqlite_takes_effect_in_a_running_gateway_and_says_so(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    config_path = tmp_path / "cli.toml"
    gateway = ThreadedGateway(write_config(config_path, money_toml(storage, None))).start()
    try:
        tenant = register(gateway, "pro")
        assert chat_status(gateway, tenant) == 402
        topped = subprocess.run(
            [
                sys.executable,
                "-m",
                "modelgate",
                "billing",
                "top-up",
                tenant.organization_id,
                "5",
                "--config",
                str(config_path),
            ],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=60,
        )
        status = eventually_status(gateway, tenant, 200, within=5.0)
    finally:
        gateway.stop()
    helped = subprocess.run(
        [sys.executable, "-m", "modelgate", "billing", "--help"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
    )

    assert topped.returncode == 0, topped.stderr
    assert "credited 5.00 USD" in topped.stdout
    assert "notified running gateways on modelgate_billing (the host channel)" in topped.stdout
    assert "not notified" not in topped.stdout and topped.stderr == ""
    assert status == 200
    assert "needed for SQLite" not in helped.stdout
    assert "the channel file beside a SQLite database" in " ".join(helped.stdout.split())


def test_a_starting_gateway_grants_the_months_allowance_to_activated_organizations(
    start_gateway, storage_url: str
) -> None:
    first = start_gateway()
    tenant = register(first, "free")
    first.stop()
    # Activated in an earlier month: this month's allowance is still due.
    asyncio.run(_activate_without_allowance(storage_url, tenant.organization_id))

    second = start_gateway()
    granted = asyncio.run(_allowance_granted(storage_url, tenant.organization_id, within=10.0))

    assert granted
    assert chat_status(second, tenant) == 200


async def _activate_without_allowance(storage_url: str, organization_id: str) -> None:
    db = await open_database(storage_url)
    try:
        await db.execute("UPDATE organizations SET activated_at = 1.0 WHERE id = $1", organization_id)
    finally:
        await db.close()


async def _allowance_granted(storage_url: str, organization_id: str, *, within: float) -> bool:
    """Poll storage until the organization's allowance event of this month exists."""
    db = await open_database(storage_url)
    try:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if await db.fetchval(
                "SELECT 1 FROM balance_events WHERE id = $1", allowance_event_id(organization_id, time.time())
            ):
                return True
            await asyncio.sleep(0.05)  # polling an observable condition, bounded by the deadline
        return False
    finally:
        await db.close()


def test_adjustments_reach_the_running_gateway_through_the_api_and_the_cli(
    start_gateway, storage_url: str, tmp_path: Path
) -> None:
    gateway = start_gateway()
    tenant = register(gateway, "pro")
    operator(gateway, f"/organizations/{tenant.organization_id}/top-up", {"amountMicros": 1_000_000})
    config_path = tmp_path / "money0.toml"
    adjust = ["billing", "adjust", tenant.organization_id]

    funded = chat_status(gateway, tenant)
    frozen = operator(
        gateway,
        f"/organizations/{tenant.organization_id}/adjust",
        {"kind": "set", "amountMicros": 0, "reason": "x"},
    )
    after_freeze = chat_status(gateway, tenant)
    credited = _cli(*adjust, "credit", "1", "--reason", "goodwill", "--config", str(config_path))
    after_credit = eventually_status(gateway, tenant, 200)
    # Lowering a balance reaches a gateway on PostgreSQL through NOTIFY; on SQLite it goes through --url.
    where = ["--config", str(config_path)]
    if storage_url.startswith("sqlite"):
        where = ["--url", gateway.base_url, "--operator-token", OPERATOR_TOKEN]
    debited = _cli(*adjust, "debit", "5", "--reason", "chargeback", *where)
    after_debit = eventually_status(gateway, tenant, 402)

    assert (funded, frozen["balanceMicros"], after_freeze) == (200, 0, 402)
    assert credited.returncode == 0, credited.stderr
    assert after_credit == 200
    assert debited.returncode == 0, debited.stderr
    assert after_debit == 402


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "modelgate", *args], cwd=REPOSITORY, capture_output=True, text=True, timeout=60
    )
