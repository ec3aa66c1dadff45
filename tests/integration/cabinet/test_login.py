"""POST /api/auth/login: credentials, one message for every failure, and throttling across processes."""

from __future__ import annotations

from aiohttp import web

from cabinet.app import build_cabinet_app
from cabinet.services import CabinetServices
from cabinet.storage import apply_migrations, open_database
from tests.integration.cabinet.cabinet_client import Cabinet, RecordingSink, unique_email
from tests.integration.cabinet.conftest import CabinetFactory, cabinet_config

BAD_CREDENTIALS = {"error": "invalid e-mail or password"}


async def test_login_answers_200_with_a_new_session_token(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.login(owner.email)

    assert reply.status == 200
    assert reply.body["email"] == owner.email
    assert reply.body["token"] != owner.token
    assert (await cabinet.call("GET", "/auth/session", token=reply.body["token"])).status == 200


async def test_wrong_password_and_unknown_email_get_the_same_401(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    wrong_password = await cabinet.login(owner.email, "not the password")
    unknown_email = await cabinet.login(unique_email("nobody"), "not the password")

    assert (wrong_password.status, wrong_password.body) == (401, BAD_CREDENTIALS)
    assert (unknown_email.status, unknown_email.body) == (401, BAD_CREDENTIALS)


async def test_login_with_missing_or_mistyped_fields_is_400(cabinet: Cabinet) -> None:
    missing = await cabinet.call("POST", "/auth/login", json={"email": "a@example.com"})
    mistyped = await cabinet.call("POST", "/auth/login", json={"email": ["a@example.com"], "password": "x"})

    assert (missing.status, missing.body) == (400, {"error": "password is required"})
    assert (mistyped.status, mistyped.body) == (400, {"error": "email must be a string"})


async def test_login_and_its_failures_are_audited(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await cabinet.login(owner.email, "not the password")
    await cabinet.login(owner.email)

    events = [e["event"] for e in await cabinet.audit_events(owner)]

    assert events[:2] == ["auth.login", "auth.login_failed"]


async def test_repeated_failures_lock_the_account_with_429_and_retry_after(
    start_cabinet: CabinetFactory,
) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=3, login_lockout_seconds=120))
    owner = await cabinet.register()
    for _ in range(3):
        assert (await cabinet.login(owner.email, "wrong password")).status == 401

    locked = await cabinet.login(owner.email)

    assert locked.status == 429
    assert set(locked.body) == {"error"}
    assert 1 <= int(locked.headers["Retry-After"]) <= 120


async def test_a_lockout_ends_after_its_time(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=2, login_lockout_seconds=60))
    owner = await cabinet.register()
    for _ in range(2):
        await cabinet.login(owner.email, "wrong password")
    # Move the lockout into the past instead of sleeping.
    await cabinet.db.execute(
        "UPDATE login_throttle"
        " SET window_started_at = window_started_at - 120, locked_until = locked_until - 120"
    )

    assert (await cabinet.login(owner.email)).status == 200


async def test_unknown_emails_are_throttled_like_accounts(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=2))
    email = unique_email("ghost")
    for _ in range(2):
        await cabinet.login(email, "wrong password")

    assert (await cabinet.login(email, "wrong password")).status == 429


async def test_a_successful_login_clears_the_account_failures(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(login_max_failures=3))
    owner = await cabinet.register()
    for _ in range(2):
        await cabinet.login(owner.email, "wrong password")
    assert (await cabinet.login(owner.email)).status == 200

    for _ in range(2):
        await cabinet.login(owner.email, "wrong password")

    assert (await cabinet.login(owner.email)).status == 200


async def test_failures_from_one_address_across_many_accounts_are_throttled(
    start_cabinet: CabinetFactory,
) -> None:
    # The address limit is four times the account limit: 4 accounts x 1 failure each.
    cabinet = await start_cabinet(cabinet_config(login_max_failures=1))
    owner = await cabinet.register()
    for _ in range(4):
        assert (await cabinet.login(unique_email("spray"), "wrong password")).status == 401

    reply = await cabinet.login(owner.email)

    assert reply.status == 429
    assert "Retry-After" in reply.headers


async def test_the_lockout_holds_across_processes_sharing_the_database(
    start_cabinet: CabinetFactory, aiohttp_client, storage_url: str
) -> None:
    config = cabinet_config(login_max_failures=2)
    first = await start_cabinet(config)
    owner = await first.register()
    for _ in range(2):
        await first.login(owner.email, "wrong password")
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
