"""Google Cloud access tokens for Vertex AI: a service-account file or Application Default Credentials.

google-auth's `refresh` is blocking HTTP, so it runs in a thread; the token is kept and refreshed five
minutes ahead of its expiry, one refresh at a time however many requests wait for it. A token that cannot
be had is the host's failure (`UpstreamFailure`: another row may serve), never the gateway's.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC
from typing import Any

from modelgate.proxy.upstream.providers import UpstreamFailure

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
REFRESH_AHEAD_SECONDS = 300.0


def _google_auth() -> Any:
    try:
        import google.auth
        import google.auth.transport.requests
    except ImportError as exc:  # the optional extra is not installed
        raise RuntimeError("dialect 'vertex' needs google-auth: pip install modelgate[vertex]") from exc
    return google.auth


class GoogleToken:
    """The bearer token of one Vertex host, from `credentials_file` or else Application Default
    Credentials."""

    def __init__(self, credentials_file: str | None, host: str) -> None:
        self._auth = _google_auth()  # refused at start-up, not on the first request
        self._file = credentials_file
        self._host = host
        self._credentials: Any = None
        self._token = ""
        self._expires_at = 0.0  # wall clock (google-auth gives expiry as a UTC datetime)
        self._lock: asyncio.Lock | None = None

    async def bearer(self) -> str:
        """`Bearer <token>`, refreshed first if it expires within five minutes."""
        if self._fresh():
            return f"Bearer {self._token}"
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not self._fresh():  # another request may have refreshed it while this one waited
                try:
                    self._token, self._expires_at = await asyncio.to_thread(self._refresh)
                except Exception as exc:  # google-auth raises its own errors, and requests' and OSError
                    raise UpstreamFailure(
                        f"{self._host}: could not get a Google access token: {exc.__class__.__name__}: {exc}"
                    ) from exc
        return f"Bearer {self._token}"

    def _fresh(self) -> bool:
        return bool(self._token) and self._expires_at - time.time() > REFRESH_AHEAD_SECONDS

    def _refresh(self) -> tuple[str, float]:
        """A new token and when it expires (blocking: run in a thread)."""
        auth = self._auth
        if self._credentials is None:
            if self._file:
                self._credentials = _from_file(self._file)
            else:
                self._credentials, _ = auth.default(scopes=SCOPES)
        credentials = self._credentials
        credentials.refresh(auth.transport.requests.Request())
        expiry = credentials.expiry
        # No expiry given: treat it as good for the refresh margin plus a minute, then ask again.
        expires_at = (
            expiry.replace(tzinfo=UTC).timestamp()
            if expiry is not None
            else time.time() + REFRESH_AHEAD_SECONDS + 60
        )
        if not credentials.token:
            raise RuntimeError("the token endpoint gave no access token")
        return str(credentials.token), expires_at


def _from_file(path: str) -> Any:
    """Credentials of a service-account key file, or of a user's (`gcloud auth application-default login`);
    no other kind is loaded from a file named in the config."""
    from google.oauth2 import credentials, service_account

    with open(path, encoding="utf-8") as file:
        info = json.load(file)
    kind = info.get("type") if isinstance(info, dict) else None
    if kind == "service_account":
        return service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
    if kind == "authorized_user":
        return credentials.Credentials.from_authorized_user_info(info, scopes=SCOPES)
    raise ValueError(f"{path}: expected a service_account or authorized_user credentials file, got {kind!r}")
