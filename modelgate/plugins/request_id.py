"""Request ids: a client-chosen `x-request-id` is claimed while its request is in flight.

A second request that claims the same id (per organization) while the first is still running gets 409
`request_in_progress` — the spec's double submit. Ids the gateway generates are unique and skip the claim.
With Redis configured the claim holds across every gateway process: the admission step takes it with the
request's windows and reservations (`plugins.admission`; it expires after `domain.redis_counters.
CLAIM_SECONDS` in case a process dies holding it). If Redis cannot be reached, the claim falls back to this
process alone, logged, or the request gets 503 when it also needs limits or reservations checked.
"""

from __future__ import annotations

from typing import Any

from modelgate.domain.accounts import org_tag
from modelgate.domain.counters import Counters
from modelgate.domain.errors import RequestInProgress
from modelgate.plugins.admission import pending
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext


class InFlightIds:
    """The claimed (organization, request id) pairs of this process."""

    __slots__ = ("_claimed", "redis")

    def __init__(self, redis: Any = None) -> None:
        self._claimed: set[tuple[str, str]] = set()
        # The Redis client when claims also hold across processes (the admission step takes them there).
        self.redis = redis

    def claim(self, organization_id: str, request_id: str) -> bool:
        pair = (organization_id, request_id)
        if pair in self._claimed:
            return False
        self._claimed.add(pair)
        return True

    def release(self, organization_id: str, request_id: str) -> None:
        self._claimed.discard((organization_id, request_id))


def shared_claim_key(organization_id: str, request_id: str) -> str:
    """The counter key of a request id claim shared by every process."""
    return f"rid:{org_tag(organization_id)}:{request_id}"


class RequestId(Plugin):
    """Claims client-supplied request ids; 409 on a double submit."""

    name = "request_id"
    requires = frozenset({"key"})
    provides = frozenset({"admission"})
    essential = True

    def __init__(self, in_flight: InFlightIds) -> None:
        self._in_flight = in_flight

    def on_request(self, ctx: RequestContext) -> None:
        if "x-request-id" not in ctx.request.headers or ctx.key is None:
            return
        if not self._in_flight.claim(ctx.key.organization_id, ctx.request_id):
            raise RequestInProgress(f"a request with id {ctx.request_id} is already in progress")
        ctx.admission.claimed_request_id = True

    def on_complete(self, ctx: RequestContext) -> None:
        if ctx.admission.claimed_request_id:
            self._in_flight.release(ctx.api_key.organization_id, ctx.request_id)


class SharedRequestId(RequestId):
    """RequestId whose claims hold across every gateway process (Redis configured): this process's claim
    here, the shared one recorded for the admission step, which takes it with the rest of the request's
    counters in one round trip (409 there if another process holds it)."""

    def __init__(self, in_flight: InFlightIds, counters: Counters) -> None:
        super().__init__(in_flight)
        self._counters = counters

    def on_request(self, ctx: RequestContext) -> None:
        if "x-request-id" not in ctx.request.headers or ctx.key is None:
            return
        organization_id = ctx.key.organization_id
        if not self._in_flight.claim(organization_id, ctx.request_id):
            raise RequestInProgress(f"a request with id {ctx.request_id} is already in progress")
        ctx.admission.claimed_request_id = True
        pending(ctx).claim = shared_claim_key(organization_id, ctx.request_id)

    def on_complete(self, ctx: RequestContext) -> None:
        if ctx.admission.claimed_request_id:
            self._in_flight.release(ctx.api_key.organization_id, ctx.request_id)
            admission = ctx.admission
            if (
                admission.taken and admission.claim is not None
            ):  # released with the next batch of this process's counter writes
                self._counters.release_claim(admission.claim)
