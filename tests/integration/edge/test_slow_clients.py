"""Slow and idle clients cost a connection for a bounded time: a silent or idle connection, a head sent a
byte at a time and a stalled body are closed by their deadlines; a request line with no HTTP version is
refused at once. Clients that are slow but keep sending within the deadlines are served."""

from __future__ import annotations

import time

import orjson

from tests.integration.edge.conftest import (
    BODY_IDLE_TIMEOUT,
    HEADER_TIMEOUT,
    KEEPALIVE_TIMEOUT,
    SLACK,
    GatewayStarter,
    assert_one_request_billed,
)
from tests.support.gateway import Tenant, register_tenant
from tests.support.raw_http import connect, exchange, parse_answer, read_until_closed

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n"


def _chat_head(tenant: Tenant, length: int) -> bytes:
    return (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"
        f"Authorization: Bearer {tenant.api_key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _chat_body(text: str = "hello") -> bytes:
    return orjson.dumps({"model": "echo", "messages": [{"role": "user", "content": text}]})


def test_a_connection_that_sends_nothing_is_closed_by_the_header_timeout(
    start_gateway: GatewayStarter,
) -> None:
    gateway = start_gateway()
    with connect(gateway.port) as sock:
        data, closed_after = read_until_closed(sock, HEADER_TIMEOUT + SLACK)
    assert closed_after is not None and data == b""


def test_an_idle_keepalive_connection_is_closed_after_the_keepalive_timeout(
    start_gateway: GatewayStarter,
) -> None:
    gateway = start_gateway()
    with connect(gateway.port) as sock:
        for _ in range(2):  # the connection is kept alive between requests
            sock.sendall(HEALTH)
            head = sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 200")
        data, closed_after = read_until_closed(sock, KEEPALIVE_TIMEOUT + SLACK)
    assert closed_after is not None and data == b""
    # The keep-alive deadline, not the shorter header one, closed it.
    assert closed_after >= KEEPALIVE_TIMEOUT * 0.9


def test_a_head_sent_a_byte_at_a_time_is_closed_by_the_header_timeout(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    started = time.monotonic()
    closed_after = None
    with connect(gateway.port) as sock:
        sock.settimeout(0.1)  # the pace of the slow client: one byte every 0.1 s (a whole head takes 4 s)
        for byte in HEALTH:
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(65536) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - started
                break
    assert closed_after is not None, "the whole head was sent: the connection was never closed"
    assert closed_after < HEADER_TIMEOUT + SLACK


def test_a_stalled_body_is_closed_by_the_body_idle_timeout_and_nothing_is_billed(
    start_gateway: GatewayStarter,
) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    body = _chat_body()
    with connect(gateway.port) as sock:
        sock.sendall(_chat_head(tenant, len(body)) + body[:10])
        data, closed_after = read_until_closed(sock, BODY_IDLE_TIMEOUT + SLACK)
    assert closed_after is not None and data == b""

    # The gateway is fine after it: a whole request is served, and only that one is billed.
    closing_head = _chat_head(tenant, len(body)).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    answer, _ = exchange(gateway.port, closing_head + body)
    assert answer.status == 200
    assert_one_request_billed(gateway, tenant)


def test_a_body_sent_slowly_but_steadily_is_served(start_gateway: GatewayStarter) -> None:
    gateway = start_gateway()
    tenant = register_tenant(gateway.base_url)
    body = _chat_body("x" * 40)
    with connect(gateway.port) as sock:
        sock.sendall(_chat_head(tenant, len(body)))
        # Each pause is under the body deadline; together they are several times longer.
        pieces = [body[i : i + 8] for i in range(0, len(body), 8)]
        for piece in pieces:
            time.sleep(BODY_IDLE_TIMEOUT / 3)  # the pace of the slow client
            sock.sendall(piece)
        assert len(pieces) * BODY_IDLE_TIMEOUT / 3 > 2 * BODY_IDLE_TIMEOUT
        sock.settimeout(SLACK)
        answer = parse_answer(sock.recv(65536))
    assert answer.status == 200


def test_a_request_line_without_an_http_version_is_refused_at_once(start_gateway: GatewayStarter) -> None:
    # Long deadlines: only the missing version may close these connections.
    gateway = start_gateway(header=30.0, keepalive=30.0)
    for request in (b"GET /healthz\r\n", b"GET /healthz\r\n\r\n", b"GET /healthz\r\nHost: gateway\r\n\r\n"):
        answer, closed_after = exchange(gateway.port, request, within=SLACK)
        assert closed_after is not None, request
        assert answer.status == 400
        assert answer.json() == {
            "error": {
                "message": "malformed HTTP request: no HTTP version in the request line",
                "type": "invalid_request_error",
            }
        }
