"""Sends the outbox over SMTP (aiosmtplib) in the background of each gateway process.

A new message wakes the sender at once; a failed one stays in the outbox with its error and is tried again
after `[email] retry_first_delay_seconds`, doubling up to an hour. Several processes share one outbox: a
message is claimed (a short lease in the row) before it is sent, so it goes out once. Without `[email]`
nothing is sent: the outbox rows are the operator's (`modelgate mail pending`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from email.message import EmailMessage
from email.utils import make_msgid

import aiosmtplib

from modelgate.cabinet.clock import now
from modelgate.cabinet.mail_outbox import (
    OutgoingMail,
    claim_mail,
    due_mail,
    expire_old_mail,
    mark_failed,
    mark_sent,
    next_due_at,
)
from modelgate.config import EmailConfig
from modelgate.storage.database import Database

log = logging.getLogger("modelgate.cabinet.mail")

# Even with nothing due, look again this often: another process may have queued mail, or a lease lapsed.
POLL_SECONDS = 30.0
MAX_RETRY_DELAY_SECONDS = 3600.0


def retry_delay(config: EmailConfig, attempts: int) -> float:
    """The wait after the `attempts`-th failure (1, 2, …): the first delay, doubling, at most an hour."""
    return min(config.retry_first_delay_seconds * 2 ** max(attempts - 1, 0), MAX_RETRY_DELAY_SECONDS)


def _tls_context(config: EmailConfig) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=config.ca_file)


async def send_message(config: EmailConfig, mail: OutgoingMail) -> None:
    """Hand one message to the SMTP server; raises on any failure (refusal, TLS, timeout, connection)."""
    message = EmailMessage()
    message["From"] = config.from_address
    message["To"] = mail.to_address
    message["Subject"] = mail.subject
    message["Message-ID"] = make_msgid(domain=config.from_address.rpartition("@")[2].rstrip(">"))
    message.set_content(mail.body or "")
    await aiosmtplib.send(
        message,
        hostname=config.host,
        port=config.port,
        username=config.username,
        password=config.password,
        use_tls=config.security == "tls",
        start_tls=config.security == "starttls",
        tls_context=_tls_context(config) if config.security != "none" else None,
        timeout=config.timeout_seconds,
    )


def _reason(exc: BaseException) -> str:
    # The SMTP server's words (they name no secret: the password is never part of a reply) and the kind.
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class MailSender:
    """The background loop that empties this process's share of the outbox."""

    def __init__(self, config: EmailConfig, db: Database) -> None:
        self._config = config
        self._db = db
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """A message was committed: look at the outbox now."""
        self._wake.set()

    def start(self) -> None:
        """Start the loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="modelgate-mail-sender")

    async def stop(self) -> None:
        """Stop the loop; a message being sent is abandoned and retried later (its lease lapses)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def send_due(self) -> int:
        """Send every due message once; returns how many were sent."""
        at = now()
        await expire_old_mail(self._db, at)
        sent = 0
        for mail in await due_mail(self._db, at):
            lease = now() + self._config.timeout_seconds * 3 + 30.0
            if not await claim_mail(self._db, mail, lease):
                continue
            try:
                await send_message(self._config, mail)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure of one message is that message's, never the loop's
                delay = retry_delay(self._config, mail.attempts + 1)
                await mark_failed(self._db, mail.id, _reason(exc), now() + delay)
                log.warning(
                    "mail %s (%s) to %s not sent, attempt %d; retrying in %.0f s: %s",
                    mail.id,
                    mail.kind,
                    mail.to_address,
                    mail.attempts + 1,
                    delay,
                    _reason(exc),
                )
                continue
            await mark_sent(self._db, mail.id, now())
            sent += 1
        return sent

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.send_due()
                due = await next_due_at(self._db)
            except asyncio.CancelledError:
                raise
            except Exception:  # storage away: keep the loop, try again after the poll interval
                log.exception("mail outbox could not be read")
                due = None
            wait = POLL_SECONDS if due is None else min(max(due - now(), 0.05), POLL_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
