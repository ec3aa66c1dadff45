"""Secrets of the cabinet and the model API: generation, the hash stored at rest, and display hints.

API keys, management keys, session and invitation tokens carry >= 32 random bytes, so a single SHA-256 is a
sufficient at-rest hash (unlike passwords, which use argon2id); lookups go by that hash.
"""

from __future__ import annotations

import hashlib
import secrets

API_KEY_PREFIX = "sk-"
MANAGEMENT_KEY_PREFIX = "sk-mgmt-"
_SECRET_BYTES = 32


def hash_token(token: str) -> str:
    """The at-rest form of a high-entropy secret (hex SHA-256)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_api_key_secret() -> str:
    """`sk-` + 43 url-safe characters (32 random bytes); never starts with `sk-mgmt-`."""
    while True:
        secret = API_KEY_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)
        if not secret.startswith(MANAGEMENT_KEY_PREFIX):
            return secret


def new_management_key_secret() -> str:
    """`sk-mgmt-` + 32 random bytes."""
    return MANAGEMENT_KEY_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)


def new_opaque_token() -> str:
    """A session, invitation or one-time token: 32 random bytes, url-safe."""
    return secrets.token_urlsafe(_SECRET_BYTES)


def secret_hint(secret: str) -> str:
    """What may be shown of a secret after creation: its prefix and last four characters."""
    prefix = MANAGEMENT_KEY_PREFIX if secret.startswith(MANAGEMENT_KEY_PREFIX) else API_KEY_PREFIX
    return f"{prefix}…{secret[-4:]}"


def new_id(kind: str) -> str:
    """A public identifier such as `key_3f9a…`: unguessable, so ids leak nothing across organizations."""
    return f"{kind}_{secrets.token_hex(12)}"
