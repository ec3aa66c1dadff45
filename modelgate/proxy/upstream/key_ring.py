"""The API keys of one host, used in turn: a key the provider refuses (401, 403) or throttles (429) cools
down on its own while the others keep serving.

Keys are never logged: a request's log line names the key that served it by a short fingerprint.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# A key refused or throttled rests this long, unless the provider's retry-after says how long to wait.
DEFAULT_COOLDOWN_SECONDS = 60.0
_MAX_RETRY_AFTER_SECONDS = 3600.0
COOLING_STATUSES = frozenset({401, 403, 429})


def fingerprint(key: str) -> str:
    """A short name for a key that does not reveal it (the first 8 hex digits of its SHA-256)."""
    return hashlib.sha256(key.encode()).hexdigest()[:8]


@dataclass(slots=True, eq=False)
class Credential:
    """One key of a host: the header that carries it, its fingerprint and until when it rests."""

    header: str  # the header name: authorization or x-api-key
    value: str
    line: bytes  # the header line of the request head
    fingerprint: str
    cooled_until: float = 0.0


class KeyRing:
    """A host's keys in turn, skipping those that rest (see the module)."""

    __slots__ = ("_cooldown", "_keys", "_next")

    def __init__(self, credentials: Sequence[Credential], cooldown: float = DEFAULT_COOLDOWN_SECONDS) -> None:
        self._keys = tuple(credentials)
        self._cooldown = cooldown
        self._next = 0

    def __len__(self) -> int:
        return len(self._keys)

    def pick(self, exclude: Sequence[Credential] = ()) -> Credential | None:
        """The next key that is not resting (nor in `exclude`); when all rest, the one that is back first."""
        keys = self._keys
        count = len(keys)
        if count < 2:  # most hosts have one key: it serves, resting or not
            return keys[0] if keys and keys[0] not in exclude else None
        now = time.monotonic()
        for offset in range(count):
            credential = keys[(self._next + offset) % count]
            if credential.cooled_until <= now and credential not in exclude:
                self._next = (self._next + offset + 1) % count
                return credential
        candidates = [c for c in keys if c not in exclude]
        return min(candidates, key=lambda c: c.cooled_until) if candidates else None

    def answered(self, credential: Credential, status: int, headers: Mapping[str, str]) -> bool:
        """Note the provider's answer to a request sent with `credential`; True when the key now rests."""
        if status not in COOLING_STATUSES:
            return False
        rest = self._cooldown
        retry_after = headers.get("retry-after")
        if status == 429 and retry_after:
            try:
                rest = min(max(float(retry_after), 0.0), _MAX_RETRY_AFTER_SECONDS)
            except ValueError:
                pass
        credential.cooled_until = time.monotonic() + rest
        return True
