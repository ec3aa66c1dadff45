"""The model API's view of organization API keys: an in-memory directory in front of the database.

Lookups are cached, but never past a revocation: the cabinet reports every revocation through
`key_revoked` inside its transaction; the directory drops the entry, keeps a tombstone so a lookup racing
the commit cannot re-cache the key, and broadcasts the revocation to the other gateway processes
(PostgreSQL NOTIFY delivered with the commit, Redis pub/sub when configured, and on SQLite the host channel
of modelgate/proxy/state/host_channel.py, which every lookup polls first). Without a channel that reaches
every process (several workers on a SQLite database whose channel file cannot be made, and no Redis) the cache
is off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from modelgate.domain.accounts import (
    PLAN_CHANNEL,
    balance_key,
    org_rpm_window,
    org_tag,
    org_tpm_window,
)
from modelgate.domain.api_keys import key_by_secret_hash
from modelgate.domain.errors import STORAGE_RETRY_AFTER, STORAGE_UNAVAILABLE, ServiceUnavailable
from modelgate.domain.tokens import hash_token
from modelgate.storage.database import Database, Executor
from modelgate.storage.presence import OUTAGE_READ_SECONDS, ProcessLease

log = logging.getLogger("modelgate.keys")

REVOCATION_CHANNEL = "modelgate_key_revoked"
_TOMBSTONE_SECONDS = 3600.0

Publisher = Callable[[str, str], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """An active API key as the model API needs it.

    The names of the key's and its organization's live counters are derived once here: a cached key
    serves many requests, and every one of them counts in these windows and that balance.
    """

    id: str
    organization_id: str
    alias: str
    system_id: str | None
    plan_code: str
    rpm_window: str = field(init=False, repr=False, compare=False)
    tpm_window: str = field(init=False, repr=False, compare=False)
    org_rpm_window: str = field(init=False, repr=False, compare=False)
    org_tpm_window: str = field(init=False, repr=False, compare=False)
    balance_counter: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        derived = {
            "rpm_window": f"rpm:k:{org_tag(self.organization_id)}:{self.id}",
            "tpm_window": f"tpm:k:{org_tag(self.organization_id)}:{self.id}",
            "org_rpm_window": org_rpm_window(self.organization_id),
            "org_tpm_window": org_tpm_window(self.organization_id),
            "balance_counter": balance_key(self.organization_id),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


class KeyDirectory:
    """Resolves presented secrets to active keys; a revocation is seen at once."""

    def __init__(self, db: Database, *, cache: bool = True, max_entries: int = 100_000) -> None:
        self._db = db
        self.cache_enabled = cache
        self._max = max_entries
        self._cache: OrderedDict[str, KeyRecord] = OrderedDict()
        self._tombstones: dict[str, float] = {}
        self._generation = 0
        self._publishers: list[Publisher] = []
        self._poll: Callable[[], None] | None = None
        self._lease: ProcessLease | None = None
        # False while this process may miss revocations (its lease lapsed): lookups read the database.
        self._trusted = True
        # The keys cached when trust was lost: served only while the database cannot be read (an outage, when
        # no revocation can commit either), so a database outage does not refuse every request.
        self._suspect: dict[str, KeyRecord] = {}

    def poll_before_lookups(self, poll: Callable[[], None]) -> None:
        """Run `poll` (the host channel's) first in every lookup: what other processes published is acted
        on before a cached key is used."""
        self._poll = poll

    def add_publisher(self, publish: Publisher) -> None:
        """A broadcaster (e.g. Redis pub/sub) told of every revocation made in this process."""
        self._publishers.append(publish)

    def use_lease(self, lease: ProcessLease) -> None:
        """PostgreSQL: revocations are acknowledged, and a revoke waits for every process (presence.py)."""
        self._lease = lease

    def distrust(self, keep_aside: bool = True) -> None:
        """Revocations may be missed from now on: every lookup reads the database until `trust`. With
        `keep_aside` the keys cached until now are served while the database cannot be read (an outage:
        `[storage] serve_cached_during_outage`); without, such a lookup fails."""
        self._trusted = False
        if keep_aside:
            self._suspect.update(self._cache)
        self.forget_all()

    def trust(self) -> None:
        self._trusted = True
        self._suspect.clear()

    async def start(self) -> None:
        """Hear revocations and plan changes made by other processes on the same database."""
        lease = self._lease
        forget, forget_organization = self.forget, self.forget_organization
        if lease is not None:
            await self._db.listen(REVOCATION_CHANNEL, lease.acknowledging(forget))
            await self._db.listen(PLAN_CHANNEL, lease.acknowledging(forget_organization))
        else:
            await self._db.listen(REVOCATION_CHANNEL, forget)
            await self._db.listen(PLAN_CHANNEL, forget_organization)

    async def lookup(self, secret: str) -> KeyRecord | None:
        """The active key behind a secret, or None."""
        secret_hash = self.secret_hash(secret)
        record = self.cached(secret_hash)
        if record is not None:
            return record
        return await self.read(secret_hash)

    def secret_hash(self, secret: str) -> str:
        """The hash a lookup goes by, once what other processes published is acted on (the host channel's
        poll): `cached`, then `read` when that finds nothing, is `lookup` in two steps."""
        if self._poll is not None:
            self._poll()
        return hash_token(secret)

    def cached(self, secret_hash: str) -> KeyRecord | None:
        """The key this process knows by `secret_hash` (from `secret_hash`, just now), without a read."""
        return self._cache.get(secret_hash)

    async def read(self, secret_hash: str) -> KeyRecord | None:
        """The active key behind a hash that is not cached (`cached` found nothing), or None."""
        if secret_hash in self._tombstones:
            return None
        generation = self._generation
        suspect = self._suspect.get(secret_hash) if self._suspect else None
        if suspect is None:
            try:
                found = await key_by_secret_hash(self._db, secret_hash)
            except Exception as exc:  # a reset connection too: not the client leaving
                raise ServiceUnavailable(STORAGE_UNAVAILABLE, headers=STORAGE_RETRY_AFTER) from exc
        else:
            try:  # a database that does not answer (a partition) must not hold the request either
                found = await asyncio.wait_for(key_by_secret_hash(self._db, secret_hash), OUTAGE_READ_SECONDS)
            except Exception:
                return suspect  # the database is out of reach: the key as it was when trust was lost
        if found is None or found.key.status != "active":
            self._suspect.pop(secret_hash, None)
            return None
        key = found.key
        record = KeyRecord(key.id, key.organization_id, key.alias, key.system_id, found.plan_code)
        # A revocation heard while we were reading may concern this very key: do not cache it then.
        if self.cache_enabled and self._trusted and generation == self._generation:
            self._cache[secret_hash] = record
            if len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return record

    def forget(self, secret_hash: str) -> None:
        """Drop a key from the cache and refuse to cache it again (a revocation heard here)."""
        self._generation += 1
        self._cache.pop(secret_hash, None)
        self._suspect.pop(secret_hash, None)
        now = time.monotonic()
        self._tombstones[secret_hash] = now + _TOMBSTONE_SECONDS
        if len(self._tombstones) > 10_000:
            self._tombstones = {h: t for h, t in self._tombstones.items() if t > now}

    def forget_all(self) -> None:
        """Drop every cached key (revocations may have been missed): the next lookups read them afresh."""
        self._generation += 1
        self._cache.clear()

    def forget_organization(self, organization_id: str) -> None:
        """Drop an organization's cached keys (its plan changed); the next lookup reads them afresh."""
        self._generation += 1  # a lookup reading the old plan while we drop must not cache it
        stale = [h for h, record in self._cache.items() if record.organization_id == organization_id]
        for secret_hash in stale:
            del self._cache[secret_hash]

    async def key_revoked(self, secret_hash: str, tx: Executor) -> Callable[[], Awaitable[object]] | None:
        """The cabinet's revocation sink: called inside the revoke transaction, before commit. On PostgreSQL
        it returns what the cabinet awaits after the commit, before answering: every live process acted on
        the revocation (a process kept busy may otherwise serve the next request before it reads the NOTIFY:
        7 of 200 revoked keys were accepted so)."""
        self.forget(secret_hash)
        settled = None
        if self._lease is not None:
            # Sent through the transaction, so other processes hear it exactly when the revocation commits.
            settled = partial(
                self._lease.settled, await self._lease.send(tx, REVOCATION_CHANNEL, secret_hash)
            )
        elif self._db.dialect == "postgres":
            await tx.execute("SELECT pg_notify($1, $2)", REVOCATION_CHANNEL, secret_hash)
        for publish in self._publishers:
            await publish(REVOCATION_CHANNEL, secret_hash)
        return settled
