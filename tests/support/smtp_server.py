"""A real SMTP server on loopback (aiosmtpd) that keeps what it receives, for the mail tests: plain, or with
STARTTLS under a self-signed certificate made for the test (tests/support/tls_files.py), optionally
requiring a login."""

from __future__ import annotations

import asyncio
import queue
import ssl
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


@dataclass
class Inbox:
    """What the server received: each message and the login it came with."""

    messages: queue.Queue[tuple[Message, str | None]] = field(default_factory=queue.Queue)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        login = session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None
        self.messages.put((message_from_bytes(envelope.original_content or envelope.content), login))
        return "250 OK"

    async def next(self) -> tuple[Message, str | None]:
        """The next message received (and the user it logged in as), waiting at most 15 seconds."""
        return await asyncio.to_thread(self.messages.get, True, 15.0)

    def empty(self) -> bool:
        """Whether nothing arrived (yet)."""
        return self.messages.empty()


class SmtpServer:
    """An aiosmtpd server on 127.0.0.1:`port` (its own thread and loop); `users` makes it require a login."""

    def __init__(
        self,
        port: int,
        *,
        certificate: tuple[Path, Path] | None = None,
        users: dict[str, str] | None = None,
    ) -> None:
        self.inbox = Inbox()
        self.port = port
        tls_context = None
        if certificate is not None:
            tls_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls_context.load_cert_chain(*map(str, certificate))
        accounts = dict(users or {})

        def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
            ok = (
                isinstance(data, LoginPassword)
                and accounts.get(data.login.decode()) == data.password.decode()
            )
            return AuthResult(success=ok, handled=False, auth_data=data if ok else None)

        self._controller = Controller(
            self.inbox,
            hostname="127.0.0.1",
            port=port,
            tls_context=tls_context,
            require_starttls=certificate is not None,
            auth_required=bool(accounts),
            authenticator=authenticate if accounts else None,
        )

    def __enter__(self) -> SmtpServer:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()
