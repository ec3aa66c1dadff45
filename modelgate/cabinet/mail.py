"""What the cabinet sends to an address: invitations, address verification, password reset and address
change, each a plain-text message with one link built on `server.public_url`.

A message goes into the outbox inside the caller's transaction (modelgate/cabinet/mail_outbox.py); after
the commit `sent()` wakes the SMTP sender. Without `[email]` the message is the operator's: the log says a
link is waiting (never the link: it carries a token), `modelgate mail pending` shows it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web

from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.mail_outbox import enqueue_mail
from modelgate.cabinet.mail_sender import MailSender
from modelgate.config import Config
from modelgate.storage.database import Database, Executor

log = logging.getLogger("modelgate.cabinet.mail")

# Where each kind of link lands in the web cabinet (hash routes, so the token never reaches a server log).
PAGES = {
    "invitation": "accept-invitation",
    "verify": "verify-email",
    "register": "verify-email",
    "change": "verify-email",
    "reset": "reset-password",
}


@dataclass(frozen=True, slots=True)
class Letter:
    """One message to write: its kind (a key of PAGES), recipient, subject and the text before the link."""

    kind: str
    to: str
    subject: str
    text: str
    organization_id: str | None = None


class Mail:
    """The cabinet's mail: the outbox writer of every handler and, with `[email]`, the SMTP sender."""

    def __init__(self, config: Config, db: Database) -> None:
        self._config = config
        self.sender = MailSender(config.email, db) if config.email is not None else None

    @property
    def delivery(self) -> str:
        """`email` when messages go out by SMTP, `operator` when the operator passes links on."""
        return "email" if self.sender is not None else "operator"

    def link(self, kind: str, token: str) -> str:
        """The cabinet page a message's link opens, with its token."""
        base = self._config.server.public_url or (
            f"http://{self._config.server.host}:{self._config.server.port}"
        )
        return f"{base}/#/{PAGES[kind]}?token={quote(token, safe='')}"

    def link_to(self, page: str) -> str:
        """A cabinet page's address (`/#/<page>`), for a message that links to it."""
        base = self._config.server.public_url or (
            f"http://{self._config.server.host}:{self._config.server.port}"
        )
        return f"{base}/#/{page}"

    async def queue(self, tx: Executor, letter: Letter, token: str, at: float, expires_at: float) -> None:
        """Write the message with its link into the outbox, in the caller's transaction."""
        link = self.link(letter.kind, token)
        body = (
            f"{letter.text}\n\n{link}\n\n"
            f"The link works once, until {isoformat(expires_at)}. If you did not expect this message, ignore"
            " it: nothing happens unless the link is followed.\n"
        )
        mail_id = await enqueue_mail(
            tx,
            kind=letter.kind,
            organization_id=letter.organization_id,
            to_address=letter.to,
            subject=letter.subject,
            body=body,
            link=link,
            transport="smtp" if self.sender is not None else "operator",
            at=at,
            expires_at=expires_at,
        )
        if self.sender is None:
            log.warning(
                "no [email] configured: a %s link for %s waits for the operator (mail %s);"
                " see it with `modelgate mail pending`",
                letter.kind,
                letter.to,
                mail_id,
            )

    def sent(self) -> None:
        """The transaction that queued messages committed: send them now."""
        if self.sender is not None:
            self.sender.wake()


MAIL = web.AppKey("cabinet_mail", Mail)


def mail_of(request: web.Request) -> Mail:
    """The mail of the cabinet app serving this request."""
    return request.app[MAIL]
