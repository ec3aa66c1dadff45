"""Model API objects (stored responses, videos) bound to their organization and routing row.

Bindings are immutable once written, except for the context they carried, so they are cached; the cache is
filled the moment an id is seen in the upstream answer, before the client can know the id, and the database
row follows at once. A stored response's context (its reported input + output tokens: what a follow-up
naming it re-reads) is known only when it completes and is added then; so is the context of a conversation
(kind "conversation": the last response made in it). A process that cached a binding before its context was
known bounds a follow-up by the model's context window instead: never less than the truth.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TypeGuard

from modelgate.storage.database import Database, IntegrityViolation, StorageUnavailable

log = logging.getLogger("modelgate.objects")

# Ids are the provider's, opaque: any length up to this, in the characters a URL path segment carries as
# they are (RFC 3986 pchar: letters, digits, -._~!$&'()*+,;=:@). So a follow-up names the object in its path
# with nothing to decode, and no id holds a NUL, a control byte, a space, a slash or a percent sign.
MAX_OBJECT_ID_BYTES = 256
_OBJECT_ID = re.compile(rf"[A-Za-z0-9\-._~!$&'()*+,;=:@]{{1,{MAX_OBJECT_ID_BYTES}}}")
# How long a binding's INSERT is tried again while storage does not answer (a failover under way): past it
# the binding is known to this process only, and another one answers 404 for the object.
PERSIST_RETRY_SECONDS = 60.0
_FIRST_RETRY_SECONDS = 0.2


def is_object_id(value: object) -> TypeGuard[str]:
    """Whether `value` can be an object id the gateway binds and looks up."""
    return isinstance(value, str) and _OBJECT_ID.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class ObjectBinding:
    """Which organization owns an object and which row created it."""

    id: str
    organization_id: str
    kind: str
    model: str
    row_key: str
    context_tokens: int | None = None  # input + output tokens the provider reported for it (None: unknown)


class ObjectStore:
    """Bindings by id: memory first, then the database."""

    def __init__(self, db: Database, max_cached: int = 50_000) -> None:
        self._db = db
        self._cache: OrderedDict[str, ObjectBinding | None] = OrderedDict()
        self._max = max_cached
        self._pending: set[asyncio.Task] = set()
        self._inserting: dict[str, asyncio.Task] = {}  # id -> its INSERT, until done

    def remember(self, binding: ObjectBinding) -> None:
        """Cache now, persist in the background (the request is not held for it)."""
        self._put(binding.id, binding)
        task = self._background(self._persist(binding))
        self._inserting[binding.id] = task
        task.add_done_callback(lambda _task: self._inserting.pop(binding.id, None))

    def remember_context(self, object_id: str, context_tokens: int) -> None:
        """The context a stored response carried, known at its end: cached now, persisted in the background
        (after its binding's INSERT, when that is still under way)."""
        binding = self._cache.get(object_id)
        if binding is not None:
            self._put(object_id, replace(binding, context_tokens=context_tokens))
        self._background(self._persist_context(object_id, context_tokens, self._inserting.get(object_id)))

    def remember_conversation(self, binding: ObjectBinding) -> None:
        """A response made in conversation `binding.id` carried `binding.context_tokens`: the conversation's
        context now. Only the organization that first used a conversation id moves it."""
        cached = self._cache.get(binding.id)
        if cached is None or cached.organization_id == binding.organization_id:
            self._put(binding.id, binding)
        self._background(self._persist_conversation(binding))

    def _background(self, work) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def _persist_context(self, object_id: str, tokens: int, insert: asyncio.Task | None) -> None:
        if insert is not None:
            await asyncio.gather(insert, return_exceptions=True)
        try:
            await self._db.execute(
                "UPDATE model_objects SET context_tokens = $1 WHERE id = $2", tokens, object_id
            )
        except Exception as exc:  # a follow-up is then bounded by the context window: safe
            log.warning("the context of %s was not stored: %r", object_id, exc)

    async def _persist_conversation(self, binding: ObjectBinding) -> None:
        try:
            await self._db.execute(
                "INSERT INTO model_objects (id, organization_id, kind, model, row_key, created_at,"
                " context_tokens) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                " ON CONFLICT (id) DO UPDATE SET context_tokens = excluded.context_tokens"
                " WHERE model_objects.organization_id = excluded.organization_id"
                " AND model_objects.kind = excluded.kind",
                binding.id,
                binding.organization_id,
                binding.kind,
                binding.model,
                binding.row_key,
                time.time(),
                binding.context_tokens,
            )
        except Exception as exc:  # a follow-up is then bounded by the context window: safe
            log.warning("the context of conversation %s was not stored: %r", binding.id, exc)

    async def _persist(self, binding: ObjectBinding) -> None:
        created_at = time.time()
        deadline = time.monotonic() + PERSIST_RETRY_SECONDS
        delay = _FIRST_RETRY_SECONDS
        while True:
            try:
                await self._insert(binding, created_at)
                return
            except IntegrityViolation:  # or a retry found its first try committed, its answer lost
                log.warning("object id %s was bound twice; keeping the first binding", binding.id)
                return
            except StorageUnavailable as exc:
                failure: Exception = exc
                if time.monotonic() + delay <= deadline:
                    await asyncio.sleep(delay)  # storage is away (a failover under way): a retry's backoff
                    delay = min(delay * 2, 5.0)
                    continue
            except Exception as exc:
                failure = exc
            log.error(
                "the binding of %s was not stored (%r): known to this process only", binding.id, failure
            )
            return

    async def _insert(self, binding: ObjectBinding, created_at: float) -> None:
        await self._db.execute(
            "INSERT INTO model_objects (id, organization_id, kind, model, row_key, created_at)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            binding.id,
            binding.organization_id,
            binding.kind,
            binding.model,
            binding.row_key,
            created_at,
        )

    async def find(self, object_id: str, organization_id: str, kind: str) -> ObjectBinding | None:
        """The binding if it exists, is of this kind and belongs to this organization."""
        binding = self._cache.get(object_id)
        if binding is None and object_id not in self._cache:
            row = await self._db.fetchrow(
                "SELECT id, organization_id, kind, model, row_key, context_tokens FROM model_objects"
                " WHERE id = $1 AND deleted_at IS NULL",
                object_id,
            )
            binding = ObjectBinding(**row) if row else None
            if binding is not None:
                self._put(object_id, binding)
        if binding is None or binding.organization_id != organization_id or binding.kind != kind:
            return None
        return binding

    async def listed(
        self, organization_id: str, kind: str, *, limit: int, newest_first: bool, after: str | None
    ) -> list[tuple[ObjectBinding, float]]:
        """The organization's live objects of one kind with their creation time, a page after `after`."""
        await self.drain()  # a list right after a create includes it
        order = "DESC" if newest_first else "ASC"
        sql = (
            "SELECT id, organization_id, kind, model, row_key, created_at FROM model_objects"
            " WHERE organization_id = $1 AND kind = $2 AND deleted_at IS NULL"
        )
        args: list = [organization_id, kind]
        if after is not None:
            cursor = await self._db.fetchrow(
                "SELECT created_at FROM model_objects WHERE id = $1 AND organization_id = $2 AND kind = $3",
                after,
                organization_id,
                kind,
            )
            if cursor is None:
                return []
            compare = "<" if newest_first else ">"
            sql += f" AND (created_at {compare} $3 OR (created_at = $3 AND id {compare} $4))"
            args += [cursor["created_at"], after]
        sql += f" ORDER BY created_at {order}, id {order} LIMIT ${len(args) + 1}"
        rows = await self._db.fetch(sql, *args, limit)
        return [
            (
                ObjectBinding(r["id"], r["organization_id"], r["kind"], r["model"], r["row_key"]),
                r["created_at"],
            )
            for r in rows
        ]

    async def forget(self, object_id: str) -> None:
        self._cache.pop(object_id, None)
        await self._db.execute(
            "UPDATE model_objects SET deleted_at = $1 WHERE id = $2", time.time(), object_id
        )

    async def drain(self, grace_seconds: float | None = None) -> None:
        """Wait for background writes (at shutdown at most `grace_seconds`: the rest are dropped)."""
        if not self._pending:
            return
        _, late = await asyncio.wait(set(self._pending), timeout=grace_seconds)
        if late:
            log.error("%d object binding writes still waiting for storage at shutdown are dropped", len(late))
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    def _put(self, object_id: str, binding: ObjectBinding) -> None:
        self._cache[object_id] = binding
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)
