"""A tiny blocking HTTP/1.1 client on one keep-alive socket, for latency and time-to-first-byte.

It sends pre-built request bytes and parses just enough of the answer (status, Content-Length or
chunked) to know when it is complete, so the client adds as little as possible to what it measures.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

_RECV = 65536


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request/answer: status, body, and when the first body byte and the end arrived (ns)."""

    status: int
    body: bytes
    sent_ns: int
    first_body_ns: int
    done_ns: int


class KeepAliveClient:
    """Sequential requests over one TCP connection with Nagle off."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self._sock = socket.create_connection((host, port), timeout=30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KeepAliveClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self) -> None:
        data = self._sock.recv(_RECV)
        if not data:
            raise ConnectionError("the server closed the connection")
        self._buffer += data

    def exchange(self, request: bytes) -> Exchange:
        """Send one request and read its complete answer."""
        sent = time.perf_counter_ns()
        self._sock.sendall(request)
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        head = self._buffer[:end].decode("latin-1")
        self._buffer = self._buffer[end + 4 :]
        status_line, *header_lines = head.split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body, first_body = self._read_length(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body, first_body = self._read_chunked()
        else:
            raise ConnectionError(f"answer without a length: {status_line}")
        return Exchange(int(status_line.split()[1]), body, sent, first_body, time.perf_counter_ns())

    def _read_length(self, length: int) -> tuple[bytes, int]:
        if length and not self._buffer:
            self._fill()
        first_body = time.perf_counter_ns()
        while len(self._buffer) < length:
            self._fill()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return body, first_body

    def _read_chunked(self) -> tuple[bytes, int]:
        parts: list[bytes] = []
        first_body = 0
        while True:
            while (eol := self._buffer.find(b"\r\n")) < 0:
                self._fill()
            size = int(self._buffer[:eol].split(b";")[0], 16)
            while len(self._buffer) < eol + 2 + size + 2:
                self._fill()
            if size and not first_body:
                first_body = time.perf_counter_ns()  # time to the first streamed data (first event)
            parts.append(self._buffer[eol + 2 : eol + 2 + size])
            self._buffer = self._buffer[eol + 2 + size + 2 :]
            if size == 0:
                return b"".join(parts), first_body
