"""What the lean HTTP front (modelgate/proxy/http/front.py) hands the model API: a request whose body is
already in memory, with the part of aiohttp's `web.Request` surface the pipeline reads, and the two ways an
answer goes back (a whole `web.Response`, serialised here, or a `FrontStream` written as it is relayed).

Answers carry the headers aiohttp would give them (`Content-Length` or chunked framing, `Content-Type`,
`Date`, `Server`, `Connection: close` when the connection ends), so a client cannot tell which server path
served it.
"""

from __future__ import annotations

import asyncio
import functools
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, final

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from multidict import CIMultiDictProxy, MultiDictProxy
from yarl import URL

if TYPE_CHECKING:
    from modelgate.proxy.http.front import FrontConnection

# The `Server` header of every answer, the front's and aiohttp's (connection_guard.name_the_server): no
# Python or aiohttp version for a scanner to match against.
SERVER_NAME = "modelgate"
_DEFAULT_TYPE = "application/octet-stream"  # aiohttp's, for an answer that names none


class CompleteBody:
    """A request body that arrived whole before its handler ran, with the part of aiohttp's StreamReader that
    the body readers use (plugins.body_limits.read_limited, proxy.http.body_decoding)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def is_eof(self) -> bool:
        return True  # every byte has arrived (aiohttp's meaning), whether or not it was read

    def read_nowait(self, n: int = -1) -> bytes:
        data = self._data
        if n < 0 or n >= len(data):
            self._data = b""
            return data
        self._data = data[n:]
        return data[:n]

    async def read(self, n: int = -1) -> bytes:
        return self.read_nowait(n)

    async def readany(self) -> bytes:
        return self.read_nowait()

    async def readexactly(self, n: int) -> bytes:
        if n > len(self._data):
            data, self._data = self._data, b""
            raise asyncio.IncompleteReadError(data, n)
        return self.read_nowait(n)


@final  # never subclassed: `type(request) is FrontRequest` decides which entry a request came through
class FrontRequest:
    """One request the front serves: method, target, headers and the whole body, parsed once."""

    __slots__ = (
        "_query",
        "answered",
        "content",
        "content_length",
        "headers",
        "keep_alive",
        "method",
        "path",
        "protocol",
        "query_string",
        "raw_path",
        "remote",
        "stream",
        "transport",
    )

    def __init__(
        self,
        protocol: FrontConnection,
        remote: str | None,
        method: str,
        target: str,
        headers: CIMultiDictProxy[str],
        body: bytes,
        content_length: int | None,
        keep_alive: bool,
    ) -> None:
        self.protocol = protocol
        self.transport = protocol.transport
        self.remote = remote
        self.method = method
        self.raw_path = target
        path, _, self.query_string = target.partition("?")
        self.path = path  # the front serves only targets without percent-escapes: decoded is raw
        self.headers = headers
        self.content = CompleteBody(body)
        self.content_length = content_length
        self.keep_alive = keep_alive  # then whether the connection stays open after the answer
        self.answered = False
        self.stream: FrontStream | None = None  # the streamed answer, once one was prepared
        self._query: MultiDictProxy[str] | None = None

    @property
    def rel_url(self) -> URL:
        return URL.build(path=self.path, query_string=self.query_string, encoded=True)

    @property
    def query(self) -> MultiDictProxy[str]:
        if self._query is None:
            self._query = self.rel_url.query
        return self._query

    @property
    def content_type(self) -> str:
        raw = self.headers.get("content-type")
        if not raw:
            return _DEFAULT_TYPE
        return raw.partition(";")[0].strip().lower() or _DEFAULT_TYPE


def _head(status: int, reason: str, headers: Any, framing: str, keep_alive: bool) -> bytes:
    """The status line and headers; `framing` is the Content-Length or Transfer-Encoding line aiohttp adds
    (empty for a status that has no body), and a body of no named type is `application/octet-stream`."""
    lines = [f"HTTP/1.1 {status} {reason}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
    if framing:
        if "content-type" not in headers and framing != _EMPTY:
            lines.append(f"Content-Type: {_DEFAULT_TYPE}\r\n")
        lines.append(framing)
    if "date" not in headers:
        lines.append(f"Date: {rfc822_formatted_time()}\r\n")
    if "server" not in headers:
        lines.append(f"Server: {SERVER_NAME}\r\n")
    if not keep_alive:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    text = "".join(lines)
    if text.count("\n") != len(lines) or text.count("\r") != len(lines):
        # A header value with a line break would end the head early (response splitting); aiohttp refuses
        # such a header too.
        raise ValueError("a response header contains a line break")
    return text.encode("utf-8", "surrogateescape")


_EMPTY = "Content-Length: 0\r\n"


def whole_answer(response: web.StreamResponse, keep_alive: bool) -> bytes:
    """A `web.Response` that was never prepared, as the bytes aiohttp would send for it."""
    body = response.body if isinstance(response, web.Response) else None
    if body is None:
        body = b""
    elif not isinstance(body, (bytes, bytearray)):
        body = body._value  # aiohttp's BytesPayload / StringPayload around a body given as text
        if isinstance(body, str):
            body = body.encode()
    status = response.status
    if status < 200 or status in (204, 304):
        framing, body = "", b""  # no body and no length (RFC 9110 section 8.6)
    else:
        framing = f"Content-Length: {len(body)}\r\n" if body else _EMPTY
    return _head(status, response.reason, response.headers, framing, keep_alive) + bytes(body)


class FrontStream:
    """A streamed answer written straight to the front's connection with chunked framing; its head goes out
    with the first bytes of its body, in one write (as the relay's aiohttp stream does)."""

    __slots__ = (
        "_connection",
        "_head_sent",
        "finished",
        "headers",
        "keep_alive",
        "prepared",
        "reason",
        "status",
    )

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.reason = reason_of(status)
        self.headers = headers
        self.keep_alive = True
        self.prepared = False
        self.finished = False
        self._head_sent = False
        self._connection: FrontConnection | None = None

    @property
    def started(self) -> bool:
        """Whether any of it (its head at least) went out."""
        return self._head_sent

    async def prepare(self, request: FrontRequest) -> None:
        self.attach(request)

    def attach(self, request: FrontRequest) -> None:
        """`prepare`, without a coroutine: the stream answers `request` on its connection."""
        request.stream = self
        self._connection = request.protocol
        self.keep_alive = request.keep_alive
        self.prepared = True

    def _framed(self, data: bytes) -> bytes:
        chunk = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
        if self._head_sent:
            return chunk
        self._head_sent = True
        head = _head(
            self.status, self.reason, self.headers, "Transfer-Encoding: chunked\r\n", self.keep_alive
        )
        return head + chunk

    async def write(self, data: bytes) -> None:
        if not self.push(data):
            await self.drained()

    def push(self, data: bytes) -> bool:
        """Write `data` without waiting (a relayed piece, from the provider connection's callback): False when
        the client is behind, and `drained` waits for it; ConnectionResetError once the client is gone."""
        connection = self._connection
        if connection is None:
            raise RuntimeError("a stream written before prepare()")
        if data and self._head_sent:  # the usual piece, framed here: no further call per piece
            return connection.put(b"%x\r\n%b\r\n" % (len(data), data))
        return connection.put(self._framed(data))

    async def drained(self) -> None:
        """Until the client has taken what was written."""
        connection = self._connection
        if connection is not None:
            await connection.drained()

    async def write_eof(self, data: bytes = b"") -> None:
        if self.finished:
            return
        connection = self._connection
        if connection is None:
            raise RuntimeError("write_eof() before prepare()")
        if not connection.put(self._framed(data) + b"0\r\n\r\n"):  # `connection.send`, inline
            await connection.drained()
        self.finished = True


@functools.cache
def reason_of(status: int) -> str:
    """The reason phrase aiohttp puts on a status line (empty for a status with none)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
