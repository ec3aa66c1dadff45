"""Realtime client secrets: single-use, short-lived credentials bound to an API key, organization and model.

A secret goes fresh → claimed (a connect is being established: a second connect is the 409 race) → used
(deleted: later connects are 404, like unknown or expired ones). A claim whose session was never established
goes back to fresh, so the client may retry until the secret expires. Only a SHA-256 of the secret is
stored: in Redis when configured (a hash with an absolute expiry; a claim is one Lua script, so exactly one
connect wins across every gateway process), otherwise in this process.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import orjson
from aiohttp import web
from redis.exceptions import RedisError

from modelgate.domain.errors import InvalidRequest, ServiceUnavailable
from modelgate.proxy.pipeline.context import RequestContext

MAX_TTL_SECONDS = 60


class Claim(Enum):
    """What a connect finds when it claims a secret."""

    CLAIMED = "claimed"  # this connect won; it must consume or release the secret
    IN_PROGRESS = "in_progress"  # another connect with this secret is being established: 409
    INVALID = "invalid"  # unknown, used, expired, another key's, or for another model: 404


@dataclass(frozen=True, slots=True)
class ClientSecret:
    """What a client secret grants: one session of `model` for the key that minted it."""

    key_id: str
    organization_id: str
    model: str
    session: dict[str, Any]  # the session options given at minting, applied when the session opens
    expires_at: int  # unix seconds

    def to_json(self) -> bytes:
        return orjson.dumps([self.key_id, self.organization_id, self.model, self.session, self.expires_at])

    @classmethod
    def from_json(cls, data: bytes) -> ClientSecret:
        key_id, organization_id, model, session, expires_at = orjson.loads(data)
        return cls(key_id, organization_id, model, session, expires_at)


def digest(value: str) -> str:
    """The stored name of a secret; the secret itself is never stored."""
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(slots=True)
class RealtimeClaim:
    """The secret one connect claimed, and what the session took (set as it opens)."""

    value: str
    secret: ClientSecret
    established: bool = False
    slot: str | None = None  # the concurrency counter holding this session's slot


class RealtimeSecrets(Protocol):
    async def mint(self, value: str, secret: ClientSecret) -> None: ...
    async def claim(
        self, value: str, key_id: str, model: str | None
    ) -> tuple[Claim, ClientSecret | None]: ...
    async def consume(self, value: str) -> None: ...
    async def release(self, value: str) -> None: ...


@dataclass(slots=True)
class _Held:
    secret: ClientSecret
    claimed: bool = False


class InProcessSecrets:
    """Client secrets of one gateway process (one event loop: every step below is atomic)."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._next_sweep = 0.0

    async def mint(self, value: str, secret: ClientSecret) -> None:
        now = time.time()
        if now >= self._next_sweep:  # forget expired secrets about once a TTL
            self._held = {k: h for k, h in self._held.items() if h.secret.expires_at > now}
            self._next_sweep = now + MAX_TTL_SECONDS
        self._held[digest(value)] = _Held(secret)

    async def claim(self, value: str, key_id: str, model: str | None) -> tuple[Claim, ClientSecret | None]:
        held = self._held.get(digest(value))
        if held is None or held.secret.expires_at <= time.time():
            return Claim.INVALID, None
        secret = held.secret
        if secret.key_id != key_id or (model is not None and model != secret.model):
            return Claim.INVALID, None
        if held.claimed:
            return Claim.IN_PROGRESS, None
        held.claimed = True
        return Claim.CLAIMED, secret

    async def consume(self, value: str) -> None:
        self._held.pop(digest(value), None)

    async def release(self, value: str) -> None:
        held = self._held.get(digest(value))
        if held is not None:
            held.claimed = False


