"""Login throttling: growing delays per (account, client address), bounds per address and per account that
an attacker cannot turn against the owner's own address, shared by every process on the database.

Clients come from distinct real loopback addresses (127.0.0.x) bound as the connection's source, so the
server sees exactly what it would see from different machines."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import orjson
import pytest
from aiohttp import web

from modelgate.cabinet.app import build_cabinet_app
from modelgate.cabinet.services import CabinetServices
from modelgate.storage import apply_migrations, open_database
from tests.integration.cabinet.cabinet_client import PASSWORD, Cabinet, RecordingSink, Reply, unique_email
from tests.integration.cabinet.conftest import CabinetFactory, cabinet_config

LoginFrom = Callable[[str, str, str], Awaitable[Reply]]
WRONG = "not the password at all"


@pytest.fixture
async def login_from(cabinet: Cabinet) -> AsyncIterator[LoginFrom]:
    """POST /api/auth/login from a given loopback source address of the `cabinet` server."""
    sessions: dict[str, aiohttp.ClientSession] = {}

    async def login(address: str, email: str, password: str) -> Reply:
        if address not in sessions:
            connector = aiohttp.TCPConnector(local_addr=(address, 0))
            sessions[address] = aiohttp.ClientSession(connector=connector)
        url = cabinet.client.make_url("/api/auth/login")
        async with sessions[address].post(url, json={"email": email, "password": password}) as resp:
            raw = await resp.read()
            return Reply(resp.status, orjson.loads(raw), resp.headers, raw)

    yield login
    for session in sessions.values():
        await session.close()


async def _unblock(cabinet: Cabinet) -> None:
    # Move every wait into the past instead of sleeping through it.
    await cabinet.db.execute("UPDATE login_attempts SET blocked_until = blocked_until - 100000")


async def test_an_attacker_failing_50_times_from_one_address_does_not_stop_the_owner_from_another(
    cabinet: Cabinet, login_from: LoginFrom
) -> None:
    owner = await cabinet.register()

    attacker = [(await login_from("127.0.0.2", owner.email, WRONG)).status for _ in range(50)]
    victim = await login_from("127.0.0.3", owner.email, PASSWORD)

    assert attacker[:5] == [401] * 5 and set(attacker[5:]) == {429}
    assert victim.status == 200


async def test_a_distributed_attack_is_bounded_per_account_but_not_for_the_owner_known_address(
    cabinet: Cabinet, login_from: LoginFrom
) -> None:
    owner = await cabinet.register()
    assert (await login_from("127.0.0.3", owner.email, PASSWORD)).status == 200
    # One guess from each of 20 addresses uses up the account's free failures (4 x 5)...
    spread = [(await login_from(f"127.0.1.{n}", owner.email, WRONG)).status for n in range(1, 21)]

    from_a_fresh_address = await login_from("127.0.2.1", owner.email, WRONG)
    from_the_owner_address = await login_from("127.0.0.3", owner.email, PASSWORD)

    assert spread == [401] * 20
    assert from_a_fresh_address.status == 429
    assert from_the_owner_address.status == 200


async def test_failures_on_many_accounts_from_one_address_limit_guessing_but_not_a_known_account(
    cabinet: Cabinet, login_from: LoginFrom
) -> None:
    owner = await cabinet.register()
    assert (await login_from("127.0.0.4", owner.email, PASSWORD)).status == 200
    # Spraying 20 accounts (one guess each) from the owner's address uses up the address's free failures.
    spray = [(await login_from("127.0.0.4", unique_email("spray"), WRONG)).status for _ in range(20)]

    another_account = await login_from("127.0.0.4", unique_email("spray"), WRONG)
    owner_again = await login_from("127.0.0.4", owner.email, PASSWORD)

    assert spray == [401] * 20
    assert another_account.status == 429
    assert owner_again.status == 200


async def test_repeated_failures_of_one_pair_wait_longer_each_time_up_to_the_cap(
    start_cabinet: CabinetFactory,
) -> None:
    cabinet = await start_cabinet(
        cabinet_config(login_max_failures=2, login_first_delay_seconds=10.0, login_lockout_seconds=35)
    )
    owner = await cabinet.register()
    for _ in range(2):
        assert (await cabinet.login(owner.email, WRONG)).status == 401
    waits = []
    for _ in range(4):
        throttled = await cabinet.login(owner.email, PASSWORD)
        assert throttled.status == 429
        waits.append(int(throttled.headers["Retry-After"]))
        await _unblock(cabinet)
        assert (await cabinet.login(owner.email, WRONG)).status == 401

    assert waits == [10, 20, 35, 35]


async def test_a_throttled_attempt_is_429_with_the_error_body_and_is_not_counted(
    start_cabinet: CabinetFactory,
) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=1, login_first_delay_seconds=60.0))
    owner = await cabinet.register()
    await cabinet.login(owner.email, WRONG)

    throttled = [await cabinet.login(owner.email, WRONG) for _ in range(5)]
    failures = await cabinet.db.fetchval(
        "SELECT failures FROM login_attempts WHERE subject LIKE 'pair:%' AND subject LIKE $1",
        f"%{owner.email}%",
    )

    assert {(r.status, r.headers["Retry-After"]) for r in throttled} == {(429, "60")}
    assert throttled[0].body == {"error": "too many failed login attempts; try again later"}
    assert failures == 1


async def test_the_wait_ends_after_its_time(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=2, login_first_delay_seconds=60.0))
    owner = await cabinet.register()
    for _ in range(2):
        await cabinet.login(owner.email, WRONG)
    assert (await cabinet.login(owner.email)).status == 429

    await _unblock(cabinet)

    assert (await cabinet.login(owner.email)).status == 200


async def test_unknown_emails_are_throttled_like_accounts(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=2))
    email = unique_email("ghost")
    for _ in range(2):
        await cabinet.login(email, WRONG)

    assert (await cabinet.login(email, WRONG)).status == 429


async def test_a_successful_login_clears_the_pair_failures(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=3))
    owner = await cabinet.register()
    for _ in range(2):
        await cabinet.login(owner.email, WRONG)
    assert (await cabinet.login(owner.email)).status == 200

    for _ in range(2):
        await cabinet.login(owner.email, WRONG)

    assert (await cabinet.login(owner.email)).status == 200


async def test_a_burst_of_parallel_guesses_cannot_outrun_the_bound(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=3, login_first_delay_seconds=60.0))
    owner = await cabinet.register()

    replies = await asyncio.gather(*(cabinet.login(owner.email, WRONG) for _ in range(12)))

    assert sorted(r.status for r in replies) == [401] * 3 + [429] * 9


async def test_the_throttle_holds_across_processes_sharing_the_database(
    start_cabinet: CabinetFactory, aiohttp_client, storage_url: str
) -> None:
    config = cabinet_config(login_max_failures=2, login_first_delay_seconds=60.0)
    first = await start_cabinet(config)
    owner = await first.register()
    for _ in range(2):
        await first.login(owner.email, WRONG)
    # A second gateway process: its own connection pool, same database.
    other_db = await open_database(storage_url)
    try:
        await apply_migrations(other_db)
        root = web.Application()
        root.add_subapp("/api", build_cabinet_app(CabinetServices(config, other_db, RecordingSink())))
        second = Cabinet(await aiohttp_client(root), other_db, RecordingSink())

        assert (await second.login(owner.email)).status == 429
    finally:
        await other_db.close()


async def test_change_password_guesses_are_throttled_like_logins(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=2, login_first_delay_seconds=60.0))
    owner = await cabinet.register()

    replies = [
        await cabinet.call(
            "POST",
            "/auth/password",
            token=owner.token,
            json={"currentPassword": f"guess number {n}", "newPassword": "a brand new passphrase"},
        )
        for n in range(3)
    ]

    assert [r.status for r in replies] == [400, 400, 429]


async def test_forgotten_rows_are_removed_by_later_attempts(cabinet: Cabinet) -> None:
    await cabinet.db.execute(
        "INSERT INTO login_attempts (subject, failures, last_failure_at, forget_at)"
        " VALUES ('account:old@example.com', 3, 1.0, 2.0)"
    )

    await cabinet.login(unique_email("later"), WRONG)
    subjects = [r["subject"] for r in await cabinet.db.fetch("SELECT subject FROM login_attempts")]

    assert "account:old@example.com" not in subjects
    assert len(subjects) == 3  # the new attempt's pair, address and account
