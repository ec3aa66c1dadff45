"""Authentication of the model API: `Authorization: Bearer sk-…` or `x-api-key: sk-…`.

Cabinet session tokens and management keys (`sk-mgmt-`) are not model keys and are refused like any
unknown, revoked or missing key: 401.
"""

from __future__ import annotations

from collections.abc import Awaitable

from modelgate.domain.errors import AuthenticationFailed, AuthenticationFailedEnvelopeA
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.state.keys import KeyDirectory

_MISSING = "You didn't provide an API key. Provide it as `Authorization: Bearer sk-…` or `x-api-key: sk-…`."
_WRONG = "Incorrect API key provided."


def presented_key(headers) -> str | None:
    """The secret the client presented, from either header."""
    value = headers.get("authorization")
    if value is not None:
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return ""
    value = headers.get("x-api-key")
    if value is not None:
        return value.strip()
    return None


class Auth(Plugin):
    """Resolves the API key; stops the chain with 401."""

    name = "auth"
    requires = frozenset({"route"})
    provides = frozenset({"key"})
    essential = True

    def __init__(self, keys: KeyDirectory) -> None:
        self._keys = keys

    def on_request(self, ctx: RequestContext) -> Awaitable[None] | None:
        # A plain function: a key this process knows (the usual request) is resolved without a coroutine.
        error = (
            AuthenticationFailedEnvelopeA
            if ctx.matched_route.envelope_b_with_version_header
            else AuthenticationFailed
        )
        secret = presented_key(ctx.request.headers)
        if not secret:
            raise error(_MISSING)
        if not secret.startswith("sk-") or secret.startswith("sk-mgmt-") or len(secret) > 256:
            raise error(_WRONG)
        keys = self._keys
        secret_hash = keys.secret_hash(secret)
        key = keys.cached(secret_hash)
        if key is None:
            return self._read(ctx, secret_hash, error)
        ctx.key = key
        return None

    async def _read(
        self,
        ctx: RequestContext,
        secret_hash: str,
        error: type[AuthenticationFailed],
    ) -> None:
        key = await self._keys.read(secret_hash)
        if key is None:
            raise error(_WRONG)
        ctx.key = key