_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
if redis.call('HGET', KEYS[1], 'key') ~= ARGV[1] then return {0} end
if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], 'model') ~= ARGV[2] then return {0} end
if redis.call('HGET', KEYS[1], 'state') ~= 'fresh' then return {-1} end
redis.call('HSET', KEYS[1], 'state', 'claimed')
return {1, redis.call('HGET', KEYS[1], 'secret')}
"""
_RELEASE = """
if redis.call('HGET', KEYS[1], 'state') == 'claimed' then redis.call('HSET', KEYS[1], 'state', 'fresh') end
return 1
"""


class RedisSecrets:
    """Client secrets in Redis, shared by every gateway process; without Redis they cannot be checked: 503."""

    def __init__(self, client, prefix: str = "mg:rt:") -> None:
        self._redis = client
        self._prefix = prefix
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)

    def _name(self, value: str) -> str:
        return self._prefix + digest(value)

    async def mint(self, value: str, secret: ClientSecret) -> None:
        name = self._name(value)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(
                    name,
                    mapping={
                        "key": secret.key_id,
                        "model": secret.model,
                        "state": "fresh",
                        "secret": secret.to_json(),
                    },
                )
                pipe.expireat(name, secret.expires_at)
                await pipe.execute()
        except RedisError as exc:
            raise _unavailable() from exc

    async def claim(self, value: str, key_id: str, model: str | None) -> tuple[Claim, ClientSecret | None]:
        try:
            result = await self._claim(keys=[self._name(value)], args=[key_id, model or ""])
        except RedisError as exc:
            raise _unavailable() from exc
        outcome = int(result[0])
        if outcome == 1:
            return Claim.CLAIMED, ClientSecret.from_json(result[1])
        return (Claim.IN_PROGRESS if outcome == -1 else Claim.INVALID), None

    async def consume(self, value: str) -> None:
        try:
            await self._redis.delete(self._name(value))
        except RedisError as exc:
            raise _unavailable() from exc

    async def release(self, value: str) -> None:
        try:
            await self._release(keys=[self._name(value)])
        except RedisError as exc:
            raise _unavailable() from exc


def _unavailable() -> ServiceUnavailable:
    return ServiceUnavailable(
        "The realtime service is temporarily unavailable: client secrets cannot be checked. Retry shortly."
    )


def session_options(payload: dict[str, Any]) -> dict[str, Any]:
    """The session options of a minting request: `{model, ...options}` or OpenAI's `{session: {...}}`."""
    session = payload.get("session")
    if session is None:
        return {k: v for k, v in payload.items() if k not in ("model", "expires_after", "provider")}
    if not isinstance(session, dict):
        raise InvalidRequest("Invalid 'session': expected an object.")
    if session.get("type", "realtime") != "realtime":
        raise InvalidRequest("Invalid 'session.type': only 'realtime' sessions are supported.")
    return {k: v for k, v in session.items() if k not in ("type", "model")}


def lifetime(payload: dict[str, Any]) -> int:
    """Seconds the secret lives: `expires_after.seconds` (anchor `created_at`), at most MAX_TTL_SECONDS."""
    expires_after = payload.get("expires_after")
    if expires_after is None:
        return MAX_TTL_SECONDS
    seconds = expires_after.get("seconds") if isinstance(expires_after, dict) else None
    if not isinstance(expires_after, dict) or expires_after.get("anchor", "created_at") != "created_at":
        raise InvalidRequest('Invalid \'expires_after\': expected {"anchor": "created_at", "seconds": N}.')
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 1:
        raise InvalidRequest("Invalid 'expires_after.seconds': expected a positive integer.")
    return min(seconds, MAX_TTL_SECONDS)


class ClientSecretIssuer:
    """POST /v1/realtime/client_secrets: mints a secret for the authenticated key and the resolved model."""

    def __init__(self, secrets: RealtimeSecrets) -> None:
        self._secrets = secrets

    async def handle(self, ctx: RequestContext) -> web.Response:
        payload, key = ctx.json_payload, ctx.api_key
        options = session_options(payload)
        expires_at = int(time.time()) + lifetime(payload)
        value = "ek_" + secrets.token_urlsafe(32)
        await self._secrets.mint(
            value, ClientSecret(key.id, key.organization_id, ctx.routed_model.name, options, expires_at)
        )
        session = {
            "type": "realtime",
            "object": "realtime.session",
            "id": "sess_" + secrets.token_hex(12),
            "model": ctx.routed_model.name,
            **options,
        }
        ctx.status = 200
        return web.Response(
            body=orjson.dumps({"value": value, "expires_at": expires_at, "session": session}),
            content_type="application/json",
            headers={"x-request-id": ctx.request_id},
        )
