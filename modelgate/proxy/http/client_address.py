"""The client's address behind trusted load balancers: `X-Forwarded-For`, read right to left, up to the
first address that is not itself a trusted proxy. Untrusted peers cannot choose their address."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def forwarded_client(trusted_proxies: tuple[str, ...]) -> Callable[[str | None, str | None], str | None]:
    """`client(peer, x_forwarded_for)`: the forwarded client when the peer is a trusted proxy, else the
    peer."""
    networks = tuple(ipaddress.ip_network(entry, strict=False) for entry in trusted_proxies)

    def trusted(address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in networks)

    def client(peer: str | None, forwarded: str | None) -> str | None:
        if forwarded and peer and trusted(peer):
            for candidate in reversed(forwarded.split(",")):
                candidate = candidate.strip()
                if not trusted(candidate):
                    try:
                        ipaddress.ip_address(candidate)
                    except ValueError:
                        return peer  # garbage in the chain: keep the peer address
                    return candidate
        return peer

    return client


def forwarded_client_middleware(trusted_proxies: tuple[str, ...]) -> Callable:
    """A middleware that sets `request.remote` to the forwarded client when the peer is trusted."""
    client_of = forwarded_client(trusted_proxies)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.remote
        client = client_of(peer, request.headers.get("x-forwarded-for"))
        if client != peer and client is not None:
            return await handler(request.clone(remote=client))
        return await handler(request)

    return middleware
