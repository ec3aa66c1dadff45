"""Past `server.max_connections`, new connections are closed as soon as they are accepted, with one log line,
while the connections already open are served."""

from __future__ import annotations

import contextlib
import logging

import pytest

from tests.integration.edge.conftest import SLACK, GatewayStarter
from tests.integration.ops.conftest import wait_until
from tests.support.raw_http import connect, parse_answer, read_until_closed

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n"
CAP = 6


def _served(sock) -> bool:
    sock.sendall(HEALTH)
    sock.settimeout(SLACK)
    return parse_answer(sock.recv(65536)).status == 200


def test_connections_past_the_cap_are_closed_and_logged_while_open_ones_are_served(
    start_gateway: GatewayStarter, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = start_gateway(header=30.0, keepalive=30.0, max_connections=CAP)
    caplog.set_level(logging.INFO, logger="modelgate.http")
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(connect(gateway.port)) for _ in range(CAP)]
        assert all(_served(sock) for sock in held)  # the gateway holds all of them now

        extra = [stack.enter_context(connect(gateway.port)) for _ in range(3)]
        for sock in extra:
            data, closed_after = read_until_closed(sock, SLACK)
            assert closed_after is not None and data == b""
        assert all(_served(sock) for sock in held)

        held.pop().close()  # a place frees up once the gateway has seen the close

        def a_new_connection_is_served() -> bool:
            with connect(gateway.port) as sock:
                try:
                    return _served(sock)
                except (ConnectionError, IndexError, AssertionError, TimeoutError):
                    return False

        assert wait_until(a_new_connection_is_served, timeout=SLACK)

    lines = [r for r in caplog.records if "connection limit reached" in r.getMessage()]
    assert len(lines) == 1  # one line, not one per refused connection
    assert lines[0].levelno == logging.WARNING
    assert f"{CAP} connections open" in lines[0].getMessage()
