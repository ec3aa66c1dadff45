"""TcpProxy: a loopback TCP relay in front of a real service (PostgreSQL) that a test can cut and restore.

An outage without touching the machine's PostgreSQL: `cut()` resets every relayed connection, and every
new one is reset as soon as it is accepted (counted in `refused`, so a test can see a client retry) until
`restore()`. `stall()` is the partition instead: connections are reset, and new ones are accepted and then
never answered. `swallow_replies()` is the ambiguous failure: requests still reach the server, which acts on
them, but its replies are dropped, so the client times out not knowing whether they were applied. Runs on
its own loop in a daemon thread; every public method is safe to call from a test.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from types import TracebackType

START_TIMEOUT = 5.0
_CHUNK = 65536


class TcpProxy:
    """Relays 127.0.0.1:<port> to `target_host:target_port`, byte for byte."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.accepted = 0  # connections relayed since start
        self.refused = 0  # connections reset on arrival while cut (or held unanswered while stalled)
        self._cut_off = False
        self._stalled = False
        self._swallowing = False
        self._held: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.Transport] = set()

    def start(self) -> TcpProxy:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.call_soon(ready.set)
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="tcp-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT):
            raise RuntimeError("tcp proxy loop did not start")
        self._call(self._listen())
        return self

    def url(self, postgres_url: str) -> str:
        """`postgres_url` with its host and port replaced by this proxy's."""
        scheme, _, rest = postgres_url.partition("://")
        credentials, _, location = rest.rpartition("@")
        _, _, database = location.partition("/")
        prefix = f"{credentials}@" if credentials else ""
        return f"{scheme}://{prefix}127.0.0.1:{self.port}/{database}"

    def cut(self) -> None:
        """Reset every open connection and refuse new ones until `restore()`."""
        self._call(self._cut())

    def stall(self) -> None:
        """Reset every open connection; accept new ones but never answer them, until `restore()`."""
        self._call(self._cut())
        self._stalled = True

    def swallow_replies(self) -> None:
        """Keep relaying requests to the server but drop every reply, until `restore()`."""
        self._swallowing = True

    def restore(self) -> None:
        """Relay new connections (and replies) again."""
        self._cut_off = self._stalled = self._swallowing = False

    def stop(self) -> None:
        if self._loop is None:
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=START_TIMEOUT)
        self._loop.close()
        self._loop = None

    def _call(self, coro) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=START_TIMEOUT)

    async def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._relay, sock=sock)

    async def _cut(self) -> None:
        self._cut_off = True
        for transport in list(self._transports):
            transport.abort()  # an RST, as when the server's host goes away
        self._transports.clear()

    async def _close(self) -> None:
        await self._cut()
        for writer in self._held:
            writer.transport.abort()
        self._held.clear()
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self._stalled:
            self.refused += 1
            self._held.add(client_writer)  # silent: what a client sees of a partitioned server
            return
        if self._cut_off:
            self.refused += 1
            client_writer.transport.abort()
            return
        try:
            target_reader, target_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            client_writer.transport.abort()
            return
        self.accepted += 1
        pair = (client_writer.transport, target_writer.transport)
        self._transports.update(pair)
        try:
            await asyncio.gather(
                _pump(client_reader, target_writer),
                _pump(target_reader, client_writer, lambda: self._swallowing),
                return_exceptions=True,
            )
        finally:
            for transport in pair:
                self._transports.discard(transport)
                transport.abort()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dropping: Callable[[], bool] = lambda: False
) -> None:
    """Copy one direction until end of stream (dropping what arrives while `dropping()`); then close the
    other side's writing half."""
    try:
        while data := await reader.read(_CHUNK):
            if dropping():
                continue
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()
