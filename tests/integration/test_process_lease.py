"""Process leases and acknowledged notifications on PostgreSQL (modelgate/storage/presence.py): what exact
revocation without Redis rests on (issue 33, finding 3). A sender waits for every live process — one that
acknowledged, renewed its lease since, or let it lapse counts as done — never for one that gave its lease
back, and never past the bound; a process that lost its notification connection stops trusting its caches
at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from modelgate.storage import Database, apply_migrations, open_database
from modelgate.storage.presence import WAIT_LIMIT_SECONDS, ProcessLease

CHANNEL = "test_channel"


@pytest.fixture
async def databases(fresh_pg_url: str) -> AsyncIterator[tuple[Database, Database]]:
    """Two connections to one throwaway database, as two gateway processes would hold them."""
    first, second = await open_database(fresh_pg_url), await open_database(fresh_pg_url)
    await apply_migrations(first)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


async def _send(db: Database, lease: ProcessLease, payload: str) -> str:
    async with db.transaction() as tx:
        return await lease.send(tx, CHANNEL, payload)


async def _started(
    db: Database, heard: list[str], *, lease_seconds: float = 3.0, ack: bool = True
) -> ProcessLease:
    lease = ProcessLease(db, lease_seconds=lease_seconds, renew_seconds=lease_seconds / 6)
    await db.listen(CHANNEL, lease.acknowledging(heard.append) if ack else heard.append)
    await lease.start()
    return lease


async def test_the_sender_answers_once_the_other_process_acknowledged(
    databases: tuple[Database, Database],
) -> None:
    sender_db, other_db = databases
    heard_here: list[str] = []
    heard_there: list[str] = []
    sender, other = await _started(sender_db, heard_here), await _started(other_db, heard_there)
    try:
        token = await _send(sender_db, sender, "sk-hash-1")

        assert await asyncio.wait_for(sender.settled(token), WAIT_LIMIT_SECONDS + 1) is True
        assert heard_there == ["sk-hash-1"]  # acted on before the sender went on
    finally:
        await other.stop()
        await sender.stop()


async def test_a_process_that_hears_but_never_acknowledges_is_waited_for_until_it_renews(
    databases: tuple[Database, Database],
) -> None:
    """A renewal on the notification connection returns only after the notifications committed before it
    were handled there: it counts as an acknowledgement."""
    sender_db, other_db = databases
    heard_there: list[str] = []
    sender = await _started(sender_db, [])
    silent = await _started(other_db, heard_there, lease_seconds=1.2, ack=False)
    try:
        token = await _send(sender_db, sender, "sk-hash-2")
        started = time.monotonic()

        assert await sender.settled(token) is True
        assert [message.split()[0] for message in heard_there] == ["sk-hash-2"]
        assert time.monotonic() - started < WAIT_LIMIT_SECONDS
    finally:
        await silent.stop()
        await sender.stop()


async def test_a_process_that_gave_its_lease_back_is_not_waited_for(
    databases: tuple[Database, Database],
) -> None:
    sender_db, other_db = databases
    sender = await _started(sender_db, [])
    stopped = await _started(other_db, [], ack=False, lease_seconds=30.0)  # would hold the sender 30 s
    await stopped.stop()
    token = await _send(sender_db, sender, "sk-hash-3")
    started = time.monotonic()
    try:
        assert await sender.settled(token) is True
        assert time.monotonic() - started < 1.0
    finally:
        await sender.stop()


async def test_a_vanished_process_is_waited_for_no_longer_than_its_lease(
    databases: tuple[Database, Database], fresh_pg_url: str
) -> None:
    """A process that died without giving its lease back (its row stays) holds a revoke at most until the
    lease lapses — and by then it could not trust its caches either."""
    sender_db, _ = databases
    sender = await _started(sender_db, [])
    admin = await asyncpg.connect(fresh_pg_url)
    try:
        await admin.execute(
            "INSERT INTO gateway_processes (id, renewed_at, lease_until)"
            " VALUES ('gw-dead', EXTRACT(EPOCH FROM clock_timestamp()) - 1,"
            " EXTRACT(EPOCH FROM clock_timestamp()) + 1.5)"
        )
        token = await _send(sender_db, sender, "sk-hash-4")
        started = time.monotonic()

        assert await sender.settled(token) is True
        assert 0.5 < time.monotonic() - started < WAIT_LIMIT_SECONDS
    finally:
        await admin.close()
        await sender.stop()


async def test_a_process_whose_lease_is_renewed_but_never_acknowledges_is_given_up_on_at_the_bound(
    databases: tuple[Database, Database], fresh_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row renewed by something that never renews after the commit (here: a renewal written before it
    that reaches far ahead): the sender stops at WAIT_LIMIT_SECONDS and answers False (logged)."""
    monkeypatch.setattr("modelgate.storage.presence.WAIT_LIMIT_SECONDS", 1.0)
    sender_db, _ = databases
    sender = await _started(sender_db, [])
    admin = await asyncpg.connect(fresh_pg_url)
    try:
        await admin.execute(
            "INSERT INTO gateway_processes (id, renewed_at, lease_until)"
            " VALUES ('gw-stuck', EXTRACT(EPOCH FROM clock_timestamp()) - 1,"
            " EXTRACT(EPOCH FROM clock_timestamp()) + 60)"
        )
        token = await _send(sender_db, sender, "sk-hash-5")

        assert await asyncio.wait_for(sender.settled(token), 5) is False
    finally:
        await admin.close()
        await sender.stop()


async def test_a_lost_notification_connection_ends_the_trust_at_once_and_a_renewal_restores_it(
    databases: tuple[Database, Database], fresh_pg_url: str
) -> None:
    _, process_db = databases
    lease = await _started(process_db, [])
    lost, regained = asyncio.Event(), asyncio.Event()
    lease.on_trust_lost(lost.set)
    lease.on_trust_regained(regained.set)
    admin = await asyncpg.connect(fresh_pg_url)
    try:
        assert lease.trusted
        # Every connection of the process goes, its notification connection with them.
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )

        await asyncio.wait_for(lost.wait(), 5)
        assert not lease.trusted
        await asyncio.wait_for(regained.wait(), 10)  # reconnected, renewed
        assert lease.trusted
    finally:
        await admin.close()
        await lease.stop()


async def test_a_lease_that_cannot_be_renewed_lapses_within_its_length(
    databases: tuple[Database, Database], fresh_pg_url: str
) -> None:
    """The notification connection stays open but nothing comes back on it (a stuck database session):
    the lease lapses and the caches are distrusted, although no connection was seen lost."""
    _, process_db = databases
    lease = await _started(process_db, [], lease_seconds=1.2)
    lost = asyncio.Event()
    lease.on_trust_lost(lost.set)
    admin = await asyncpg.connect(fresh_pg_url)
    try:
        async with admin.transaction():
            # The renewals wait behind this row lock for as long as the transaction is open.
            await admin.execute("SELECT * FROM gateway_processes WHERE id = $1 FOR UPDATE", lease.id)
            started = time.monotonic()
            await asyncio.wait_for(lost.wait(), 5)
            assert time.monotonic() - started < 1.2
    finally:
        await admin.close()
        await lease.stop()
