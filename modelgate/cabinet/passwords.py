"""Password hashing (argon2id) and the password policy.

Hashing and verification run in a worker thread: each takes tens of milliseconds of CPU by design.
"""

from __future__ import annotations

import asyncio
import functools

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1024

# The OWASP minimum for argon2id: 19 MiB of memory, two passes, one lane.
_HASHER = PasswordHasher(time_cost=2, memory_cost=19456, parallelism=1)


def password_policy_violation(password: str, email: str) -> str | None:
    """Why the password is not acceptable for this account, or None when it is."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"password must be at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"password must be at most {MAX_PASSWORD_LENGTH} characters"
    if password.strip().lower() == email.strip().lower():
        return "password must not be the e-mail address"
    return None


async def hash_password(password: str) -> str:
    """The argon2id hash stored for a password."""
    return await asyncio.to_thread(_HASHER.hash, password)


async def verify_password(stored_hash: str | None, password: str) -> bool:
    """Whether the password matches; with no stored hash a dummy is verified so timing stays comparable."""
    return await asyncio.to_thread(_verify, stored_hash, password)


def needs_rehash(stored_hash: str) -> bool:
    """Whether a hash was made with weaker parameters than today's and should be replaced at login."""
    try:
        return _HASHER.check_needs_rehash(stored_hash)
    except InvalidHashError:
        return True


def _verify(stored_hash: str | None, password: str) -> bool:
    if stored_hash is None:
        _check(_dummy_hash(), password)
        return False
    return _check(stored_hash, password)


def _check(stored_hash: str, password: str) -> bool:
    try:
        return _HASHER.verify(stored_hash, password)
    except (VerificationError, InvalidHashError):
        return False


@functools.cache
def _dummy_hash() -> str:
    return _HASHER.hash("modelgate-dummy-password-for-unknown-accounts")
