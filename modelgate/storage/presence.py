"""Which gateway processes share a PostgreSQL database, and a wait until each of them acted on a notification
(issue 33: a key revoked, a plan or a policy changed through one process is refused or applied by every
process on the very next request, without Redis). docs/architecture.md, "Revocation without Redis".

Each process holds a lease: a row of `gateway_processes` (0018) renewed every RENEW_SECONDS *on its
listening connection* for LEASE_SECONDS. PostgreSQL delivers every notification committed before a
statement started ahead of that statement's end, so a renewal that returns proves this process has run the
handlers of those notifications. A process trusts its caches (keys, plans, policies) only while its lease
holds: a lost listening connection or a renewal overdue ends the trust at once (`on_trust_lost`), and the
caches are then read from the database on every request until a renewal succeeds again (fails closed).

A sender sends a notification with a token and waits until every process registered before it either
acknowledged the token (a NOTIFY on ACK_CHANNEL, the common case: milliseconds), renewed its lease after
the commit, or let its lease lapse; at most WAIT_LIMIT_SECONDS, after which it answers anyway and names the
processes in a warning (with each renewal bounded by its lease, that happens only while the database itself
does not answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable

from modelgate.storage.database import Database, Executor, NotifyHandler

log = logging.getLogger("modelgate.storage")

ACK_CHANNEL = "modelgate_ack"
LEASE_SECONDS = 3.0
RENEW_SECONDS = 0.5
# The local end of trust comes this long before the lease ends in the database (clock-rate drift).
TRUST_MARGIN_SECONDS = 0.25
WAIT_LIMIT_SECONDS = LEASE_SECONDS + 2.0
# While this process distrusts its caches, how long a read of a key or policy it knew may take before what
# it knew is served (`[storage] serve_cached_during_outage`): a database that does not answer holds nothing.
OUTAGE_READ_SECONDS = 1.0
_EPOCH = "EXTRACT(EPOCH FROM statement_timestamp())::float8"
_RENEW = (
    "INSERT INTO gateway_processes (id, renewed_at, lease_until)"
    f" VALUES ($1, {_EPOCH}, {_EPOCH} + $2)"
    " ON CONFLICT (id) DO UPDATE SET renewed_at = EXCLUDED.renewed_at, lease_until = EXCLUDED.lease_until"
)
_PROCESSES = (
    "SELECT id, renewed_at, lease_until, EXTRACT(EPOCH FROM clock_timestamp())::float8 AS db_now"
    " FROM gateway_processes"
)


class ProcessLease:
    """This process's lease and the acknowledgements of its notifications (PostgreSQL only)."""

    def __init__(
        self, db: Database, *, lease_seconds: float = LEASE_SECONDS, renew_seconds: float = RENEW_SECONDS
    ) -> None:
        self._db = db
        self.id = "gw-" + secrets.token_hex(8)
        self._lease = lease_seconds
        self._renew_every = renew_seconds
        self.trusted = False
        self._lost: list[Callable[[], None]] = []
        self._regained: list[Callable[[], None]] = []
        self._lapse_timer: asyncio.TimerHandle | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        # Tokens awaited by this process: who acknowledged each, and an event set on every acknowledgement.
        self._awaited: dict[str, tuple[set[str], asyncio.Event]] = {}

    def on_trust_lost(self, callback: Callable[[], None]) -> None:
        """Called when this process may have missed a notification: drop caches, stop caching."""
        self._lost.append(callback)

    def on_trust_regained(self, callback: Callable[[], None]) -> None:
        """Called when a renewal succeeded after a lapse: caching may resume."""
        self._regained.append(callback)

    async def start(self) -> None:
        """Listen for acknowledgements and take the lease (after every other LISTEN of the process: a
        process registered hears every notification sent after its registration)."""
        await self._db.listen(ACK_CHANNEL, self._acknowledged)
        self._db.on_listen_lost(self._lapse)
        await self._db.execute(
            "DELETE FROM gateway_processes WHERE lease_until < EXTRACT(EPOCH FROM clock_timestamp()) - 60"
        )
        await self._renew()
        self._renewing = asyncio.get_running_loop().create_task(self._keep_renewing(), name="process-lease")

    async def stop(self) -> None:
        """Give the lease back (a clean shutdown): no sender waits for this process any more."""
        if self._renewing is not None:
            # Not cancelled mid-statement: a renewal cut off on the notification connection can leave it
            # unable to close. The renewal under way ends within its lease.
            self._stopping.set()
            await self._renewing
        if self._lapse_timer is not None:
            self._lapse_timer.cancel()
        self.trusted = False
        try:  # bounded: a database that does not answer must not hold the shutdown
            await asyncio.wait_for(
                self._db.execute("DELETE FROM gateway_processes WHERE id = $1", self.id), self._lease
            )
        except Exception as exc:  # its lease lapses by itself
            log.warning("could not give back the process lease %s: %r", self.id, exc)

    async def _renew(self) -> None:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        await self._db.execute_on_listener(_RENEW, self.id, self._lease)
        if self._lapse_timer is not None:
            self._lapse_timer.cancel()
        # A timer rather than a check per request: the request path stays as it was.
        self._lapse_timer = loop.call_at(sent + self._lease - TRUST_MARGIN_SECONDS, self._lapse)
        if not self.trusted:
            self.trusted = True
            for callback in self._regained:
                callback()

    async def _keep_renewing(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._renew_every)
                return
            try:
                await asyncio.wait_for(self._renew(), self._lease)
            except Exception as exc:  # the lease lapses by itself: caches are distrusted, nothing else breaks
                log.warning("process lease %s not renewed: %r", self.id, exc)

    def _lapse(self) -> None:
        if not self.trusted:
            return
        self.trusted = False
        log.warning("process lease %s lapsed: caches are read from the database until it is renewed", self.id)
        for callback in self._lost:
            callback()

    # -- acknowledged notifications -----------------------------------------------------------------

    def acknowledging(self, act: Callable[[str], object]) -> NotifyHandler:
        """A listener of "<payload> <token>" notifications: acts on the payload, then acknowledges the
        token (a payload without a token, e.g. from the CLI, is only acted on)."""

        def heard(message: str) -> None:
            payload, _, token = message.partition(" ")
            act(payload)
            if token:
                task = asyncio.ensure_future(self._acknowledge(token))
                task.add_done_callback(_log_failure)

        return heard

    async def _acknowledge(self, token: str) -> None:
        await self._db.notify(ACK_CHANNEL, f"{token} {self.id}")

    def _acknowledged(self, message: str) -> None:
        token, _, process = message.partition(" ")
        awaited = self._awaited.get(token)
        if awaited is not None:
            awaited[0].add(process)
            awaited[1].set()

    async def send(self, tx: Executor, channel: str, payload: str) -> str:
        """NOTIFY `payload` with a new token through `tx` (delivered at its commit); returns the token for
        `settled`, to be awaited after the commit."""
        token = secrets.token_hex(8)
        self._awaited[token] = (set(), asyncio.Event())
        await tx.execute("SELECT pg_notify($1, $2)", channel, f"{payload} {token}")
        return token

    def forget_token(self, token: str) -> None:
        """A token whose transaction rolled back: nothing will acknowledge it."""
        self._awaited.pop(token, None)

    async def settled(self, token: str) -> bool:
        """After the commit: wait until every process registered before now acknowledged the token,
        renewed its lease since, or let it lapse. False when WAIT_LIMIT_SECONDS passed first (logged)."""
        acked, event = self._awaited[token]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_LIMIT_SECONDS
        committed_by: float | None = None
        missing: set[str] = set()
        try:
            while True:
                event.clear()
                try:
                    rows = await self._db.fetch(_PROCESSES)
                except Exception as exc:
                    log.warning("cannot read the gateway processes to wait for: %r", exc)
                    rows = None
                if rows is not None:
                    if not rows:
                        return True
                    if committed_by is None:
                        committed_by = float(rows[0]["db_now"])
                    missing = {
                        row["id"]
                        for row in rows
                        if row["id"] not in acked
                        and row["renewed_at"] <= committed_by
                        and row["lease_until"] > row["db_now"]
                    }
                    if not missing:
                        return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    log.warning(
                        "notification %s not acknowledged by %s in time", token, sorted(missing) or "?"
                    )
                    return False
                # Woken by each acknowledgement; otherwise renewals and lapses are read again shortly.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(remaining, self._renew_every / 2))
        finally:
            self._awaited.pop(token, None)


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("acknowledgement not sent: %r", task.exception())
