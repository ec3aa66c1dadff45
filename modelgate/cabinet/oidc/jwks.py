"""The signing keys of identity providers (JWKS), cached per URI.

A token signed with a key id the cache does not know makes the set be fetched again, once: that is how a
provider's key rotation reaches the gateway without a restart. A set older than an hour is fetched again
too, so a key the provider withdrew stops being trusted.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from joserfc.errors import JoseError
from joserfc.jwk import Key, KeySet

from modelgate.cabinet.oidc.idp_client import IdpClient, IdpRequestFailed

JWKS_MAX_AGE_SECONDS = 3600.0
# Which JWK key type can verify which JWS algorithm family.
_KEY_TYPE_OF_ALG = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


class JwksError(Exception):
    """The key set cannot be fetched or read; the message says why."""


@dataclass(frozen=True, slots=True)
class _CachedKeys:
    keys: KeySet
    fetched_at: float


def _compatible(key: Key, alg: str) -> bool:
    if key.key_type != _KEY_TYPE_OF_ALG.get(alg[:2]):
        return False
    if key.get("use") not in (None, "sig"):
        return False
    return key.alg in (None, alg)


class JwksCache:
    """Key sets by JWKS URI, shared by every provider of the process."""

    def __init__(self, client: IdpClient, max_age_seconds: float = JWKS_MAX_AGE_SECONDS) -> None:
        self._client = client
        self._max_age = max_age_seconds
        self._sets: dict[str, _CachedKeys] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def load(self, uri: str) -> int:
        """Fetch the set now (discovery does, to prove the URI works); returns how many keys it holds."""
        return len((await self._refresh(uri, seen=self._sets.get(uri))).keys.keys)

    async def verification_keys(self, uri: str, kid: str | None, alg: str) -> list[Key]:
        """The keys that may have signed a token with this `kid` and `alg`; an unknown kid refetches once."""
        cached = self._sets.get(uri)
        refreshed = False
        if cached is None or time.monotonic() - cached.fetched_at > self._max_age:
            cached, refreshed = await self._refresh(uri, seen=cached), True
        keys = _matching(cached.keys, kid, alg)
        if not keys and kid is not None and not refreshed:
            keys = _matching((await self._refresh(uri, seen=cached)).keys, kid, alg)
        return keys

    async def _refresh(self, uri: str, seen: _CachedKeys | None) -> _CachedKeys:
        lock = self._locks.setdefault(uri, asyncio.Lock())
        async with lock:
            current = self._sets.get(uri)
            # Another login refreshed the set while this one waited: one fetch serves both.
            if current is not None and current is not seen:
                return current
            fetched = _CachedKeys(await self._fetch(uri), time.monotonic())
            self._sets[uri] = fetched
            return fetched

    async def _fetch(self, uri: str) -> KeySet:
        try:
            reply = await self._client.get(uri)
        except IdpRequestFailed as exc:
            raise JwksError(f"the JWKS at {uri} is unreachable: {exc}") from exc
        if reply.status != 200:
            raise JwksError(f"the JWKS at {uri} answered HTTP {reply.status}")
        document = reply.json_object()
        if document is None or not isinstance(document.get("keys"), list):
            raise JwksError(f"the JWKS at {uri} is not a JSON key set")
        try:
            return KeySet.import_key_set({"keys": [k for k in document["keys"] if isinstance(k, dict)]})
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise JwksError(f"the JWKS at {uri} holds no usable key ({type(exc).__name__})") from exc


def _matching(keys: KeySet, kid: str | None, alg: str) -> list[Key]:
    candidates = [k for k in keys.keys if _compatible(k, alg)]
    if kid is None:
        # A token without a kid may be checked against every compatible key (providers with one key do this).
        return candidates
    return [k for k in candidates if k.kid == kid]
