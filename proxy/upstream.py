"""Upstream providers: one pooled aiohttp ClientSession per provider, or the built-in mock.

An upstream returns an object with aiohttp's response surface (`status`, `headers`, `read()`,
`content.iter_any()`, `close()`), so the forwarder relays a real provider and the mock the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from config import ProviderConfig


class UpstreamFailure(Exception):
    """The provider could not be reached, timed out or broke the connection."""


class StreamedBody(Protocol):
    """A request body relayed as it arrives (a multipart upload), sent with its own Content-Type."""

    content_type: str

    @property
    def length(self) -> int | None: ...
    def __aiter__(self) -> AsyncIterator[bytes]: ...


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
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> UpstreamResponse: ...
    async def close(self) -> None: ...


# Client headers a native Anthropic upstream may need; everything else of the client's stays here.
_MAX_CACHED_URLS = 256
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
        self._urls: dict[str, URL] = {}

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
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> aiohttp.ClientResponse:
        headers = self._headers.copy()
        headers["x-request-id"] = request_id
        streamed = body is not None and not isinstance(body, bytes)
        if streamed:
            headers["content-type"] = body.content_type
            if body.length is not None:
                headers["content-length"] = str(body.length)
        # An OpenAI-kind provider flagged native_messages speaks Messages on its /v1/messages paths.
        if self.kind == "anthropic" or (self.native_messages and path.startswith("/v1/messages")):
            for name in _ANTHROPIC_PASSTHROUGH:
                value = client_headers.get(name)
                if value is not None:
                    headers[name] = value
            headers["anthropic-version"] = client_headers.get("anthropic-version") or self._anthropic_version
        url = self._urls.get(path)
        if url is None:
            # Parsed once per path: aiohttp would otherwise parse the URL string on every request.
            url = URL(self._base + (path[3:] if self._strip_v1 else path))
            if len(self._urls) < _MAX_CACHED_URLS:  # paths with object ids are many; keep the fixed ones
                self._urls[path] = url
        # An upload takes as long as the client takes to send it, so the first-byte deadline cannot start
        # with the request; aiohttp's read timeout starts once the last byte of the body is out.
        first_byte_timeout = None if streamed else self._first_byte_timeout
        try:
            async with asyncio.timeout(first_byte_timeout):
                return await self._client().request(method, url, data=body, headers=headers)
        except TimeoutError as exc:
            raise UpstreamFailure(f"{self.name}: no response within {self._first_byte_timeout:g}s") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamFailure(f"{self.name}: {exc.__class__.__name__}") from exc

    async def connect_realtime(self, model: str, request_id: str) -> aiohttp.ClientWebSocketResponse:
        """The provider's realtime WebSocket, `{base_url}/realtime?model=…`, with the provider's key."""
        scheme, _, rest = self._base.partition("://")
        url = ("wss" if scheme == "https" else "ws") + "://" + rest + "/realtime"
        headers = {k: v for k, v in self._headers.items() if k not in ("content-type", "accept-encoding")}
        headers["x-request-id"] = request_id
        try:
            async with asyncio.timeout(self._first_byte_timeout):
                return await self._client().ws_connect(
                    url,
                    params={"model": model},
                    headers=headers,
                    autoping=True,
                    max_msg_size=16 * 1024 * 1024,
                )
        except TimeoutError as exc:
            raise UpstreamFailure(
                f"{self.name}: no realtime handshake within {self._first_byte_timeout:g}s"
            ) from exc
        except aiohttp.WSServerHandshakeError as exc:
            raise UpstreamFailure(f"{self.name}: realtime handshake answered HTTP {exc.status}") from exc
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
