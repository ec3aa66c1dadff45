"""Sessions: GET /api/auth/session, expiry, logout and password change."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.integration.cabinet.cabinet_client import Account, Cabinet
from tests.integration.cabinet.conftest import CabinetFactory, cabinet_config

NEW_PASSWORD = "a brand new passphrase"


async def test_session_describes_the_user_the_organization_and_the_expiry(cabinet: Cabinet) -> None:
    owner = await cabinet.register(legal_name="Session Corp", plan="pro")

    body = await cabinet.session(owner)

    assert body["kind"] == "session"
    assert body["user"]["email"] == owner.email
    assert body["user"]["role"] == "owner"
    assert body["user"]["id"].startswith("usr_")
    assert body["organization"]["legalName"] == "Session Corp"
    assert body["organization"]["planCode"] == "pro"
    assert body["organization"]["id"].startswith("org_")
    assert body["expiresAt"].endswith("Z")


async def test_the_session_lifetime_comes_from_the_config(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(session_ttl_seconds=90))
    owner = await cabinet.register()

    expires_at = await cabinet.db.fetchval("SELECT expires_at - created_at FROM sessions")
    shown = datetime.fromisoformat((await cabinet.session(owner))["expiresAt"]).timestamp()
    stored = await cabinet.db.fetchval("SELECT expires_at FROM sessions")

    assert expires_at == pytest.approx(90)
    assert abs(shown - stored) < 1


async def test_session_tokens_are_stored_only_as_a_hash(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    stored = await cabinet.db.fetch("SELECT token_hash FROM sessions")

    assert owner.token not in str(stored)
    assert len(stored) == 1 and len(stored[0]["token_hash"]) == 64


async def test_an_expired_session_is_401(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await cabinet.db.execute("UPDATE sessions SET expires_at = created_at - 1")

    reply = await cabinet.call("GET", "/auth/session", token=owner.token)

    assert (reply.status, reply.body) == (401, {"error": "invalid or expired session token"})


async def test_logout_ends_the_session_at_once(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    logout = await cabinet.call("POST", "/auth/logout", token=owner.token)
    after = await cabinet.call("GET", "/overview", token=owner.token)

    assert logout.status == 200
    assert after.status == 401
    assert "auth.logout" in [
        e["event"] for e in await cabinet.audit_events(await _login_again(cabinet, owner))
    ]


async def _login_again(cabinet: Cabinet, account: Account) -> Account:
    reply = await cabinet.login(account.email, account.password)
    return Account(reply.body["token"], account.email, account.password)


async def test_logout_leaves_the_users_other_sessions_alone(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    other = (await cabinet.login(owner.email)).body["token"]

    await cabinet.call("POST", "/auth/logout", token=owner.token)

    assert (await cabinet.call("GET", "/auth/session", token=other)).status == 200


async def test_password_change_ends_the_other_sessions_and_keeps_this_one(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    other = (await cabinet.login(owner.email)).body["token"]

    reply = await cabinet.call(
        "POST",
        "/auth/password",
        token=owner.token,
        json={"currentPassword": owner.password, "newPassword": NEW_PASSWORD},
    )

    assert (reply.status, reply.body) == (200, {"ok": True, "endedSessions": 1})
    assert (await cabinet.call("GET", "/auth/session", token=other)).status == 401
    assert (await cabinet.call("GET", "/auth/session", token=owner.token)).status == 200


async def test_after_a_password_change_only_the_new_password_logs_in(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await cabinet.call(
        "POST",
        "/auth/password",
        token=owner.token,
        json={"currentPassword": owner.password, "newPassword": NEW_PASSWORD},
    )

    assert (await cabinet.login(owner.email, owner.password)).status == 401
    assert (await cabinet.login(owner.email, NEW_PASSWORD)).status == 200
    assert "auth.password_changed" in [e["event"] for e in await cabinet.audit_events(owner)]


async def test_password_change_with_a_wrong_current_password_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call(
        "POST",
        "/auth/password",
        token=owner.token,
        json={"currentPassword": "not it at all", "newPassword": NEW_PASSWORD},
    )

    assert (reply.status, reply.body) == (400, {"error": "currentPassword is incorrect"})


async def test_the_new_password_must_meet_the_policy(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    short = await cabinet.call(
        "POST",
        "/auth/password",
        token=owner.token,
        json={"currentPassword": owner.password, "newPassword": "short"},
    )
    same_as_email = await cabinet.call(
        "POST",
        "/auth/password",
        token=owner.token,
        json={"currentPassword": owner.password, "newPassword": owner.email},
    )

    assert (short.status, short.body) == (400, {"error": "newPassword must be at least 10 characters"})
    assert (same_as_email.status, same_as_email.body) == (
        400,
        {"error": "newPassword must not be the e-mail address"},
    )


async def test_a_management_key_cannot_log_out_or_change_a_password(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    key = (await cabinet.create_management_key(owner)).body["secret"]

    logout = await cabinet.call("POST", "/auth/logout", token=key)
    password = await cabinet.call(
        "POST", "/auth/password", token=key, json={"currentPassword": "x" * 10, "newPassword": "y" * 10}
    )

    assert (logout.status, logout.body) == (
        400,
        {"error": "logout needs a session token, not a management key"},
    )
    assert password.status == 400
