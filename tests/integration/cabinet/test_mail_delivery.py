"""E-mail delivery over SMTP to a real server on loopback (aiosmtpd): invitations, verification and reset
links built on `server.public_url`, STARTTLS with a certificate made for the test and a login whose password
comes from the environment, and an SMTP server that is down — the cabinet still answers, the failure is
logged and shown to the operator, and the message goes out once the server is back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from email.message import Message
from pathlib import Path
from typing import TypeVar

import pytest

from modelgate.cabinet.clock import now
from modelgate.cabinet.mail_outbox import OutgoingMail, waiting_mail
from modelgate.config import DEFAULT_CONFIG_PATH, Config, EmailConfig, load_config
from modelgate.storage import Database
from tests.integration.cabinet.cabinet_client import PASSWORD, Account, Cabinet, unique_email
from tests.integration.cabinet.conftest import CabinetFactory
from tests.support.gateway import free_port
from tests.support.mail_links import token_of_link
from tests.support.smtp_server import SmtpServer
from tests.support.tls_files import self_signed_certificate

PUBLIC_URL = "https://gateway.example.test"
T = TypeVar("T")


def mail_config(port: int, security: str = "none") -> Config:
    """The embedded defaults with `[email]` pointing at 127.0.0.1:`port` and a public URL."""
    config = load_config(None)
    email = EmailConfig(
        host="127.0.0.1",
        port=port,
        from_address="modelgate <gw@example.test>",
        security=security,
        retry_first_delay_seconds=0.2,
    )
    return replace(config, server=replace(config.server, public_url=PUBLIC_URL), email=email)


def text_of(message: Message) -> str:
    """The plain-text body of a received message."""
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode()


def link_in(body: str) -> str:
    """The one link of a message's text."""
    links = [line for line in body.splitlines() if line.startswith(PUBLIC_URL)]
    assert len(links) == 1, body
    return links[0]


async def test_an_invitation_is_mailed_with_a_link_on_the_public_url_and_the_link_accepts_it(
    start_cabinet: CabinetFactory,
) -> None:
    port = free_port()
    with SmtpServer(port) as smtp:
        cabinet = await start_cabinet(mail_config(port))
        owner = await cabinet.register(legal_name="Mailed Ltd")
        await smtp.inbox.next()  # the owner's own verification link
        email = unique_email("mailed")

        created = await cabinet.invite(owner, "admin", email)
        message, _ = await smtp.inbox.next()

    body = text_of(message)
    link = link_in(body)
    assert created.status == 201 and created.body["delivery"] == "email"
    assert "token" not in created.body
    assert (message["To"], message["Subject"]) == (email, "You are invited to join Mailed Ltd on modelgate")
    assert message["From"] == "modelgate <gw@example.test>"
    assert f"{owner.email} invited you to join the organization Mailed Ltd on modelgate as admin" in body
    assert link.startswith(f"{PUBLIC_URL}/#/accept-invitation?token=")
    accepted = await cabinet.call(
        "POST", "/invitations/accept", json={"token": token_of_link(link), "password": PASSWORD}
    )
    assert accepted.status == 200, accepted.body
    assert (await cabinet.session(await _login(cabinet, email)))["user"]["emailVerified"] is True


async def _login(cabinet: Cabinet, email: str) -> Account:
    reply = await cabinet.login(email)
    assert reply.status == 200, reply.body
    return Account(reply.body["token"], email)


async def test_a_sent_message_leaves_no_link_in_the_outbox(
    start_cabinet: CabinetFactory, db: Database
) -> None:
    port = free_port()
    with SmtpServer(port) as smtp:
        cabinet = await start_cabinet(mail_config(port))
        owner = await cabinet.register()
        message, _ = await smtp.inbox.next()

    async def stored() -> dict[str, object] | None:
        row = await db.fetchrow(
            "SELECT status, body, link, attempts FROM mail_outbox WHERE to_address = $1", owner.email
        )
        return row if row and row["status"] == "sent" else None

    assert message["Subject"] == "Confirm your e-mail address"
    assert await until(stored) == {"status": "sent", "body": None, "link": None, "attempts": 1}
    assert not [m for m in await waiting_mail(db, now()) if m.to_address == owner.email]


