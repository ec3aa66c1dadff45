"""Microsoft Entra ID bearer tokens for an Azure OpenAI host (`auth = "entra"`).

The OAuth2 client-credentials flow: the host's client id and secret are exchanged at the tenant's token
endpoint for an access token to the Cognitive Services scope. One token serves every request until five
minutes before it expires; then the next request fetches another. Requests that find a fetch under way
wait for it and share its token, so a burst of requests costs the endpoint one call.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson

from modelgate.proxy.upstream.providers import UpstreamFailure

DEFAULT_SCOPE = "https://cognitiveservices.azure.com/.default"
# A token is replaced this long before it expires, so none expires on its way to the host.
REFRESH_EARLY_SECONDS = 300.0
_MAX_TOKEN_ANSWER = 64 * 1024


class EntraRefused(Exception):
    """The token endpoint refused the host's client credentials (`status`, and its reason)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def token_url(tenant_id: str | None, configured: str | None) -> str:
    """The token endpoint: the configured one, else the tenant's on login.microsoftonline.com."""
    if configured:
        return configured
    return f"https://login.microsoftonline.com/{tenant_id}/oauth2/v2.0/token"


class EntraToken:
    """The current bearer token of one host's Entra application, fetched and refreshed on demand."""

    def __init__(
        self, url: str, client_id: str, client_secret: str, scope: str, timeout: aiohttp.ClientTimeout
    ) -> None:
        self._url = url
        self._form = {
            "grant_type": "client_credentials",
            "client_id": client_id,
            "client_secret": client_secret,
            "scope": scope,
        }
        self._timeout = timeout
        self._token = ""
        self._refresh_at = 0.0  # monotonic time from which the next request fetches a new token
        self._expires_at = 0.0  # monotonic time the token stops working
        self._fetching: asyncio.Task[str] | None = None
        self._session: aiohttp.ClientSession | None = None

    async def bearer(self) -> str:
        """A token to send now: the cached one while it is fresh, else the one a single fetch brings.

        Raises EntraRefused when the endpoint refuses the credentials, UpstreamFailure when it cannot be
        reached or its answer cannot be read (a token that has not yet expired is used meanwhile)."""
        now = time.monotonic()
        if self._token and now < self._refresh_at:
            return self._token
        fetching = self._fetching
        if fetching is None:
            fetching = self._fetching = asyncio.create_task(self._fetch())
            fetching.add_done_callback(self._fetched)
        try:
            # Shielded: one waiter going away (its client disconnected) must not cancel the others' fetch.
            return await asyncio.shield(fetching)
        except (EntraRefused, UpstreamFailure):
            if self._token and time.monotonic() < self._expires_at:
                return self._token
            raise

    def forget(self, token: str) -> None:
        """The host refused `token` (revoked, or its application's rights changed): the next request
        fetches another, and a failed fetch does not fall back on it."""
        if token == self._token:
            self._refresh_at = self._expires_at = 0.0

    def _fetched(self, task: asyncio.Task[str]) -> None:
        self._fetching = None
        if not task.cancelled():
            task.exception()  # retrieved here, so a fetch nobody awaited any more is not reported as lost

    async def _fetch(self) -> str:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar())
        try:
            async with self._session.post(self._url, data=self._form, allow_redirects=False) as answer:
                status = answer.status
                raw = await answer.content.read(_MAX_TOKEN_ANSWER)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamFailure(f"Entra token endpoint: {exc.__class__.__name__}: {exc}") from exc
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        if status != 200:
            raise EntraRefused(status, _refusal_reason(status, parsed))
        token = parsed.get("access_token") if isinstance(parsed, dict) else None
        lifetime = _seconds(parsed.get("expires_in")) if isinstance(parsed, dict) else None
        if not isinstance(token, str) or not token or lifetime is None:
            raise UpstreamFailure("Entra token endpoint answered without access_token and expires_in")
        now = time.monotonic()
        self._token = token
        self._expires_at = now + lifetime
        self._refresh_at = now + lifetime - REFRESH_EARLY_SECONDS
        return token

    async def close(self) -> None:
        fetching = self._fetching
        if fetching is not None:
            fetching.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None


def _seconds(value: object) -> float | None:
    """`expires_in` as seconds: a number, or a string of digits (the v1 endpoint sends one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.isdigit():
        return float(value)
    return None


def _refusal_reason(status: int, parsed: object) -> str:
    if isinstance(parsed, dict):
        description = parsed.get("error_description") or parsed.get("error")
        if isinstance(description, str) and description:
            # Entra's descriptions run to several lines of trace ids; the first says what is wrong.
            return f"Entra ID refused the client credentials: {description.splitlines()[0]}"
    return f"Entra ID token endpoint answered HTTP {status}"
