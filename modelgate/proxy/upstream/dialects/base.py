"""What every dialect's client shares: the call it builds, the answer it hands back, the client shape.

A dialect's client (`DialectUpstream`) stands where an `HttpUpstream` stands: the forwarder sends it an
OpenAI- or Anthropic-format request (`kind` says which), and it gets back an `UpstreamResponse`
(modelgate/proxy/upstream/providers.py) in that same format.
Between the two, the dialect

- `prepare`s the host's own request (`Call`: path, headers, signature, body), or refuses a route the host
  has no call for (`InvalidRequest`: another row may serve it), and
- `adapt`s the host's answer: a whole body rewritten at once, a stream rewritten piece by piece as it
  arrives (`TranslatedAnswer` with an `AnswerTransform`), an error body rewritten into the family's error
  shape so the forwarder's envelopes and failover read it like any provider's.

So usage metering, translation between the two families, content rules and error envelopes work on every
dialect unchanged.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from modelgate.config import ProviderConfig
from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.field_rules import FieldRefused
from modelgate.proxy.upstream.http_client import ConnectionPool, UpstreamBrokeOff
from modelgate.proxy.upstream.providers import HttpUpstream, StreamedBody, UpstreamResponse


@dataclass(slots=True)
class Call:
    """One request to the host, as its dialect writes it."""

    method: str
    target: str  # the whole request target: the host's path (base path included) and query
    body: bytes | None
    headers: list[tuple[str, str]] = field(default_factory=list)
    stream: bool = False  # whether the answer is a stream the dialect rewrites piece by piece
    model: str = ""  # the host's name for the model (for an answer that must name it)
    route: str = ""  # which of the dialect's calls this is (the dialect's own label)
    want_usage: bool = False  # a stream whose client-side format carries usage only when asked
    structured: bool = False  # the client asked for structured output (an answer tool's call is its text)


class AnswerTransform(Protocol):
    """Rewrites a streamed answer as it arrives; never buffers more than an incomplete event."""

    def feed(self, chunk: bytes) -> bytes:
        """The rewritten bytes ready now (may be empty while an event is incomplete)."""
        ...

    def finish(self) -> bytes:
        """What closes the rewritten stream once the host's answer has ended."""
        ...


