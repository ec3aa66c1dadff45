"""Accepting connections: every connection waiting in the listen queue is taken in the pass that sees it.

libuv (uvloop's engine) accepts one connection each time the listening socket is reported readable, which
is once a pass of the event loop. Idle, a pass takes microseconds; under load it takes tens of milliseconds,
and a burst of connects waits in the kernel's accept queue, with no error, metric or log line. Measured at
3,000 open streams on one worker: 1,503 connections taken in the first second of a burst, then 30 to 45 a
second, so the last clients of the burst had their first byte 19 s after they had sent their request (clients
coming back after a restart, or a load balancer moving traffic, make such bursts).

So the gateway accepts itself (`AcceptingSite`): the loop watches the listening socket (`add_reader`), and
each time it is readable every waiting connection is taken, at most `ACCEPT_AT_MOST` a pass so that a burst
does not hold up the streams already open. Each connection becomes a transport of the loop with its protocol
(`connect_accepted_socket`, whose first step runs at once: its protocol exists before the next connection is
taken, as with the loop's own server). Out of descriptors, accepting pauses for `RETRY_AFTER_SECONDS` rather
than waking every pass to fail again (asyncio's own servers do the same).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct

from aiohttp import web

from modelgate.proxy.http.eager_start import start_eagerly

log = logging.getLogger("modelgate.http")

ACCEPT_AT_MOST = 256  # connections taken in one pass; the rest wait for the next
RETRY_AFTER_SECONDS = 0.25  # out of descriptors: the pause before accepting again
# accept() errors that say the process or the system is short of resources: retried after a pause
_SHORT_OF = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


# struct tcp_info (linux/tcp.h): eight one-byte fields, then u32 rto, ato, snd_mss, rcv_mss, unacked, sacked.
# On a listening socket `unacked` is the connections waiting in its accept queue, `sacked` the queue's bound.
_TCP_INFO_QUEUE = struct.Struct("8x4xIIIII")  # ... ato, snd_mss, rcv_mss, unacked, sacked (rto skipped)


def listen_queue(sock: socket.socket) -> int:
    """Connections the system holds accepted for `sock` that the gateway has not taken yet (Linux; 0 where
    the system does not tell, or once the socket is closed)."""
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is None or sock.fileno() < 0:
        return 0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, _TCP_INFO_QUEUE.size)
    except OSError:
        return 0
    if len(info) < _TCP_INFO_QUEUE.size:
        return 0
    return _TCP_INFO_QUEUE.unpack(info)[3]


class _Acceptor(asyncio.AbstractServer):
    """The listening socket's watch on the loop, in the place of an asyncio server: `close` (what
    `site.stop` calls) stops it and closes the socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, factory: web.Server) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._factory = factory
        self._pending: set[asyncio.Task[None]] = set()  # connections whose transport is being made
        self._resume: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._loop.add_reader(self._fd, self._accept)

    def close(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if self._sock.fileno() >= 0:
            self._loop.remove_reader(self._fd)
            self._sock.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._sock.fileno() >= 0 and self._resume is None

    async def start_serving(self) -> None:
        """Serving from `start` on."""

    async def serve_forever(self) -> None:
        raise NotImplementedError("the runner serves; this only accepts")

    async def wait_closed(self) -> None:
        """Closed as soon as `close` returns."""

    def _accept(self) -> None:
        accept = self._sock.accept
        for _ in range(ACCEPT_AT_MOST):
            try:
                connection, _address = accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty
            except ConnectionAbortedError:
                continue  # the client gave up while it waited
            except OSError as exc:
                if exc.errno not in _SHORT_OF:
                    raise
                log.warning(
                    "cannot accept connections: %s; accepting again in %g s (server.max_connections bounds "
                    "the connections a worker keeps open)",
                    exc.strerror,
                    RETRY_AFTER_SECONDS,
                )
                self._loop.remove_reader(self._fd)
                self._resume = self._loop.call_later(RETRY_AFTER_SECONDS, self._restart)
                return
            self._adopt(connection)

    def _restart(self) -> None:
        self._resume = None
        if self._sock.fileno() >= 0:
            self.start()

    def _adopt(self, connection: socket.socket) -> None:
        start_eagerly(self._loop, self._open(connection), self._track)

    async def _open(self, connection: socket.socket) -> None:
        await self._loop.connect_accepted_socket(self._factory, connection)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._pending.add(task)
        task.add_done_callback(self._made)

    def _made(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # The client left before its transport was made: nothing was read from it yet.
            log.debug("an accepted connection could not be opened: %r", exc)


class AcceptingSite(web.SockSite):
    """aiohttp's SockSite (its socket, backlog and name), accepting with `_Acceptor` instead of the loop's own
    server."""

    __slots__ = ()

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner (SockSite's would also serve)
        server = self._runner.server
        if server is None:  # never: the base class refuses a runner that is not set up
            raise RuntimeError("the runner is not set up")
        sock = self._sock
        sock.listen(self._backlog)
        sock.setblocking(False)
        acceptor = _Acceptor(asyncio.get_running_loop(), sock, server)
        acceptor.start()
        self._server = acceptor  # what BaseSite.stop closes
