"""Password reset by a link sent to the address (single use, short-lived, throttled, audited, ends every
session) and password change with the current password (ends the other sessions, audited)."""

from __future__ import annotations

from tests.integration.cabinet.cabinet_client import PASSWORD, Account, Cabinet, Reply, unique_email
from tests.integration.cabinet.conftest import CabinetFactory, cabinet_config

NEW_PASSWORD = "a brand new passphrase"


async def _ask(cabinet: Cabinet, email: str) -> Reply:
    return await cabinet.call("POST", "/auth/password-reset", json={"email": email})


async def _confirm(cabinet: Cabinet, token: str, password: str = NEW_PASSWORD) -> Reply:
    return await cabinet.call(
        "POST", "/auth/password-reset/confirm", json={"token": token, "newPassword": password}
    )


async def _reset_links(cabinet: Cabinet, email: str) -> int:
    return int(
        await cabinet.db.fetchval(
            "SELECT COUNT(*) FROM mail_outbox WHERE to_address = $1 AND kind = 'reset'", email
        )
    )


async def test_a_reset_sets_the_password_ends_every_session_and_is_audited(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    other_login = await cabinet.login(owner.email)

    asked = await _ask(cabinet, owner.email)
    confirmed = await _confirm(cabinet, await cabinet.link_sent_to(owner.email, "reset"))

    assert asked.status == 202 and "token" not in asked.body
    assert confirmed.status == 200, confirmed.body
    assert confirmed.body == {"email": owner.email, "endedSessions": 2}
    for token in (owner.token, other_login.body["token"]):
        assert (await cabinet.call("GET", "/auth/session", token=token)).status == 401
    assert (await cabinet.login(owner.email, PASSWORD)).status == 401
    fresh = await cabinet.login(owner.email, NEW_PASSWORD)
    assert fresh.status == 200
    events = [e["event"] for e in await cabinet.audit_events(Account(fresh.body["token"], owner.email))]
    assert "auth.password_reset_requested" in events and "auth.password_reset" in events
    # Receiving the link proved the address.
    assert (await cabinet.session(Account(fresh.body["token"], owner.email)))["user"]["emailVerified"] is True


async def test_an_unknown_address_gets_the_same_answer_and_no_mail(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    stranger = unique_email("nobody")

    known = await _ask(cabinet, owner.email)
    unknown = await _ask(cabinet, stranger)

    assert (unknown.status, unknown.body) == (known.status, known.body)
    assert await _reset_links(cabinet, stranger) == 0


async def test_a_reset_link_works_once(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await _ask(cabinet, owner.email)
    token = await cabinet.link_sent_to(owner.email, "reset")

    first = await _confirm(cabinet, token)
    again = await _confirm(cabinet, token, "yet another passphrase")

    assert first.status == 200
    assert again.status == 400
    assert (await cabinet.login(owner.email, NEW_PASSWORD)).status == 200


async def test_an_expired_reset_link_is_refused(start_cabinet: CabinetFactory) -> None:
    cabinet = await start_cabinet(cabinet_config(password_reset_ttl_seconds=60))
    owner = await cabinet.register()
    await _ask(cabinet, owner.email)
    expires = await cabinet.db.fetchrow(
        "SELECT created_at, expires_at FROM email_links WHERE email = $1 AND purpose = 'reset'", owner.email
    )
    await cabinet.db.execute("UPDATE email_links SET expires_at = $1 WHERE purpose = 'reset'", 0.0)

    refused = await _confirm(cabinet, await cabinet.link_sent_to(owner.email, "reset"))

    assert expires is not None and expires["expires_at"] - expires["created_at"] == 60
    assert refused.status == 400
    assert (await cabinet.login(owner.email, PASSWORD)).status == 200


async def test_only_the_newest_reset_link_works(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await _ask(cabinet, owner.email)
    older = await cabinet.link_sent_to(owner.email, "reset")
    await _ask(cabinet, owner.email)
    newer = await cabinet.link_sent_to(owner.email, "reset")

    assert older != newer
    assert (await _confirm(cabinet, older)).status == 400
    assert (await _confirm(cabinet, newer)).status == 200


async def test_a_weak_new_password_is_400_and_the_link_still_works(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    await _ask(cabinet, owner.email)
    token = await cabinet.link_sent_to(owner.email, "reset")

    weak = await _confirm(cabinet, token, "short")
    good = await _confirm(cabinet, token)

    assert weak.status == 400 and "newPassword" in weak.body["error"]
    assert good.status == 200


async def test_reset_requests_are_throttled_per_address_without_saying_so(
    start_cabinet: CabinetFactory,
) -> None:
    cabinet = await start_cabinet(cabinet_config(email_links_per_hour=3))
    owner = await cabinet.register()  # its verification link counts: 2 resets fit in the hour

    answers = [await _ask(cabinet, owner.email) for _ in range(4)]

    assert {a.status for a in answers} == {202}
    assert len({str(a.body) for a in answers}) == 1
    assert await _reset_links(cabinet, owner.email) == 2


async def test_registrations_from_one_client_address_leave_its_reset_budget_whole(
    start_cabinet: CabinetFactory,
) -> None:
    # Everyone behind one address (an office's NAT, here the test's 127.0.0.1) registers: their verification
    # links go to their own addresses and are no link request of that client address.
    cabinet = await start_cabinet(cabinet_config(email_links_per_hour=3))
    accounts = [await cabinet.register() for _ in range(5)]

    assert (await _ask(cabinet, accounts[-1].email)).status == 202
    assert await _reset_links(cabinet, accounts[-1].email) == 1


async def test_a_password_change_needs_the_current_password_ends_other_sessions_and_old_reset_links(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    other = await cabinet.login(owner.email)
    await _ask(cabinet, owner.email)
    reset_token = await cabinet.link_sent_to(owner.email, "reset")

    wrong = await cabinet.call(
        "POST",
        "/auth/password",
        token=owner.token,
        json={"currentPassword": "not my password at all", "newPassword": NEW_PASSWORD},
    )
    changed = await cabinet.call(
        "POST",
        "/auth/password",
        token=owner.token,
        json={"currentPassword": PASSWORD, "newPassword": NEW_PASSWORD},
    )

    assert wrong.status == 400
    assert changed.body == {"ok": True, "endedSessions": 1}
    assert (await cabinet.call("GET", "/auth/session", token=other.body["token"])).status == 401
    assert (await cabinet.call("GET", "/auth/session", token=owner.token)).status == 200
    assert (await _confirm(cabinet, reset_token, "a third passphrase")).status == 400
    assert "auth.password_changed" in [e["event"] for e in await cabinet.audit_events(owner)]
