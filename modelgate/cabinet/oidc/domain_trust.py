"""Whether an organization has proved it owns an e-mail domain — the one question address verification asks
of single sign-on (docs/cabinet.md, Verified addresses).

Domain ownership (a DNS TXT record, or the operator's approval) is the SSO-domain part of issue #33, built
beside this; until it is merged no domain counts as verified, so a single sign-on never verifies an address
and never takes one from another organization's account.
"""

from __future__ import annotations

from modelgate.storage.database import Executor


async def domain_verified(ex: Executor, organization_id: str, domain: str) -> bool:
    """True when `organization_id` owns `domain` by a verification the gateway checked."""
    del ex, organization_id, domain
    return False
