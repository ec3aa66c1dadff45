"""The lean front as deployed: `modelgate serve` in its own process, on uvloop (the in-process test
gateways run on asyncio's own loop). A connection the front hands to aiohttp (a head in pieces, a chunked
body) is served there and keeps working; a pipelined mix of front and aiohttp requests is answered in order;
a body arriving in pieces and a stream are served by the front."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.edge.conftest import edge_toml
from tests.integration.edge.test_connection_reuse import (
    WRITE_GAP,
    AnswerReader,
    _assert_echoed,
    _chat,
    _chat_body,
    _chat_head,
)
from tests.support.gateway import GatewayProcess, Tenant, register_tenant
from tests.support.raw_http import connect

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, Tenant]]:
    directory: Path = tmp_path_factory.mktemp("uvloop-front")
    config = directory / "gateway.toml"
    config.write_text(edge_toml(f"sqlite:///{directory / 'gateway.db'}", header=30, body=30, keepalive=30))
    with GatewayProcess(config, cwd=directory) as gateway:
        yield gateway, register_tenant(gateway.base_url)


def _pause() -> None:
    time.sleep(WRITE_GAP)  # two writes reach the server as two TCP segments: the client's pace, no sync


def test_a_head_in_pieces_goes_to_aiohttp_and_the_connection_serves_on(
    served: tuple[GatewayProcess, Tenant],
) -> None:
    gateway, tenant = served
    request = _chat(tenant, "split head")
    with connect(gateway.port) as sock:
        reader = AnswerReader(sock)
        sock.sendall(request[:25])
        _pause()
        sock.sendall(request[25:])
        _assert_echoed(reader.answer(), "split head")
        sock.sendall(_chat(tenant, "then whole"))  # now an aiohttp connection: still served
        _assert_echoed(reader.answer(), "then whole")


def test_a_chunked_body_goes_to_aiohttp(served: tuple[GatewayProcess, Tenant]) -> None:
    gateway, tenant = served
    body = _chat_body("chunked")
    head = _chat_head(tenant, len(body)).replace(
        f"Content-Length: {len(body)}".encode(), b"Transfer-Encoding: chunked"
    )
    with connect(gateway.port) as sock:
        sock.sendall(head + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
        _assert_echoed(AnswerReader(sock).answer(), "chunked")


def test_pipelined_front_and_aiohttp_requests_are_answered_in_order(
    served: tuple[GatewayProcess, Tenant],
) -> None:
    gateway, tenant = served
    with connect(gateway.port) as sock:
        sock.sendall(_chat(tenant, "one") + HEALTH + _chat(tenant, "three"))
        first, health, third = AnswerReader(sock).answers(3)
    _assert_echoed(first, "one")
    assert (health.status, health.json()) == (200, {"status": "ok"})
    _assert_echoed(third, "three")


def test_a_body_in_pieces_is_served_by_the_front(served: tuple[GatewayProcess, Tenant]) -> None:
    gateway, tenant = served
    body = _chat_body("late body")
    with connect(gateway.port) as sock:
        sock.sendall(_chat_head(tenant, len(body)) + body[:10])
        _pause()
        sock.sendall(body[10:])
        _assert_echoed(AnswerReader(sock).answer(), "late body")


def test_a_stream_is_relayed_chunked_and_the_connection_serves_on(
    served: tuple[GatewayProcess, Tenant],
) -> None:
    gateway, tenant = served
    body = _chat_body("streamed", stream=True)
    with connect(gateway.port) as sock:
        reader = AnswerReader(sock)
        sock.sendall(_chat_head(tenant, len(body)) + body)
        streamed = reader.answer()
        assert streamed.status == 200 and streamed.chunked
        assert streamed.body.rstrip().endswith(b"data: [DONE]")
        sock.sendall(_chat(tenant, "after the stream"))
        _assert_echoed(reader.answer(), "after the stream")


def test_nothing_was_logged_as_an_error(served: tuple[GatewayProcess, Tenant]) -> None:
    gateway, _tenant = served
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(HEALTH)
        assert AnswerReader(sock).answer().status == 200
    output = gateway.output()
    assert '"level":"error"' not in output and "Traceback" not in output
