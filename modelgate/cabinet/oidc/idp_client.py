"""Outbound HTTP to identity providers: bounded in time and size, no redirects followed, no cookies kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

IDP_TIMEOUT_SECONDS = 10.0
MAX_IDP_REPLY_BYTES = 512 * 1024


class IdpRequestFailed(Exception):
    """The identity provider could not be asked or did not answer usably; the message says how."""


@dataclass(frozen=True, slots=True)
class IdpReply:
    """One answer of an identity provider, read whole (it is small by construction)."""

    status: int
    content_type: str
    body: bytes

    def json_object(self) -> dict[str, Any] | None:
        """The body as a JSON object, or None when it is not one."""
        try:
            value = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None


class IdpClient:
    """One aiohttp session for every call to identity providers, created on first use."""

    def __init__(self, timeout_seconds: float = IDP_TIMEOUT_SECONDS) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No cookie jar: one provider's cookies must never reach another organization's provider.
            self._session = aiohttp.ClientSession(timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def get(self, url: str, headers: dict[str, str] | None = None) -> IdpReply:
        """GET `url`; raises IdpRequestFailed when the provider cannot be reached."""
        return await self._send("GET", url, headers=headers)

    async def post_form(
        self, url: str, form: dict[str, str], headers: dict[str, str] | None = None
    ) -> IdpReply:
        """POST an application/x-www-form-urlencoded body to `url`."""
        return await self._send("POST", url, headers=headers, data=form)

    async def _send(self, method: str, url: str, **kwargs: Any) -> IdpReply:
        headers = {"Accept": "application/json", **(kwargs.pop("headers", None) or {})}
        try:
            # Redirects are not followed: a provider's endpoints are the URLs it published, nothing else.
            async with self._client().request(
                method, url, headers=headers, allow_redirects=False, **kwargs
            ) as resp:
                body = await _read_bounded(resp)
                return IdpReply(resp.status, resp.content_type, body)
        except TimeoutError as exc:
            raise IdpRequestFailed(f"no answer within {self._timeout.total:g} s") from exc
        except aiohttp.ClientSSLError as exc:
            raise IdpRequestFailed("the TLS handshake failed") from exc
        except aiohttp.ClientConnectionError as exc:
            raise IdpRequestFailed("the connection failed") from exc
        except (aiohttp.ClientError, ValueError) as exc:
            raise IdpRequestFailed(f"the request failed ({type(exc).__name__})") from exc

    async def close(self) -> None:
        """Close the session (at app cleanup)."""
        if self._session is not None:
            await self._session.close()


async def _read_bounded(resp: aiohttp.ClientResponse) -> bytes:
    if resp.content_length is not None and resp.content_length > MAX_IDP_REPLY_BYTES:
        raise IdpRequestFailed(f"the answer is larger than {MAX_IDP_REPLY_BYTES // 1024} KiB")
    chunks: list[bytes] = []
    size = 0
    while chunk := await resp.content.readany():
        size += len(chunk)
        if size > MAX_IDP_REPLY_BYTES:
            raise IdpRequestFailed(f"the answer is larger than {MAX_IDP_REPLY_BYTES // 1024} KiB")
        chunks.append(chunk)
    return b"".join(chunks)
