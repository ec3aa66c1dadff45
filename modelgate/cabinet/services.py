"""What the cabinet app needs from its host: the config, the database and the key revocation sink."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from modelgate.cabinet.sessions import create_session
from modelgate.config import Config
from modelgate.domain.accounts import Accounts
from modelgate.domain.events import BalanceEvent
from modelgate.storage.database import Database, Executor


class KeyRevocationSink(Protocol):
    """Tells the model API that an API key was revoked.

    Called inside the revoke transaction, before commit, so a PostgreSQL NOTIFY sent through `tx` is
    delivered atomically with the commit. Raising rolls the revocation back (answered as a 400). What it
    returns, when not None, is awaited after the commit, before the revoke answers (every gateway process
    acting on the revocation: storage/presence.py).
    """

    async def key_revoked(self, secret_hash: str, tx: Executor) -> Callable[[], Awaitable[object]] | None: ...


class NullKeySink:
    """A sink for a standalone cabinet: the model API reads key status from the database anyway."""

    async def key_revoked(self, secret_hash: str, tx: Executor) -> None:
        return None


class BillingSink(Protocol):
    """Tells the model API that money or policy changed, so its live counters follow at once.

    Called AFTER the cabinet's transaction committed, exactly once, in the process that made the change.
    """

    async def balance_changed(self, event: BalanceEvent) -> None:
        """A committed balance event (payment, top-up, operator adjustment) to apply to live counters."""
        ...

    async def policy_changed(self, organization_id: str) -> None:
        """A policy rule of the organization was created, changed or deleted."""
        ...

    async def plan_changed(self, organization_id: str) -> None:
        """The organization moved to another plan: API keys cached with the old plan must be dropped in
        every process."""
        ...


class NullBillingSink:
    """A sink for a standalone cabinet: nothing caches billing state."""

    async def balance_changed(self, event: BalanceEvent) -> None:
        return None

    async def policy_changed(self, organization_id: str) -> None:
        return None

    async def plan_changed(self, organization_id: str) -> None:
        return None


@dataclass(slots=True)
class CabinetServices:
    """Everything a cabinet handler may use, built once by the host and passed in explicitly."""

    config: Config
    db: Database
    key_sink: KeyRevocationSink
    billing_sink: BillingSink = field(default_factory=NullBillingSink)
    # The gateway's live counters, for the meters (`cabinet.meters`); None for a standalone cabinet.
    accounts: Accounts | None = None

    async def create_session(self, tx: Executor, user_id: str, org_id: str) -> str:
        """Open a session with the configured lifetime (for OIDC and other logins); returns its token."""
        return await create_session(tx, user_id, org_id, ttl_seconds=self.config.cabinet.session_ttl_seconds)


SERVICES = web.AppKey("cabinet_services", CabinetServices)


def services_of(request: web.Request) -> CabinetServices:
    """The services of the cabinet app serving this request."""
    return request.app[SERVICES]
