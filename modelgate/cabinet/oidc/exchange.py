"""One-time login codes: the callback hands the browser a short-lived code instead of the session token (a
token in a URL would end up in history, logs and Referer headers); POST /auth/oidc/exchange redeems it once.

The stored row holds the session token sealed (AES-GCM) under a key derived from the code, and is found by
the code's hash: without the code itself, the database yields no usable token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os

from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from modelgate.cabinet.clock import now
from modelgate.cabinet.oidc.sign_ins import StoredLoginCode, insert_login_code, take_login_code
from modelgate.cabinet.requests import CabinetError, read_json_object, required_secret
from modelgate.cabinet.services import services_of
from modelgate.cabinet.web_security import signed_in_response
from modelgate.domain.tokens import hash_token, new_opaque_token
from modelgate.storage.database import Executor

LOGIN_CODE_TTL_SECONDS = 60
_KEY_CONTEXT = b"modelgate oidc login code v1\x00"
_NONCE_BYTES = 12
_MAX_CODE_LENGTH = 200


def _key(code: str) -> bytes:
    # The code carries 256 random bits, so one hash with a context label is a sound key derivation; the
    # label keeps the key distinct from the lookup hash (plain SHA-256 of the code).
    return hashlib.sha256(_KEY_CONTEXT + code.encode("utf-8", "surrogatepass")).digest()


def _seal(code: str, token: str) -> str:
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(_key(code)).encrypt(nonce, token.encode(), _KEY_CONTEXT)
    return base64.urlsafe_b64encode(nonce + sealed).decode()


def _unseal(code: str, sealed: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(sealed)
        opened = AESGCM(_key(code)).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _KEY_CONTEXT)
    except (InvalidTag, binascii.Error, ValueError):
        return None
    return opened.decode()


async def issue_login_code(tx: Executor, session_token: str, email: str, at: float) -> str:
    """A new one-time code that redeems to this session token within a minute."""
    code = new_opaque_token()
    stored = StoredLoginCode(_seal(code, session_token), email, at + LOGIN_CODE_TTL_SECONDS)
    await insert_login_code(tx, hash_token(code), stored, at)
    return code


def _invalid_code() -> CabinetError:
    return CabinetError(400, "code is invalid, expired or already used")


async def redeem_login_code(request: web.Request) -> web.Response:
    """POST /auth/oidc/exchange {code} → {token, email} (and the session cookie); each code works once, for a
    minute."""
    services = services_of(request)
    code = required_secret(await read_json_object(request), "code")
    if len(code) > _MAX_CODE_LENGTH:
        raise _invalid_code()
    # Deleting and reading in one statement makes the code single-use even under concurrent redemption.
    stored = await take_login_code(services.db, hash_token(code))
    if stored is None or stored.expires_at <= now():
        raise _invalid_code()
    token = _unseal(code, stored.sealed_token)
    if token is None:
        raise _invalid_code()
    return signed_in_response(request, services.config, {"token": token, "email": stored.email}, token)
