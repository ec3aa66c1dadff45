"""POST /api/auth/login: credentials, and one message for every failure (throttling has its own file)."""

from __future__ import annotations

from tests.integration.cabinet.cabinet_client import Cabinet, unique_email

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