class LocalAnswer:
    """An answer the dialect makes itself (an error the host sent in a shape of its own, already read)."""

    __slots__ = ("_body", "_read", "credential", "headers", "status")

    def __init__(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.status = status
        self.headers: dict[str, str] = {"content-type": content_type, "content-length": str(len(body))}
        self.credential = ""
        self._body = body
        self._read = False

    @property
    def content(self) -> LocalAnswer:
        return self

    async def read(self, n: int = -1) -> bytes:
        body = b"" if self._read else self._body
        self._read = True
        return body if n < 0 else body[:n]

    async def iter_any(self) -> AsyncIterator[bytes]:
        body = await self.read()
        if body:
            yield body

    def at_eof(self) -> bool:
        return self._read

    def release(self) -> None:
        self._read = True

    close = release


class TranslatedAnswer:
    """The host's answer with its body rewritten: whole by `body` (a plain answer), or piece by piece by
    `stream` (a streamed one). `pending` is what the dialect already read off the stream (to look at its
    first event) and must be rewritten first."""

    __slots__ = ("_body", "_finished", "_inner", "_pending", "_stream", "credential", "headers", "status")

    def __init__(
        self,
        inner: UpstreamResponse,
        *,
        headers: dict[str, str],
        body: Callable[[bytes], bytes] | None = None,
        stream: AnswerTransform | None = None,
        pending: bytes = b"",
        status: int | None = None,
    ) -> None:
        self._inner = inner
        self.status = inner.status if status is None else status
        self.headers = headers
        self.credential = inner.credential
        self._body = body
        self._stream = stream
        self._pending = pending
        self._finished = stream is None

    @property
    def content(self) -> TranslatedAnswer:
        return self

    async def read(self, n: int = -1) -> bytes:
        """The whole rewritten body (a plain answer; `n` bounds what is read of the host's)."""
        raw = self._pending + await self._inner.read(n)
        self._pending = b""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            self._finished = True
            return stream.feed(raw) + stream.finish()
        return self._body(raw) if self._body is not None else raw

    async def iter_any(self) -> AsyncIterator[bytes]:
        stream = self._stream
        if stream is None:
            body = await self.read()
            if body:
                yield body
            return
        if self._pending:
            pending, self._pending = self._pending, b""
            if out := stream.feed(pending):
                yield out
        async for chunk in self._inner.content.iter_any():
            if out := stream.feed(chunk):
                yield out
        self._finished = True
        if tail := stream.finish():
            yield tail

    def at_eof(self) -> bool:
        return self._finished and self._inner.content.at_eof()

    def release(self) -> None:
        self._inner.release()

    def close(self) -> None:
        self._inner.close()


class DialectUpstream:
    """A host reached in a dialect of its own, seen by the gateway as a provider of `kind` (its family).

    Subclasses write `prepare` (the host's request for one of the gateway's) and `adapt` (the family's answer
    for the host's); `send` runs one through the other over the host's pooled HTTP client. `key_header` is the
    header the configured keys go in (None: the host signs or authorises each request itself in `prepare`)."""

    key_header: str | None = None
    native_responses = True  # False: an OpenAI-kind host of this dialect takes chat completions only

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.name = config.name
        self.kind = config.kind
        self.native_messages = bool(config.native_messages)
        self.http = HttpUpstream(config, key_header=self.key_header)
        self.host = self.http.host

    @property
    def pool(self) -> ConnectionPool:
        return self.http.pool

    async def send(
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> UpstreamResponse:
        if body is not None and not isinstance(body, bytes):
            return await self.send_streamed(method, path, body, request_id, client_headers)
        call = await self.prepare(method, path, body, client_headers)
        answer = await self.http.exchange(call.method, call.target, call.headers, call.body, request_id)
        return await self.adapt(call, answer)

    async def prepare(self, method: str, path: str, body: bytes | None, client_headers: Any) -> Call:
        """The host's request for the gateway's `method path` with `body` (raise InvalidRequest for a route
        the host has no call for)."""
        raise NotImplementedError

    async def adapt(self, call: Call, answer: UpstreamResponse) -> UpstreamResponse:
        """The gateway-family answer for the host's `answer` to `call`."""
        raise NotImplementedError

    async def send_streamed(
        self, method: str, path: str, body: StreamedBody, request_id: str, client_headers: Any
    ) -> UpstreamResponse:
        """A multipart upload relayed as it arrives; no dialect but Azure's takes one."""
        raise InvalidRequest(f"{path} is not served by host {self.host} of provider {self.name}")

    async def close(self) -> None:
        await self.http.close()


async def first_bytes(answer: UpstreamResponse, want: Callable[[bytes], bool]) -> bytes:
    """Read the start of a streamed answer until `want(what was read)` or its end (to look at its first
    event before deciding what kind of answer it is); the bytes go back through
    `TranslatedAnswer(pending=)`."""
    read = b""
    async for chunk in answer.content.iter_any():
        read += chunk
        if want(read):
            break
    return read


def json_error(
    status: int, message: str, kind: str, *, type_: str | None = None, code: str | None = None
) -> bytes:
    """An error body in the family's own shape, which the forwarder turns into the client's envelope:
    OpenAI's `{"error": {...}}`, or Anthropic's `{"type": "error", "error": {...}}`."""
    if kind == "anthropic":
        return orjson.dumps(
            {"type": "error", "error": {"type": type_ or _anthropic_type(status), "message": message}}
        )
    error: dict[str, Any] = {"message": message, "type": type_ or _openai_type(status)}
    if code:
        error["code"] = code
    return orjson.dumps({"error": error})


def _openai_type(status: int) -> str:
    return {
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }.get(status, "invalid_request_error" if status < 500 else "server_error")


def _anthropic_type(status: int) -> str:
    return {
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "invalid_request_error" if status < 500 else "api_error")


def json_payload(body: bytes | None) -> dict[str, Any]:
    """The request's JSON object, for a dialect that rewrites it (the gateway checked it is one; anything
    else is the client's 400)."""
    try:
        payload = orjson.loads(body or b"")
    except orjson.JSONDecodeError:
        raise InvalidRequest("the request body is not JSON") from None
    if not isinstance(payload, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return payload


def add_turn(turns: list[dict[str, Any]], role: str, items: list[dict[str, Any]], key: str) -> None:
    """Add a turn of `items` (under `key`) for `role`; one of the same role as the turn before joins it
    (Converse and Gemini want turns to alternate; a tool call's answers go together)."""
    if not items:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1][key].extend(items)
    else:
        turns.append({"role": role, key: items})


def broken(what: str) -> UpstreamBrokeOff:
    """The error a dialect raises on an answer it cannot read (a malformed frame or event)."""
    return UpstreamBrokeOff(f"malformed answer from the provider: {what}")


_EVENT_END = re.compile(rb"\r?\n\r?\n")


def raw_events(data: bytes) -> list[bytes]:
    """The server-sent events of `data` as they came, each with its blank line (a last one without it
    too), for a stream relayed as written but looked at event by event."""
    events: list[bytes] = []
    start = 0
    for match in _EVENT_END.finditer(data):
        events.append(data[start : match.end()])
        start = match.end()
    if start < len(data):
        events.append(data[start:])
    return events


def refuse_media_urls(request: dict[str, Any], host: str) -> None:
    """400 (FieldRefused `messages`) for an image or document block given by URL in a Messages request to a
    host that takes inline bytes only (Claude on Bedrock and on Vertex): the gateway fetches nothing a tenant
    names, and the host would fail on it."""
    for message in request.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            inner = block.get("content") if isinstance(block, dict) else None
            for part in [block, *(inner if isinstance(inner, list) else ())]:
                source = part.get("source") if isinstance(part, dict) else None
                if isinstance(source, dict) and source.get("type") == "url":
                    raise FieldRefused(
                        "messages",
                        f"{host} takes images and documents as inline bytes only: one given by URL is "
                        "refused (the gateway fetches nothing); send it as base64",
                    )
