"""The listening sockets of `modelgate serve`, bound before the gateway starts anything else.

A port that is taken (or not ours to bind) is then reported at once, in one line, and nothing logs "ready"
for a port the process does not hold. The sockets are bound, not yet listening: connections are refused
until the server accepts on them.
"""

from __future__ import annotations

import socket


class ListenError(Exception):
    """The gateway cannot bind its address; the message is one line for the operator."""


def address_text(host: str, port: int) -> str:
    """`host:port` as an operator writes it (`[::1]:8080` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_listeners(host: str, port: int, *, reuse_port: bool = False) -> list[socket.socket]:
    """One bound TCP socket per address `host` resolves to (all interfaces when empty), like asyncio's
    create_server; `reuse_port` lets the processes of `--workers N` share the port."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {address_text(host, port)}: {exc.strerror}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:  # an IPv6 socket would also take the IPv4 port of its sibling
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise ListenError(f"cannot listen on {address_text(host, port)}: {reason}") from None
    return sockets


def bound_port(sockets: list[socket.socket]) -> int:
    """The port the sockets hold (the one the system chose when asked for port 0)."""
    return sockets[0].getsockname()[1]
