"""How the HTTP/1.1 edge treats connections that carry model API requests: one connection serves many chat
requests in turn and pipelined requests of every route kind in order; heads and bodies split across TCP
segments, and chunked bodies, are served; `Connection: close` and HTTP/1.0 close the connection after the
answer; a streamed answer leaves the connection reusable; a client that leaves mid-body is not billed and
leaves the gateway healthy; an oversized head (431) and an oversized declared body (413) are refused in
envelope A and closed. Every chat answer carries the framing and identification headers."""

from __future__ import annotations

import asyncio
import email.utils
import socket
import time
from dataclasses import dataclass
from typing import Any

import orjson

from tests.integration.edge.conftest import (
    BODY_IDLE_TIMEOUT,
    HEADER_TIMEOUT,
    SLACK,
    GatewayStarter,
    assert_one_request_billed,
    books_of,
)
from tests.support.gateway import Tenant, register_tenant
from tests.support.raw_http import connect, read_until_closed

# How long one answer may take to arrive, whole, on a busy machine.
ANSWER_TIMEOUT = 10.0
# A pause between two writes of one request, so they reach the server as separate TCP segments: the pace
# of the client, far under the header and body deadlines.
WRITE_GAP = 0.05


@dataclass(frozen=True, slots=True)
class WireAnswer:
    """One HTTP answer read off a connection, its body de-chunked when it was sent chunked."""

    version: str  # "HTTP/1.1"
    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes
    chunked: bool

    def json(self) -> Any:
        return orjson.loads(self.body)