async def test_starttls_with_a_login_whose_password_comes_from_the_environment(
    start_cabinet: CabinetFactory, tmp_path: Path
) -> None:
    certificate = self_signed_certificate(tmp_path)
    port = free_port()
    toml = tmp_path / "mail.toml"
    toml.write_text(_toml_with_email(port, certificate[0]), encoding="utf-8")
    config = load_config(toml, env={"SMTP_SECRET": "s3cret-from-env"})
    assert config.email is not None and config.email.password == "s3cret-from-env"
    assert "s3cret" not in repr(config.email) and "s3cret" not in toml.read_text()
    with SmtpServer(port, certificate=certificate, users={"gateway": "s3cret-from-env"}) as smtp:
        cabinet = await start_cabinet(config)
        owner = await cabinet.register()
        message, login = await smtp.inbox.next()

    assert (message["To"], login) == (owner.email, "gateway")


def _toml_with_email(port: int, ca_file: Path) -> str:
    return DEFAULT_CONFIG_PATH.read_text(encoding="utf-8") + (
        f'\n[email]\nhost = "127.0.0.1"\nport = {port}\nsecurity = "starttls"\nusername = "gateway"\n'
        f'password_env = "SMTP_SECRET"\nfrom_address = "gw@example.test"\nca_file = "{ca_file}"\n'
        "retry_first_delay_seconds = 0.2\n"
    )


async def test_starttls_refuses_a_server_whose_certificate_it_does_not_trust(
    start_cabinet: CabinetFactory, db: Database, tmp_path: Path
) -> None:
    port = free_port()
    with SmtpServer(port, certificate=self_signed_certificate(tmp_path)) as smtp:
        # No ca_file: the system's CAs do not vouch for the test's certificate.
        cabinet = await start_cabinet(mail_config(port, security="starttls"))
        owner = await cabinet.register()
        mail = await _first_failure(db, owner.email)

        assert smtp.inbox.empty()
    assert mail.last_error is not None and "certificate" in mail.last_error.lower()


async def _first_failure(db: Database, email: str) -> OutgoingMail:
    # The sender's attempt is asynchronous: read the outbox until it records the failed attempt.
    async def failed() -> OutgoingMail | None:
        waiting = [m for m in await waiting_mail(db, now()) if m.to_address == email]
        return waiting[0] if waiting and waiting[0].attempts >= 1 else None

    return await until(failed)


async def until(check: Callable[[], Awaitable[T | None]]) -> T:
    """The first non-None result of `check`, asked every 50 ms for at most 15 seconds."""
    deadline = asyncio.get_running_loop().time() + 15.0
    while (result := await check()) is None:
        assert asyncio.get_running_loop().time() < deadline, "the outbox never reached the expected state"
        await asyncio.sleep(0.05)
    return result


async def test_a_down_smtp_server_loses_nothing_the_operator_sees_why_and_the_retry_delivers(
    start_cabinet: CabinetFactory, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()  # nothing listens here yet
    cabinet = await start_cabinet(mail_config(port))
    with caplog.at_level(logging.WARNING, logger="modelgate.cabinet.mail"):
        owner = await cabinet.register()
        invited = unique_email("patient")
        created = await cabinet.invite(owner, "member", invited)
        failed = await _first_failure(db, invited)

    assert created.status == 201  # the cabinet answered although the server is down
    assert failed.transport == "smtp" and failed.status == "pending"
    assert failed.last_error and ("Connect" in failed.last_error or "refused" in failed.last_error.lower())
    assert f"to {invited} not sent, attempt 1" in caplog.text
    assert failed.link is not None and token_of_link(failed.link) not in caplog.text

    with SmtpServer(port) as smtp:
        received = {}
        for _ in range(2):  # the owner's verification and the invitation, in either order
            message, _ = await smtp.inbox.next()
            received[message["To"]] = message
    assert set(received) == {owner.email, invited}
    assert link_in(text_of(received[invited])) == failed.link
