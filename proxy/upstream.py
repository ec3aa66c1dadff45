"""Upstream providers: one pooled aiohttp ClientSession per provider, or the built-in mock.

An upstream returns an object with aiohttp's response surface (`status`, `headers`, `read()`,
`content.iter_any()`, `close()`), so the forwarder relays a real provider and the mock the same way.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp

from config import ProviderConfig


class UpstreamFailure(Exception):
    """The provider could not be reached, timed out or broke the connection."""


class UpstreamResponse(Protocol):
    status: int
    headers: Any
    content: Any

    async def read(self) -> bytes: ...
    def close(self) -> None: ...


class Upstream(Protocol):
    name: str
    kind: str
    host: str
    native_messages: bool

    async def send(
        self, method: str, path: str, body: bytes | None, request_id: str, client_headers: Any
    ) -> UpstreamResponse: ...
    async def close(self) -> None: ...


# Client headers a native Anthropic upstream may need; everything else of the client's stays here.
_ANTHROPIC_PASSTHROUGH = ("anthropic-beta",)


class HttpUpstream:
    """A real provider reached over HTTP with keep-alive connections."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.kind = config.kind
        self.host = urlsplit(config.base_url).hostname or config.name
        self.native_messages = bool(config.native_messages)
        self._anthropic_version = config.anthropic_version
        self._base = config.base_url.rstrip("/")
        # The openai SDK convention puts /v1 in the base URL; the anthropic one does not.
        self._strip_v1 = config.kind == "openai"
        self._first_byte_timeout = config.first_byte_timeout
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=config.connect_timeout, sock_read=config.read_timeout
        )
        headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            "user-agent": "modelgate",
        }
        if config.kind == "anthropic":
            headers["anthropic-version"] = config.anthropic_version
            if config.api_key:
                headers["x-api-key"] = config.api_key
        elif config.api_key:
            headers["authorization"] = f"Bearer {config.api_key}"
        headers.update({k.lower(): v for k, v in config.headers})
        self._headers = headers
        self._pool_size = config.pool_size
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Created lazily so it binds to the serving loop (the process may fork workers first).
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._pool_size, keepalive_timeout=30, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                timeout=self._timeout,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def send(
        self, method: str, path: str, body: bytes | None, request_id: str, client_headers: Any
    ) -> aiohttp.ClientResponse:
        headers = self._headers.copy()
        headers["x-request-id"] = request_id
        # An OpenAI-kind provider flagged native_messages speaks Messages on its /v1/messages paths.
        if self.kind == "anthropic" or (self.native_messages and path.startswith("/v1/messages")):
            for name in _ANTHROPIC_PASSTHROUGH:
                value = client_headers.get(name)
                if value is not None:
                    headers[name] = value
            headers["anthropic-version"] = client_headers.get("anthropic-version") or self._anthropic_version
        url = self._base + (path[3:] if self._strip_v1 else path)
        try:
            async with asyncio.timeout(self._first_byte_timeout):
                return await self._client().request(method, url, data=body, headers=headers)
        except TimeoutError as exc:
            raise UpstreamFailure(f"{self.name}: no response within {self._first_byte_timeout:g}s") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamFailure(f"{self.name}: {exc.__class__.__name__}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def build_upstream(config: ProviderConfig) -> Upstream:
    """The client for one configured provider."""
    if config.kind == "mock":
        from proxy.mock_provider import MockUpstream

        return MockUpstream(config.name)
    return HttpUpstream(config)
