"""Request ids: a client-chosen `x-request-id` is claimed while its request is in flight.

A second request that claims the same id (per organization) while the first is still running gets 409
`request_in_progress` — the spec's double submit. Ids the gateway generates are unique and skip the claim.
With Redis configured the claim holds across every gateway process (SET NX, expiring after
`SHARED_CLAIM_SECONDS` in case a process dies holding it); if Redis cannot be reached, the claim falls
back to this process alone, logged.
"""

from __future__ import annotations

import logging
from typing import Any

from plugins.base import Plugin
from proxy.context import RequestContext
from proxy.errors import RequestInProgress

log = logging.getLogger("modelgate.request_id")

SHARED_CLAIM_SECONDS = 600


class InFlightIds:
    """The claimed (organization, request id) pairs of this process, and of all processes via Redis."""

    __slots__ = ("_claimed", "redis")

    def __init__(self, redis: Any = None) -> None:
        self._claimed: set[tuple[str, str]] = set()
        self.redis = redis  # a redis.asyncio client when ids are shared across processes

    def claim(self, organization_id: str, request_id: str) -> bool:
        pair = (organization_id, request_id)
        if pair in self._claimed:
            return False
        self._claimed.add(pair)
        return True

    def release(self, organization_id: str, request_id: str) -> None:
        self._claimed.discard((organization_id, request_id))

    async def claim_shared(self, organization_id: str, request_id: str) -> bool:
        """Claim across processes; True also when Redis is unreachable (the local claim still holds)."""
        try:
            return bool(
                await self.redis.set(
                    _shared_key(organization_id, request_id), 1, nx=True, ex=SHARED_CLAIM_SECONDS
                )
            )
        except Exception as exc:
            log.error("request id claim in Redis failed (%r); enforcing it in this process only", exc)
            return True

    async def release_shared(self, organization_id: str, request_id: str) -> None:
        try:
            await self.redis.delete(_shared_key(organization_id, request_id))
        except Exception as exc:
            log.error("request id release in Redis failed (%r); it expires by itself", exc)


def _shared_key(organization_id: str, request_id: str) -> str:
    return f"mg:rid:{organization_id}:{request_id}"


class RequestId(Plugin):
    """Claims client-supplied request ids; 409 on a double submit."""

    name = "request_id"
    essential = True

    def __init__(self, in_flight: InFlightIds) -> None:
        self._in_flight = in_flight

    def on_request(self, ctx: RequestContext) -> None:
        if "x-request-id" not in ctx.request.headers or ctx.key is None:
            return
        if not self._in_flight.claim(ctx.key.organization_id, ctx.request_id):
            raise RequestInProgress(f"a request with id {ctx.request_id} is already in progress")
        ctx.claimed_request_id = True

    def on_complete(self, ctx: RequestContext) -> None:
        if ctx.claimed_request_id:
            self._in_flight.release(ctx.key.organization_id, ctx.request_id)


class SharedRequestId(RequestId):
    """RequestId whose claims hold across every gateway process (Redis configured)."""

    async def on_request(self, ctx: RequestContext) -> None:
        if "x-request-id" not in ctx.request.headers or ctx.key is None:
            return
        organization_id = ctx.key.organization_id
        if not self._in_flight.claim(organization_id, ctx.request_id):
            raise RequestInProgress(f"a request with id {ctx.request_id} is already in progress")
        if not await self._in_flight.claim_shared(organization_id, ctx.request_id):
            self._in_flight.release(organization_id, ctx.request_id)
            raise RequestInProgress(f"a request with id {ctx.request_id} is already in progress")
        ctx.claimed_request_id = True

    async def on_complete(self, ctx: RequestContext) -> None:
        if ctx.claimed_request_id:
            self._in_flight.release(ctx.key.organization_id, ctx.request_id)
            await self._in_flight.release_shared(ctx.key.organization_id, ctx.request_id)
