"""What GeminiFake knows and saw (keys, project, the service account's public key, tokens it issued,
thought signatures it gave out, queued faults), and the checks of its token endpoint."""

from __future__ import annotations

import base64
import itertools
import threading
import time
from collections import deque
from typing import Any

import orjson
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from .records import RequestLog

STATE: web.AppKey[GeminiState] = web.AppKey("gemini_state")
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"


def google_error(status: int, google_status: str, message: str, reason: str | None = None) -> web.Response:
    """An error as Google's APIs answer one."""
    error: dict[str, Any] = {"code": status, "message": message, "status": google_status}
    if reason:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason}]
    return web.json_response({"error": error}, status=status)


class GeminiState:
    """Shared by the server loop and the test thread."""

    def __init__(self, api_keys: tuple[str, ...], models: tuple[str, ...], project: str, region: str) -> None:
        self.api_keys = api_keys
        self.models = models
        self.project = project
        self.region = region
        self.api_version = "v1beta"
        self.public_keys: list[rsa.RSAPublicKey] = []  # of every service account file made for it
        self.client_email = ""
        self.expires_in = 3600
        self.refuse_tokens = False
        self.malformed = False
        # The usageMetadata an answer reports instead of the fixed USAGE (plain and streamed), until cleared.
        self.report_usage: dict | None = None
        self.report_claude_usage: dict | None = None  # the same for Claude on Vertex (Anthropic's shape)
        self.token_requests = 0
        self.log = RequestLog()
        self.signatures: set[str] = set()
        self._tokens: dict[str, float] = {}
        self._counter = itertools.count(1)
        self._faults: deque[tuple[int, Any]] = deque()
        self._lock = threading.Lock()

    def issue_token(self) -> str:
        with self._lock:
            token = f"ya29.fake-{next(self._counter)}"
            self._tokens[token] = time.time() + self.expires_in
            return token

    def knows_token(self, token: str) -> bool:
        with self._lock:
            return self._tokens.get(token, 0.0) > time.time()

    @property
    def tokens_issued(self) -> list[str]:
        with self._lock:
            return list(self._tokens)

    def add_fault(self, status: int, body: Any, times: int = 1) -> None:
        with self._lock:
            self._faults.extend([(status, body)] * times)

    def next_fault(self) -> tuple[int, Any] | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
        self.log.clear()
        self.malformed = False
        self.refuse_tokens = False
        self.report_usage = None
        self.report_claude_usage = None


def _b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _verifies(key: rsa.RSAPublicKey, signature: bytes, signed: bytes) -> bool:
    try:
        key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def verify_assertion(assertion: str, state: GeminiState, token_url: str) -> str | None:
    """What is wrong with a JWT-bearer assertion, else None: RS256 signed by the service account's key, for
    this token endpoint, asking for the cloud-platform scope, not expired."""
    try:
        head, claims, signature = assertion.split(".")
        header = orjson.loads(_b64(head))
        payload = orjson.loads(_b64(claims))
        signed, raw_signature = f"{head}.{claims}".encode(), _b64(signature)
    except (ValueError, orjson.JSONDecodeError):
        return "the assertion is not a JWT"
    if not any(_verifies(key, raw_signature, signed) for key in state.public_keys):
        return "the assertion's signature does not verify with any known service account key"
    if header.get("alg") != "RS256":
        return f"alg must be RS256, got {header.get('alg')!r}"
    if payload.get("iss") != state.client_email:
        return f"unknown issuer {payload.get('iss')!r}"
    if payload.get("aud") not in (token_url, GOOGLE_TOKEN_URI):  # google-auth names Google's endpoint
        return f"audience {payload.get('aud')!r} is not this token endpoint"
    if CLOUD_PLATFORM not in str(payload.get("scope", "")).split():
        return f"scope {payload.get('scope')!r} lacks cloud-platform"
    if not payload.get("exp", 0) > time.time():
        return "the assertion expired"
    return None