class AnswerReader:
    """Reads answers one after another off a connection: Content-Length bodies and chunked ones."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._deadline = 0.0

    def answer(self, within: float = ANSWER_TIMEOUT) -> WireAnswer:
        """The next whole answer; fails when it is not complete within `within` seconds."""
        self._deadline = time.monotonic() + within
        status_line, *header_lines = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        version, status, *_reason = status_line.split(" ")
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            assert name.lower().strip() not in headers, f"header {name!r} twice"
            headers[name.strip().lower()] = value.strip()
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        if chunked:
            body = self._chunked_body()
        else:
            assert "content-length" in headers, f"an answer with no framing: {status_line} {headers}"
            body = self._exactly(int(headers["content-length"]))
        return WireAnswer(version, int(status), headers, body, chunked)

    def answers(self, count: int) -> list[WireAnswer]:
        return [self.answer() for _ in range(count)]

    def leftover(self) -> bytes:
        """What arrived after the answers read so far."""
        return bytes(self._buffer)

    def _chunked_body(self) -> bytes:
        body = bytearray()
        while True:
            size = int(self._until(b"\r\n").split(b";")[0], 16)
            if size == 0:
                while self._until(b"\r\n"):  # trailer fields, up to the empty line
                    pass
                return bytes(body)
            body += self._exactly(size)
            assert self._exactly(2) == b"\r\n", "a chunk not followed by CRLF"

    def _until(self, marker: bytes) -> bytes:
        while (end := self._buffer.find(marker)) < 0:
            self._fill()
        data = bytes(self._buffer[:end])
        del self._buffer[: end + len(marker)]
        return data

    def _exactly(self, count: int) -> bytes:
        while len(self._buffer) < count:
            self._fill()
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def _fill(self) -> None:
        remaining = self._deadline - time.monotonic()
        assert remaining > 0, f"no complete answer in time; got {bytes(self._buffer[:300])!r}"
        self._sock.settimeout(remaining)
        try:
            data = self._sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"no complete answer in time; got {bytes(self._buffer[:300])!r}") from None
        assert data, f"the server closed the connection mid-answer; got {bytes(self._buffer[:300])!r}"
        self._buffer += data


def _chat_body(text: str = "hello", *, stream: bool = False) -> bytes:
    payload: dict[str, object] = {"model": "echo", "messages": [{"role": "user", "content": text}]}
    if stream:
        payload["stream"] = True
    return orjson.dumps(payload)


def _chat_head(tenant: Tenant, length: int, extra: str = "", version: str = "HTTP/1.1") -> bytes:
    return (
        f"POST /v1/chat/completions {version}\r\nHost: gateway\r\n"
        f"Authorization: Bearer {tenant.api_key}\r\nContent-Type: application/json\r\n"
        f"{extra}Content-Length: {length}\r\n\r\n"
    ).encode()


def _chat(tenant: Tenant, text: str = "hello", extra: str = "") -> bytes:
    """A whole chat request for the mock model, which answers `echo: <text>`."""
    body = _chat_body(text)
    return _chat_head(tenant, len(body), extra) + body


def _assert_echoed(answer: WireAnswer, text: str = "hello") -> None:
    """A 200 JSON chat completion of `echo` saying `echo: <text>`."""
    assert answer.status == 200, answer.body
    completion = answer.json()
    assert completion["object"] == "chat.completion"
    assert completion["model"] == "echo"
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": f"echo: {text}"}


def _keeps_alive(answer: WireAnswer) -> bool:
    return answer.headers.get("connection", "").lower() != "close"


def test_one_connection_serves_twenty_chat_requests_in_turn(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    with connect(gateway.port) as sock:
        reader = AnswerReader(sock)
        for number in range(20):
            sock.sendall(_chat(tenant, f"request {number}"))
            answer = reader.answer()
            _assert_echoed(answer, f"request {number}")
            assert _keeps_alive(answer), number
        assert reader.leftover() == b""


def test_pipelined_requests_of_every_route_kind_are_answered_in_order(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    models = f"GET /v1/models HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {tenant.api_key}\r\n\r\n"
    requests = [
        _chat(tenant, "first"),
        b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n",
        _chat(tenant, "second"),
        b"GET /api/auth/session HTTP/1.1\r\nHost: gateway\r\n\r\n",  # the cabinet, without a session
        models.encode(),
    ]
    with connect(gateway.port) as sock:
        sock.sendall(b"".join(requests))
        reader = AnswerReader(sock)
        first, health, second, cabinet, model_list = reader.answers(len(requests))
        _assert_echoed(first, "first")
        assert (health.status, health.json()) == (200, {"status": "ok"})
        _assert_echoed(second, "second")
        assert (cabinet.status, cabinet.json()) == (401, {"error": "missing bearer token"})
        assert model_list.status == 200
        assert [model["id"] for model in model_list.json()["data"]] == ["echo"]
        assert all(map(_keeps_alive, (first, health, second, cabinet, model_list)))
        assert reader.leftover() == b""

        # The connection still works after the mix.
        sock.sendall(_chat(tenant, "after the mix"))
        _assert_echoed(reader.answer(), "after the mix")


def test_a_head_and_a_body_written_separately_are_served(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    body = _chat_body("in two writes")
    with connect(gateway.port) as sock:
        reader = AnswerReader(sock)
        # An SDK-like client: the head, then the body.
        sock.sendall(_chat_head(tenant, len(body)))
        time.sleep(WRITE_GAP)
        sock.sendall(body)
        _assert_echoed(reader.answer(), "in two writes")

        # The body itself in three writes, each pause under the body deadline.
        body = _chat_body("in three pieces")
        third = len(body) // 3
        sock.sendall(_chat_head(tenant, len(body)))
        for piece in (body[:third], body[third : 2 * third], body[2 * third :]):
            time.sleep(BODY_IDLE_TIMEOUT / 5)
            sock.sendall(piece)
        _assert_echoed(reader.answer(), "in three pieces")


def test_a_head_written_in_two_halves_within_the_header_timeout_is_served(
    start_gateway: GatewayStarter,
) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    request = _chat(tenant, "split head")
    head_length = request.index(b"\r\n\r\n") + 4
    # Within the request line, half way through the head, and just before its empty line.
    for split in (10, head_length // 2, head_length - 2):
        assert WRITE_GAP < HEADER_TIMEOUT / 5
        with connect(gateway.port) as sock:
            sock.sendall(request[:split])
            time.sleep(WRITE_GAP)
            sock.sendall(request[split:])
            _assert_echoed(AnswerReader(sock).answer(), "split head")


def test_connection_close_is_answered_then_closed(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    with connect(gateway.port) as sock:
        sock.sendall(_chat(tenant, extra="Connection: close\r\n"))
        reader = AnswerReader(sock)
        answer = reader.answer()
        rest, closed_after = read_until_closed(sock, SLACK)
    _assert_echoed(answer)
    assert answer.headers.get("connection", "").lower() == "close"
    assert closed_after is not None, "the connection was still open"
    assert reader.leftover() + rest == b""


def test_an_http_1_0_request_is_answered_then_closed(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    body = _chat_body()
    with connect(gateway.port) as sock:
        sock.sendall(_chat_head(tenant, len(body), version="HTTP/1.0") + body)
        reader = AnswerReader(sock)
        answer = reader.answer()
        rest, closed_after = read_until_closed(sock, SLACK)
    # Today the answer says HTTP/1.0; an HTTP/1.1 status line would be valid too. It cannot be chunked.
    assert answer.version in ("HTTP/1.0", "HTTP/1.1")
    assert not answer.chunked and int(answer.headers["content-length"]) == len(answer.body)
    _assert_echoed(answer)
    assert closed_after is not None, "the connection was still open"
    assert reader.leftover() + rest == b""


def test_a_chunked_request_body_is_served(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"
        f"Authorization: Bearer {tenant.api_key}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    body = _chat_body("chunked")
    first, second = body[:20], body[20:]
    with connect(gateway.port) as sock:
        sock.sendall(head + b"%x\r\n" % len(first) + first + b"\r\n")
        time.sleep(WRITE_GAP)
        sock.sendall(b"%x\r\n" % len(second) + second + b"\r\n0\r\n\r\n")
        reader = AnswerReader(sock)
        _assert_echoed(reader.answer(), "chunked")
        # The chunked body was consumed to its end: the connection serves the next request.
        sock.sendall(_chat(tenant, "next"))
        _assert_echoed(reader.answer(), "next")


def test_every_chat_answer_carries_its_framing_and_identity_headers(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    with connect(gateway.port) as sock:
        sock.sendall(_chat(tenant, "own id", extra="X-Request-Id: abc-123\r\n") + _chat(tenant, "no id"))
        own, fresh = AnswerReader(sock).answers(2)
    for answer, text in ((own, "own id"), (fresh, "no id")):
        _assert_echoed(answer, text)
        assert int(answer.headers["content-length"]) == len(answer.body)
        assert email.utils.parsedate_to_datetime(answer.headers["date"]) is not None
        assert answer.headers["server"] == "modelgate"
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.headers["x-request-id"]
    assert own.headers["x-request-id"] == "abc-123"
    assert fresh.headers["x-request-id"] != "abc-123"


def test_a_streamed_answer_ends_with_done_and_the_connection_is_reused(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    body = _chat_body("streamed", stream=True)
    with connect(gateway.port) as sock:
        sock.sendall(_chat_head(tenant, len(body)) + body)
        reader = AnswerReader(sock)
        stream = reader.answer()
        assert stream.status == 200
        assert stream.chunked
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = [block.removeprefix(b"data: ") for block in stream.body.split(b"\n\n") if block]
        assert events[-1] == b"[DONE]"
        chunks = [orjson.loads(event) for event in events[:-1]]
        assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
        text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks)
        assert text == "echo: streamed"

        sock.sendall(_chat(tenant, "after the stream"))
        _assert_echoed(reader.answer(), "after the stream")


def test_a_client_leaving_mid_body_is_not_billed_and_the_gateway_serves_on(
    start_gateway: GatewayStarter,
) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    assert asyncio.run(books_of(gateway.storage_url, tenant)).spent_micros == 0
    body = _chat_body("abandoned")
    with connect(gateway.port) as sock:
        sock.sendall(_chat_head(tenant, len(body)) + body[: len(body) // 2])
    # The socket is closed: the client has left with half its body sent.

    with connect(gateway.port) as sock:
        sock.sendall(_chat(tenant, "served"))
        _assert_echoed(AnswerReader(sock).answer(), "served")
    # Only the served request is billed.
    assert_one_request_billed(gateway, tenant)


def test_a_head_over_the_line_limit_is_refused_with_431_in_envelope_a(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    marker = "LONG-HEADER-MARKER-"
    request = _chat(tenant, extra=f"X-Long: {(marker * 500)[:9000]}\r\n")
    with connect(gateway.port) as sock:
        sock.sendall(request)
        reader = AnswerReader(sock)
        answer = reader.answer()
        _rest, closed_after = read_until_closed(sock, SLACK)
    assert answer.status == 431
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.headers["server"] == "modelgate"
    error = answer.json()
    assert set(error) == {"error"}
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith("malformed HTTP request: ")
    for leak in (b"Traceback", b'File "', marker.encode(), tenant.api_key.encode()):
        assert leak not in answer.body
    assert closed_after is not None, "the connection was still open"


def test_a_huge_declared_body_is_refused_with_413_and_closed(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    with connect(gateway.port) as sock:
        sock.sendall(_chat_head(tenant, 200_000_000) + _chat_body()[:10])
        reader = AnswerReader(sock)
        answer = reader.answer()
        rest, closed_after = read_until_closed(sock, SLACK)
    assert answer.status == 413
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.headers["x-request-id"]
    assert answer.json() == {
        "error": {
            "message": "request body is larger than the 4 MiB allowed on this route",
            "type": "invalid_request_error",
            "code": "request_too_large",
        }
    }
    assert answer.headers.get("connection", "").lower() == "close"
    assert closed_after is not None, "the connection was still open"
    assert reader.leftover() + rest == b""
