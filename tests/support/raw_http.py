"""Raw HTTP/1.1 over a loopback socket: for requests no HTTP client library would send, and for watching a
connection being closed by the server."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import orjson


@dataclass(frozen=True, slots=True)
class RawAnswer:
    """One HTTP answer as it came off the wire."""

    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes

    def json(self) -> object:
        return orjson.loads(self.body)


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    """A TCP connection to the gateway on 127.0.0.1."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_until_closed(sock: socket.socket, within: float) -> tuple[bytes, float | None]:
    """Everything the server sends until it closes the connection, and the seconds that took (None when the
    connection was still open after `within` seconds)."""
    started = time.monotonic()
    deadline = started + within
    received = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bytes(received), None
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return bytes(received), None
        except ConnectionResetError:
            return bytes(received), time.monotonic() - started
        if not chunk:
            return bytes(received), time.monotonic() - started
        received += chunk


def parse_answer(data: bytes) -> RawAnswer:
    """The first answer in `data` (a status line, headers, and a Content-Length body)."""
    head, separator, rest = data.partition(b"\r\n\r\n")
    assert separator, f"no complete answer in {data[:200]!r}"
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", len(rest)))
    return RawAnswer(int(status_line.split(" ")[1]), headers, rest[:length])


def exchange(port: int, *chunks: bytes, within: float = 5.0) -> tuple[RawAnswer, float | None]:
    """Send `chunks` on a new connection and read until the server closes it: its answer, and how long
    the close took after the last chunk (None: still open after `within` seconds)."""
    with connect(port) as sock:
        for chunk in chunks:
            sock.sendall(chunk)
        data, closed_after = read_until_closed(sock, within)
    return parse_answer(data), closed_after
