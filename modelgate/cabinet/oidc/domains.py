"""Single sign-on domains: an organization's claim of an e-mail domain and its proof (0017_sso_domains.sql).

A claim carries a random token; the organization proves the domain is its own by publishing
`modelgate-verification=<token>` as a TXT record at `_modelgate.<domain>` (or at the domain itself), or the
operator approves it. A domain is verified by one organization at a time. Public mail domains (gmail.com …)
are never claimed: nobody controls them for all their users.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.requests import CabinetError, bad_request
from modelgate.storage import IntegrityViolation
from modelgate.storage.database import Executor, Row

TXT_PREFIX = "modelgate-verification="
TXT_LABEL = "_modelgate"
MAX_DOMAINS_PER_ORGANIZATION = 50
# Domains whose addresses belong to a mail service's users, not to one organization (docs/cabinet.md).
PUBLIC_MAIL_DOMAINS = frozenset(
    {
        "gmail.com",
        "googlemail.com",
        "outlook.com",
        "hotmail.com",
        "live.com",
        "msn.com",
        "yahoo.com",
        "ymail.com",
        "aol.com",
        "icloud.com",
        "me.com",
        "mac.com",
        "proton.me",
        "protonmail.com",
        "pm.me",
        "gmx.com",
        "gmx.net",
        "gmx.de",
        "web.de",
        "mail.com",
        "yandex.com",
        "yandex.ru",
        "mail.ru",
        "zoho.com",
        "fastmail.com",
        "tutanota.com",
        "qq.com",
        "163.com",
        "126.com",
    }
)
_DOMAIN = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,62}$")
_COLUMNS = "organization_id, domain, token, created_at, verified_at, verified_by"


@dataclass(frozen=True, slots=True)
class DomainClaim:
    """One organization's claim of an e-mail domain, verified or still waiting for its proof."""

    organization_id: str
    domain: str
    token: str
    created_at: float
    verified_at: float | None
    verified_by: str | None

    @property
    def txt_value(self) -> str:
        """What the organization publishes in a TXT record to prove the domain."""
        return TXT_PREFIX + self.token

    def to_json(self) -> dict[str, Any]:
        """The claim object of the API."""
        return {
            "domain": self.domain,
            "status": "verified" if self.verified_at is not None else "pending",
            "verifiedBy": self.verified_by,
            "txtName": f"{TXT_LABEL}.{self.domain}",
            "txtValue": self.txt_value,
            "createdAt": isoformat(self.created_at),
            "verifiedAt": isoformat(self.verified_at),
        }


def _claim(row: Row) -> DomainClaim:
    return DomainClaim(
        organization_id=row["organization_id"],
        domain=row["domain"],
        token=row["token"],
        created_at=row["created_at"],
        verified_at=row["verified_at"],
        verified_by=row["verified_by"],
    )


def domain_not_found() -> CabinetError:
    """The answer for a domain the organization has not claimed."""
    return CabinetError(404, "domain not found")


def claimable_domain(value: Any, field: str = "domain") -> str:
    """A domain an organization may claim, normalised; 400 for anything else (public mail domains too)."""
    if not isinstance(value, str) or not value.strip():
        raise bad_request(f"{field} is required")
    domain = value.strip().lower().removesuffix(".")
    if not _DOMAIN.match(domain):
        raise bad_request(f"{field} must be a domain name such as example.com")
    if domain in PUBLIC_MAIL_DOMAINS:
        raise bad_request(f"{domain} is a public mail domain: its addresses belong to many people")
    return domain


def _taken(domain: str) -> CabinetError:
    return CabinetError(409, f"{domain} is verified by another organization; it must release it first")


async def claims_of(ex: Executor, organization_id: str) -> list[DomainClaim]:
    """The organization's claims by domain."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM sso_domains WHERE organization_id = $1 ORDER BY domain", organization_id
    )
    return [_claim(r) for r in rows]


async def claim_of(ex: Executor, organization_id: str, domain: str) -> DomainClaim | None:
    """The organization's claim of `domain`, if any."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM sso_domains WHERE organization_id = $1 AND domain = $2",
        organization_id,
        domain,
    )
    return _claim(row) if row else None


async def verified_holder(ex: Executor, domain: str) -> DomainClaim | None:
    """The claim of the organization that verified `domain`, if one did."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM sso_domains WHERE domain = $1 AND verified_at IS NOT NULL", domain
    )
    return _claim(row) if row else None


async def _verified_elsewhere(ex: Executor, organization_id: str, domain: str) -> bool:
    holder = await verified_holder(ex, domain)
    return holder is not None and holder.organization_id != organization_id


async def add_claim(tx: Executor, organization_id: str, domain: str, at: float) -> DomainClaim:
    """A new pending claim with a fresh token; 409 when the organization claimed it already or another
    organization verified it."""
    if await _verified_elsewhere(tx, organization_id, domain):
        raise _taken(domain)
    if len(await claims_of(tx, organization_id)) >= MAX_DOMAINS_PER_ORGANIZATION:
        raise bad_request(f"an organization claims at most {MAX_DOMAINS_PER_ORGANIZATION} domains")
    claim = DomainClaim(organization_id, domain, secrets.token_urlsafe(24), at, None, None)
    try:
        await tx.execute(
            f"INSERT INTO sso_domains ({_COLUMNS}) VALUES ($1, $2, $3, $4, NULL, NULL)",
            organization_id,
            domain,
            claim.token,
            at,
        )
    except IntegrityViolation as exc:
        raise CabinetError(409, f"{domain} is already claimed by this organization") from exc
    return claim


async def mark_verified(tx: Executor, claim: DomainClaim, at: float, by: str) -> DomainClaim:
    """Record a claim's proof; 409 when another organization verified the domain meanwhile."""
    if await _verified_elsewhere(tx, claim.organization_id, claim.domain):
        raise _taken(claim.domain)
    try:
        await tx.execute(
            "UPDATE sso_domains SET verified_at = $3, verified_by = $4"
            " WHERE organization_id = $1 AND domain = $2",
            claim.organization_id,
            claim.domain,
            at,
            by,
        )
    except IntegrityViolation as exc:  # two organizations proving the same domain at the same moment
        raise _taken(claim.domain) from exc
    return DomainClaim(claim.organization_id, claim.domain, claim.token, claim.created_at, at, by)


async def release_claim(tx: Executor, organization_id: str, domain: str) -> bool:
    """Remove the organization's claim (verified or not); False when there was none."""
    removed = await tx.execute(
        "DELETE FROM sso_domains WHERE organization_id = $1 AND domain = $2", organization_id, domain
    )
    return removed > 0


async def domain_verified_by(ex: Executor, organization_id: str, domain: str) -> bool:
    """Whether `organization_id` holds `domain` verified (what a single sign-on requires of an e-mail)."""
    row = await ex.fetchrow(
        "SELECT 1 AS held FROM sso_domains"
        " WHERE organization_id = $1 AND domain = $2 AND verified_at IS NOT NULL",
        organization_id,
        domain,
    )
    return row is not None
