"""The gateway's own accepting (modelgate/proxy/http/accept.py), on uvloop as `modelgate serve` runs: a burst
of connections waiting in the listen queue is taken in a few passes of a busy loop, not one a pass (uvloop's
own server); clients reset while they wait leave the others served; out of descriptors, accepting pauses and
then takes what waited; a stopped site refuses; the listen queue's gauge counts the connections not taken yet.

Every pass of the loop here is kept busy for a millisecond, the way thousands of open streams keep it; the
clients connect with plain blocking sockets, whose handshakes the kernel completes into the listen queue
without the loop's help.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import struct
import time
from collections.abc import Awaitable, Callable

import pytest
import uvloop
from aiohttp import web

from modelgate.proxy.http import accept as accept_module
from modelgate.proxy.http.accept import ACCEPT_AT_MOST, AcceptingSite, listen_queue
from modelgate.proxy.observability.metrics import GatewayMetrics

BURST = 600  # connections of a burst: more than two passes' worth
BUSY_SECONDS = 0.001  # each pass of the loop is held this long


async def _hello(request: web.BaseRequest) -> web.Response:
    return web.Response(text="hello")


def _on_uvloop(body: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(body())


class _CountingServer(web.Server):
    """aiohttp's low-level server, telling when `expected` connections are open."""

    def __init__(self, expected: int) -> None:
        super().__init__(_hello)
        self.expected = expected
        self.all_open = asyncio.Event()

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if len(self.connections) >= self.expected:
            self.all_open.set()


async def _serving(
    site_type: type[web.BaseSite] | None = None, server: web.Server | None = None
) -> tuple[web.ServerRunner, socket.socket]:
    runner = web.ServerRunner(server if server is not None else web.Server(_hello))
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    if site_type is None:
        await AcceptingSite(runner, sock, backlog=4096).start()
    else:
        await web.SockSite(runner, sock, backlog=4096).start()
    return runner, sock


def _connect(port: int, count: int) -> list[socket.socket]:
    clients = []
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port))
        clients.append(client)
    return clients


async def _passes_until_accepted(server: web.Server, count: int, most: int) -> int:
    """Busy passes of the loop until `count` connections are open on `server` (at most `most` passes)."""
    passes = 0
    while len(server.connections) < count and passes < most:
        held = time.perf_counter() + BUSY_SECONDS
        while time.perf_counter() < held:
            pass
        await asyncio.sleep(0)
        passes += 1
    return passes


def _take_burst(site_type: type[web.BaseSite] | None) -> tuple[int, int]:
    """(passes taken, connections open) for a burst of BURST connections."""
    outcome: list[int] = []

    async def body() -> None:
        runner, sock = await _serving(site_type)
        clients = _connect(sock.getsockname()[1], BURST)
        try:
            server = runner.server
            assert server is not None
            outcome.append(await _passes_until_accepted(server, BURST, most=BURST * 2))
            outcome.append(len(server.connections))
        finally:
            for client in clients:
                client.close()
            await runner.cleanup()

    _on_uvloop(body)
    return outcome[0], outcome[1]


def test_a_burst_is_taken_in_a_few_passes_of_a_busy_loop() -> None:
    passes, open_connections = _take_burst(None)
    assert open_connections == BURST
    # ACCEPT_AT_MOST a pass, plus a pass or two for the transports' connection_made
    assert passes <= BURST // ACCEPT_AT_MOST + 3, passes


def test_the_loops_own_server_takes_one_connection_a_pass() -> None:
    """Why the gateway accepts itself: the same burst through uvloop's server (aiohttp's SockSite)."""
    passes, open_connections = _take_burst(web.SockSite)
    assert open_connections == BURST
    assert passes >= BURST - 5, passes


def test_answers_go_out_on_accepted_connections() -> None:
    async def body() -> None:
        runner, sock = await _serving()
        try:
            reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            assert await reader.readexactly(5) == b"hello"
            writer.close()
        finally:
            await runner.cleanup()

    _on_uvloop(body)


def test_clients_that_reset_before_they_are_taken_leave_the_others_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        runner, sock = await _serving()
        try:
            # Connected, then reset (SO_LINGER 0) while waiting in the listen queue, before the loop ran.
            for gone in _connect(sock.getsockname()[1], 20):
                gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                gone.close()
            reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            writer.close()
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.WARNING):
        _on_uvloop(body)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_stopped_site_refuses_connections() -> None:
    async def body() -> None:
        runner, sock = await _serving()
        port = sock.getsockname()[1]
        await runner.cleanup()
        assert sock.fileno() == -1
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port)).close()

    _on_uvloop(body)


def _lowest_free_descriptor() -> int:
    probe = os.dup(0)  # the system gives the lowest free number
    os.close(probe)
    return probe


def test_out_of_descriptors_accepting_pauses_then_takes_what_waited(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accept_module, "RETRY_AFTER_SECONDS", 0.05)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    waiting = 5

    async def body() -> None:
        server = _CountingServer(waiting)
        runner, sock = await _serving(server=server)
        clients = _connect(sock.getsockname()[1], waiting)
        try:
            # No descriptor can be opened: every accept fails with EMFILE.
            resource.setrlimit(resource.RLIMIT_NOFILE, (_lowest_free_descriptor(), hard))
            try:
                with caplog.at_level(logging.WARNING, logger="modelgate.http"):
                    for _ in range(20):
                        await asyncio.sleep(0)
                assert len(server.connections) == 0
                assert any("cannot accept connections" in record.getMessage() for record in caplog.records)
                # paused, not failing again every pass
                assert sum("cannot accept" in record.getMessage() for record in caplog.records) == 1
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            await asyncio.wait_for(server.all_open.wait(), timeout=5)  # taken once the pause is over
        finally:
            for client in clients:
                client.close()
            await runner.cleanup()

    _on_uvloop(body)


def test_the_listen_queue_gauge_counts_connections_not_taken_yet() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    metrics = GatewayMetrics()
    metrics.watch_listeners([listener])
    clients = _connect(listener.getsockname()[1], 3)
    try:
        assert listen_queue(listener) == 3
        assert b"modelgate_listen_queue_connections 3.0" in metrics.render()
        taken, _address = listener.accept()
        taken.close()
        assert listen_queue(listener) == 2
        listener.close()
        assert listen_queue(listener) == 0  # a closed socket: nothing to tell
    finally:
        for client in clients:
            client.close()
