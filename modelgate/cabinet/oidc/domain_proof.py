"""Whether a domain publishes an organization's verification token in DNS (dnspython's asynchronous resolver).

The TXT records of `_modelgate.<domain>` are read first, then those of the domain itself; either holding
`modelgate-verification=<token>` proves the claim. The resolvers are `[sso] dns_resolvers` (the system's
when empty).
"""

from __future__ import annotations

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.resolver

from modelgate.cabinet.oidc.domains import TXT_LABEL, DomainClaim
from modelgate.config.schema import SsoConfig, dns_server_address


class DnsUnavailable(Exception):
    """No resolver answered (timeout, refused, server failure): the proof is neither found nor refuted."""


def _resolver(settings: SsoConfig) -> dns.asyncresolver.Resolver:
    if not settings.dns_resolvers:
        resolver = dns.asyncresolver.Resolver()  # /etc/resolv.conf
    else:
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [
            dns.nameserver.Do53Nameserver(*dns_server_address(entry)) for entry in settings.dns_resolvers
        ]
    resolver.lifetime = settings.dns_timeout_seconds
    return resolver


async def _txt_values(resolver: dns.asyncresolver.Resolver, name: str) -> list[str]:
    try:
        answer = await resolver.resolve(name, "TXT", search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []
    except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
        raise DnsUnavailable(f"no DNS answer for {name}: {exc}") from exc
    values: list[str] = []
    for record in answer:
        # A long TXT value comes as several character strings, joined without a separator (RFC 7208 3.3).
        values.append(b"".join(record.strings).decode("utf-8", "replace"))
    return values


async def domain_publishes(claim: DomainClaim, settings: SsoConfig) -> bool:
    """Whether `_modelgate.<domain>` or the domain itself has a TXT record with the claim's token; raises
    DnsUnavailable when no resolver answered."""
    resolver = _resolver(settings)
    for name in (f"{TXT_LABEL}.{claim.domain}", claim.domain):
        if claim.txt_value in await _txt_values(resolver, name):
            return True
    return False
