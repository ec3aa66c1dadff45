"""Realtime credentials: a connect to GET /v1/realtime must present a fresh client secret minted by its key.

`?client_secret=` missing, unknown, used, expired, minted by another key, or for another model than the
`?model=` asked → 404 `invalid_realtime_credential`; a second connect while the first one with the same secret
is still being established → 409 `request_in_progress`. Both are answered before any upgrade. The claimed
secret names the model, which the rest of the chain routes on. A claim whose session never opened is released
when the request completes, so the client may try again until the secret expires.

On POST /v1/realtime/client_secrets, OpenAI's `{session: {model, ...}}` shape is read for its model.
"""

from __future__ import annotations

from collections.abc import Awaitable

from modelgate.domain.errors import InvalidRealtimeCredential, RequestInProgress
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.realtime.secrets import Claim, RealtimeClaim, RealtimeSecrets


class RealtimeCredentials(Plugin):
    """Claims the client secret of a realtime connect."""

    name = "realtime_credentials"
    requires = frozenset({"key", "payload", "route"})
    provides = frozenset({"payload", "realtime"})
    essential = True

    def __init__(self, secrets: RealtimeSecrets) -> None:
        self._secrets = secrets

    def on_request(self, ctx: RequestContext) -> Awaitable[None] | None:
        # A plain function: only a realtime connect waits (for its claim).
        route = ctx.matched_route
        if route.mints_realtime_secret:
            payload = ctx.json_payload
            session = payload.get("session")
            if "model" not in payload and isinstance(session, dict) and "model" in session:
                payload["model"] = session["model"]
            return None
        if not route.websocket:
            return None
        return self._claim(ctx)

    async def _claim(self, ctx: RequestContext) -> None:
        query = ctx.request.query
        value = query.get("client_secret")
        if not value:
            raise InvalidRealtimeCredential(
                "A realtime connect needs a fresh `client_secret` in the query "
                "(POST /v1/realtime/client_secrets)."
            )
        outcome, secret = await self._secrets.claim(value, ctx.api_key.id, query.get("model") or None)
        if outcome is Claim.IN_PROGRESS:
            raise RequestInProgress(
                "A realtime session with this client secret is already being established."
            )
        if outcome is not Claim.CLAIMED or secret is None:
            raise InvalidRealtimeCredential(
                "The realtime client secret is invalid: unknown, already used, expired, or not issued "
                "to this API key for this model."
            )
        ctx.realtime = RealtimeClaim(value, secret)
        ctx.payload = {"model": secret.model}

    def on_complete(self, ctx: RequestContext) -> Awaitable[None] | None:
        claim = ctx.realtime
        if claim is not None and not claim.established:
            return self._secrets.release(claim.value)
        return None
