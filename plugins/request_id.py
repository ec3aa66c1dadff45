"""Request ids: a client-chosen `x-request-id` is claimed while its request is in flight.

A second request that claims the same id (per organization) while the first is still running gets 409
`request_in_progress` — the spec's double submit. Ids the gateway generates are unique and skip the claim.
"""

from __future__ import annotations

from plugins.base import Plugin
from proxy.context import RequestContext
from proxy.errors import RequestInProgress


class InFlightIds:
    """The claimed (organization, request id) pairs of this process."""

    __slots__ = ("_claimed",)

    def __init__(self) -> None:
        self._claimed: set[tuple[str, str]] = set()

    def claim(self, organization_id: str, request_id: str) -> bool:
        pair = (organization_id, request_id)
        if pair in self._claimed:
            return False
        self._claimed.add(pair)
        return True

    def release(self, organization_id: str, request_id: str) -> None:
        self._claimed.discard((organization_id, request_id))


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
