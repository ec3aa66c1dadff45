"""A small authoritative DNS server on loopback (UDP), built on dnspython's message API: the TXT records a
test publishes, NXDOMAIN for every other name, and on demand silence (a server that does not answer) or
SERVFAIL. What the gateway's `[sso] dns_resolvers` point at in the tests of single sign-on domains."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset


@dataclass
class DnsZone:
    """What the server answers: TXT values by owner name, and how it misbehaves."""

    txt: dict[str, list[str]] = field(default_factory=dict)
    silent: bool = False  # drop every query (a resolver that times out)
    servfail: bool = False
    queries: list[str] = field(default_factory=list)

    def publish(self, name: str, value: str) -> None:
        """Add a TXT record `value` at `name`."""
        self.txt.setdefault(name.lower().rstrip("."), []).append(value)


class _DnsProtocol(asyncio.DatagramProtocol):
    def __init__(self, zone: DnsZone) -> None:
        self.zone = zone
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport is not a subclass of asyncio's, but has its interface.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            query = dns.message.from_wire(data)
        except dns.exception.DNSException:
            return
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True).lower()
        self.zone.queries.append(name)
        if self.zone.silent or self.transport is None:
            return
        reply = dns.message.make_response(query)
        reply.flags |= dns.flags.AA
        values = self.zone.txt.get(name)
        if self.zone.servfail:
            reply.set_rcode(dns.rcode.SERVFAIL)
        elif values is None:
            reply.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.TXT:
            quoted = ['"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values]
            reply.answer.append(dns.rrset.from_text_list(question.name, 60, dns.rdataclass.IN, "TXT", quoted))
        self.transport.sendto(reply.to_wire(), addr)


class DnsServer:
    """The server on 127.0.0.1 and a port of its own; `address` is what `dns_resolvers` names."""

    def __init__(self) -> None:
        self.zone = DnsZone()
        self._transport: asyncio.DatagramTransport | None = None
        self.address = ""

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _DnsProtocol(self.zone), local_addr=("127.0.0.1", 0)
        )
        self._transport = transport
        host, port = transport.get_extra_info("sockname")[:2]
        self.address = f"{host}:{port}"

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
