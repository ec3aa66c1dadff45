"""Upstream providers: a configured provider's client (`HttpUpstream`), or the built-in mock.

A provider's requests whose body is in memory go through the pooled HTTP/1.1 client of
modelgate/proxy/upstream/http_client.py; a multipart upload relayed as it arrives and the realtime WebSocket
go through an aiohttp ClientSession, made on first use. Every answer — the pooled client's, an upload's, a
dialect's rewritten one, the mock's — is an `UpstreamResponse` whose body is an `AnswerBody`, so the
forwarder and the stream relay read a real provider and the mock alike, with no duck-typing.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import aiohttp
from yarl import URL

from modelgate.config import ProviderConfig
from modelgate.proxy.upstream.http_client import (
    ConnectionPool,
    HttpClient,
    PoolSaturated,
    UpstreamAnswer,
    UpstreamBrokeOff,
    UpstreamTimeout,
)
from modelgate.proxy.upstream.key_ring import Credential, KeyRing, fingerprint


class UpstreamFailure(Exception):
    """The provider could not be reached, timed out or broke the connection."""


class UpstreamSaturated(UpstreamFailure):
    """The operator's cap on connections to the provider (`pool_size`) was full for `pool_wait_timeout`:
    the request was never sent; not a fault of the provider, so no cool-down."""


class StreamedBody(Protocol):
    """A request body relayed as it arrives (a multipart upload), sent with its own Content-Type."""

    content_type: str

    @property
    def length(self) -> int | None: ...
    def __aiter__(self) -> AsyncIterator[bytes]: ...


class AnswerBody(Protocol):
    """The body of an upstream answer, as the forwarder and the stream relay read it. Two kinds stand
    behind it: a reader fed by a connection (the pooled client's `UpstreamAnswer`, aiohttp's `StreamReader`
    for an upload), which knows when the whole body is in (`at_eof`), and a generator that rewrites or makes
    the pieces (a dialect's `TranslatedAnswer`, a `LocalAnswer`, the mock), which ends only once read to its
    end. The relay reads every body to its end (StopAsyncIteration), so it need not know which it has."""

    def iter_any(self) -> AsyncIterator[bytes]:
        """Each piece of the body as it arrives (pieces that arrived together come as one)."""
        ...

    def at_eof(self) -> bool:
        """Whether the whole body is in and every piece of it was read: a piece read then is the last."""
        ...

    async def read(self, n: int = -1) -> bytes:
        """The whole body (n < 0), or up to n bytes of it."""
        ...


class UpstreamResponse(Protocol):
    """A provider's answer once its head is in."""

    status: int
    credential: str  # the fingerprint of the key it was asked with ("" for none; key_ring.py)

    @property
    def headers(self) -> Mapping[str, str]:
        """Its headers, by lower-case name (aiohttp's are case-insensitive)."""
        ...

    @property
    def content(self) -> AnswerBody: ...

    async def read(self, n: int = -1) -> bytes:
        """The whole body (n < 0; the connection goes back to its pool), or up to n bytes of it."""
        ...

    def release(self) -> None:
        """Done with an answer read to its end: its connection may serve another request."""
        ...

    def close(self) -> None:
        """Let go of the answer at once, whatever is left unread (its connection is not reused)."""
        ...


class UploadAnswer:
    """The answer to a multipart upload relayed as it arrives (aiohttp's ClientResponse), as an
    `UpstreamResponse`: the same answer with the key fingerprint it was asked with."""

    __slots__ = ("_answer", "credential", "status")

    def __init__(self, answer: aiohttp.ClientResponse, credential: str) -> None:
        self._answer = answer
        self.status = answer.status
        self.credential = credential

    @property
    def headers(self) -> Mapping[str, str]:
        return self._answer.headers

    @property
    def content(self) -> aiohttp.StreamReader:
        return self._answer.content

    async def read(self, n: int = -1) -> bytes:
        return await self._answer.read() if n < 0 else await self._answer.content.read(n)

    def release(self) -> None:
        self._answer.release()

    def close(self) -> None:
        self._answer.close()


class Upstream(Protocol):
    name: str
    kind: str
    host: str
    native_messages: bool
    native_responses: bool  # an OpenAI-kind host that takes the Responses API (else it is translated)

    @property
    def pool(self) -> ConnectionPool | None:
        """Its pooled connections to the provider (None: in process, no connections)."""
        ...

    def send(
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> Awaitable[UpstreamResponse]: ...
    async def close(self) -> None: ...


# Client headers a native Anthropic upstream may need; everything else of the client's stays here.
_MAX_CACHED_HEADS = 256
_ANTHROPIC_PASSTHROUGH = ("anthropic-beta",)
# Headers of the request itself; a provider's configured headers cannot set them.
_SET_PER_REQUEST = frozenset(("host", "content-length", "transfer-encoding", "connection", "x-request-id"))
# Characters a request target may carry as they are; anything else is percent-encoded.
_UNSAFE_IN_TARGET = re.compile(r"[^A-Za-z0-9\-._~!$&'()*+,;=:@/?%]")


def _header_line(name: str, value: str) -> bytes:
    if "\r" in value or "\n" in value:
        raise ValueError(f"header {name} holds a line break")
    return f"{name}: {value}\r\n".encode("latin-1")


class HttpUpstream:
    """A real provider reached over HTTP with keep-alive connections.

    Requests whose body is in memory (every JSON route, GETs and DELETEs) go through the lean pooled client
    of proxy.upstream.http_client; a multipart upload relayed as it arrives and the realtime WebSocket go
    through an aiohttp ClientSession, created on first use.
    """

    def __init__(self, config: ProviderConfig, *, key_header: str | None = None) -> None:
        """`key_header` names the header its keys go in (a dialect's own, e.g. `api-key`); by default
        `x-api-key` for an Anthropic-kind provider, else `authorization: Bearer`."""
        self.name = config.name
        self.kind = config.kind
        parts = urlsplit(config.base_url)
        self.host = parts.hostname or config.name
        self.native_messages = bool(config.native_messages)
        self.native_responses = True
        self._anthropic_version = config.anthropic_version
        self._base = config.base_url.rstrip("/")
        self._base_path = parts.path.rstrip("/")
        # The openai SDK convention puts /v1 in the base URL; the anthropic one does not.
        self._strip_v1 = config.kind == "openai"
        self._first_byte_timeout = config.first_byte_timeout
        self._read_timeout = config.read_timeout
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
        headers.update({k.lower(): v for k, v in config.headers})
        # The keys go per request (modelgate/proxy/upstream/key_ring.py), never in the fixed head.
        auth = key_header or ("x-api-key" if config.kind == "anthropic" else "authorization")
        self._keys = KeyRing(
            [_credential(auth, key) for key in config.credentials], config.key_cooldown_seconds
        )
        self._headers = headers
        self._pool_size = config.pool_size  # 0: no cap
        self._session: aiohttp.ClientSession | None = None
        self._origin = f"{parts.scheme}://{parts.netloc}"
        # The fixed part of every request's head, written once: host, then the provider's headers.
        secure = parts.scheme == "https"
        port = parts.port or (443 if secure else 80)
        hostname = parts.hostname or ""
        authority = hostname if parts.port is None else f"{hostname}:{parts.port}"
        if parts.hostname and ":" in parts.hostname:  # an IPv6 literal
            authority = f"[{parts.hostname}]" if parts.port is None else f"[{parts.hostname}]:{parts.port}"
        self.authority = authority.encode("idna").decode("ascii")  # the `host` header it sends
        self._fixed_headers = b"host: " + self.authority.encode("ascii") + b"\r\n"
        # On Messages paths the version is set per request: the client may ask for another one.
        self._speaks_messages = config.kind == "anthropic" or self.native_messages
        lines = {name: _header_line(name, value) for name, value in headers.items()}  # refuses line breaks
        _header_line("anthropic-version", config.anthropic_version)
        self._fixed_headers += b"".join(
            line
            for name, line in lines.items()
            if name not in _SET_PER_REQUEST and not (name == "anthropic-version" and self._speaks_messages)
        )
        self._heads: dict[tuple[str, str], bytes] = {}
        self._client = HttpClient(
            ConnectionPool(
                parts.hostname or "",
                port,
                tls=ssl.create_default_context() if secure else None,
                limit=config.pool_size or None,
                connect_timeout=config.connect_timeout,
                wait_timeout=config.pool_wait_timeout,
                name=f"{config.name}@{self.host}",
            ),
            config.read_timeout,
        )

    @property
    def pool(self) -> ConnectionPool:
        """Its connection pool (the metrics read its connections and waits)."""
        return self._client.pool

    def _aiohttp(self) -> aiohttp.ClientSession:
        # Created lazily so it binds to the serving loop (the process may fork workers first).
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._pool_size, keepalive_timeout=30, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                timeout=self._timeout,
                skip_auto_headers=("User-Agent",),
                cookie_jar=aiohttp.DummyCookieJar(),  # a provider's cookies must never cross tenants
            )
        return self._session

    def _row_path(self, path: str) -> str:
        return self._base_path + (path[3:] if self._strip_v1 else path)

    def _head_start(self, method: str, path: str) -> bytes:
        """Request line and fixed headers for (method, path), built once per fixed path."""
        head = self._heads.get((method, path))
        if head is None:
            head = self._request_line(method, self._row_path(path))
            if len(self._heads) < _MAX_CACHED_HEADS:  # paths with object ids are many; keep the fixed ones
                self._heads[(method, path)] = head
        return head

    def _request_line(self, method: str, target: str) -> bytes:
        """The request line for `target` (percent-encoding what a target may not carry as it is), then the
        fixed headers."""
        if _UNSAFE_IN_TARGET.search(target):
            target = quote(target, safe="/?=&%:@!$'()*+,;-._~")
        return f"{method} {target} HTTP/1.1\r\n".encode("ascii") + self._fixed_headers

    def _messages_headers(self, path: str, client_headers: Any) -> list[tuple[str, str]]:
        """The Anthropic headers of a request to a provider that speaks Messages: the client's
        `anthropic-beta` and `anthropic-version` (else the configured version) on its Messages paths; a
        value with a line break is never sent on. An OpenAI-kind provider flagged native_messages speaks
        Messages on its /v1/messages paths only, and elsewhere gets a version only if configured."""
        if self.kind != "anthropic" and not path.startswith("/v1/messages"):
            configured = self._headers.get("anthropic-version")
            return [("anthropic-version", configured)] if configured else []
        headers = [
            (name, value)
            for name in _ANTHROPIC_PASSTHROUGH
            if (value := client_headers.get(name)) is not None and "\r" not in value and "\n" not in value
        ]
        version = client_headers.get("anthropic-version")
        if not version or "\r" in version or "\n" in version:
            version = self._headers.get("anthropic-version") or self._anthropic_version
        headers.append(("anthropic-version", version))
        return headers

    def send(
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> Coroutine[Any, Any, UpstreamResponse]:
        # A plain function handing back the coroutine that sends: one coroutine less per request (the head
        # is built, or refused, at the call, which the forwarder makes and awaits in one expression).
        if body is not None and not isinstance(body, bytes):
            return self._send_streamed(method, path, body, request_id, client_headers)
        head = _per_request(self._head_start(method, path), method, body, request_id)
        if self._speaks_messages:
            for name, value in self._messages_headers(path, client_headers):
                head += _header_line(name, value)
        return self._with_keys(head, body)

    async def exchange(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
        request_id: str,
    ) -> UpstreamAnswer:
        """One request to `target` (the whole request target: this host's path and query, as the dialect
        built it) with `headers` after the fixed ones, and the key ring's key, if it has keys, per try.

        For a dialect (modelgate/proxy/upstream/dialects/) whose paths, headers or signature depend on the
        request."""
        head = _per_request(self._request_line(method, target), method, body, request_id)
        head += b"".join(_header_line(name, value) for name, value in headers)
        return await self._with_keys(head, body)

    @property
    def base_path(self) -> str:
        """The path of its base URL, without the trailing slash (empty for a bare origin)."""
        return self._base_path

    async def _with_keys(self, head: bytes, body: bytes | None) -> UpstreamAnswer:
        """Send `head` (without its closing blank line) and body with a key of the ring; a key refused or
        throttled rests, and a sibling that does not takes the request."""
        keys = self._keys
        credential = keys.pick()
        if credential is None:
            return await self._request(head + b"\r\n", body)
        tried: list[Credential] = []
        request, timeout = self._client.request, self._first_byte_timeout
        while True:
            try:  # `_request`, inline: one coroutine less per request
                answer = await request(head + credential.line + b"\r\n", body, timeout)
            except (UpstreamBrokeOff, OSError) as exc:
                raise self._failure(exc) from exc
            answer.credential = credential.fingerprint
            if not keys.answered(credential, answer.status, answer.headers):
                return answer
            # Nothing of this answer was read; its body is in memory, so it can be sent again.
            tried.append(credential)
            sibling = keys.pick(tried)
            if sibling is None or sibling.cooled_until > time.monotonic():
                return answer  # every key rests: the row fails like any refused one
            answer.close()
            credential = sibling

    async def _request(self, head: bytes, body: bytes | None) -> UpstreamAnswer:
        try:
            return await self._client.request(head, body, self._first_byte_timeout)
        except (UpstreamBrokeOff, OSError) as exc:
            raise self._failure(exc) from exc

    def _failure(self, exc: UpstreamBrokeOff | OSError) -> UpstreamFailure:
        """What the row loop hears of a request the pooled client could not complete."""
        if isinstance(exc, UpstreamTimeout):
            return UpstreamFailure(f"{self.name}: no response within {self._first_byte_timeout:g}s")
        if isinstance(exc, PoolSaturated):
            return UpstreamSaturated(f"{self.name}: {exc}")
        if isinstance(exc, TimeoutError):
            return UpstreamFailure(f"{self.name}: no connection within the connect timeout")
        return UpstreamFailure(f"{self.name}: {exc.__class__.__name__}: {exc}")

    async def _send_streamed(
        self, method: str, path: str, body: StreamedBody, request_id: str, client_headers: Any
    ) -> UploadAnswer:
        """A multipart upload relayed as it arrives, through aiohttp's client (it streams request bodies)."""
        extra = self._messages_headers(path, client_headers) if self._speaks_messages else []
        return await self.upload(method, self._row_path(path), extra, body, request_id)

    async def upload(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: StreamedBody,
        request_id: str,
    ) -> UploadAnswer:
        """A multipart upload relayed as it arrives to `target` (this host's path and query), with `headers`
        after the fixed ones and one key of the ring. For a dialect whose paths are its own (Azure's)."""
        sent = self._headers.copy()
        sent["x-request-id"] = request_id
        sent["content-type"] = body.content_type
        credential = self._keys.pick()  # an upload cannot be sent again: one key, noted if it is refused
        if credential is not None:
            sent[credential.header] = credential.value
        if body.length is not None:
            sent["content-length"] = str(body.length)
        sent.update(headers)
        url = URL(self._origin + target)
        # An upload takes as long as the client takes to send it, so the first-byte deadline cannot start
        # with the request; aiohttp's read timeout starts once the last byte of the body is out.
        try:
            session = self._aiohttp()
            answer = await session.request(method, url, data=body, headers=sent, allow_redirects=False)
        except TimeoutError as exc:
            raise UpstreamFailure(f"{self.name}: no response within {self._read_timeout:g}s") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamFailure(f"{self.name}: {exc.__class__.__name__}") from exc
        if credential is None:
            return UploadAnswer(answer, "")
        self._keys.answered(credential, answer.status, answer.headers)
        return UploadAnswer(answer, credential.fingerprint)

    async def connect_realtime(self, model: str, request_id: str) -> aiohttp.ClientWebSocketResponse:
        """The provider's realtime WebSocket, `{base_url}/realtime?model=…`, with the provider's key."""
        scheme, _, rest = self._base.partition("://")
        url = ("wss" if scheme == "https" else "ws") + "://" + rest + "/realtime"
        headers = {k: v for k, v in self._headers.items() if k not in ("content-type", "accept-encoding")}
        headers["x-request-id"] = request_id
        credential = self._keys.pick()
        if credential is not None:
            headers[credential.header] = credential.value
        try:
            async with asyncio.timeout(self._first_byte_timeout):
                return await self._aiohttp().ws_connect(
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
        self._client.pool.close()
        if self._session is not None:
            await self._session.close()
            self._session = None


def _per_request(head: bytes, method: str, body: bytes | None, request_id: str) -> bytes:
    """`head` with the headers of this one request: its id, and the body's length where it has one."""
    head += b"x-request-id: " + request_id.encode("ascii") + b"\r\n"
    if body is not None or method in ("POST", "PUT", "PATCH"):
        head += b"content-length: %d\r\n" % len(body or b"")
    return head


def _credential(header: str, key: str) -> Credential:
    """A key as the header that carries it: `authorization: Bearer KEY`, else the key itself (`x-api-key`,
    Azure's `api-key`, Gemini's `x-goog-api-key`)."""
    value = f"Bearer {key}" if header == "authorization" else key
    return Credential(header, value, _header_line(header, value), fingerprint(key))


def upstream_key(provider: ProviderConfig, host: str) -> str:
    """The name of the client serving `provider` from `host`: the provider's name when it has one place."""
    return f"{provider.name}@{host}" if provider.hosts else provider.name


def build_upstreams(providers: Sequence[ProviderConfig]) -> dict[str, Upstream]:
    """A client per provider, or per host of a provider that has hosts, by `upstream_key`."""
    upstreams: dict[str, Upstream] = {}
    for provider in providers:
        for host in provider.host_names if provider.hosts else (provider.host,):
            upstreams[upstream_key(provider, host)] = build_upstream(provider.served_from(host))
    return upstreams


def build_upstream(config: ProviderConfig) -> Upstream:
    """The client for one configured provider."""
    if config.kind == "mock":
        from modelgate.proxy.upstream.mock_provider import MockUpstream

        return MockUpstream(config.name)
    if config.dialect not in ("", "openai", "anthropic") or config.option("preset"):
        from modelgate.proxy.upstream.dialects import dialect_upstream

        return dialect_upstream(config)
    return HttpUpstream(config)
