"""Who a single sign-on logs in: a verified e-mail in an allowed domain, matched to a user of the provider's
organization, or a new member of it when the provider provisions users."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.addresses import release_address
from modelgate.cabinet.invitations_repository import end_pending_invitations
from modelgate.cabinet.oidc.domains import domain_verified_by
from modelgate.cabinet.oidc.failures import SsoFailure
from modelgate.cabinet.oidc.providers import OidcProvider
from modelgate.cabinet.requests import normalize_email
from modelgate.cabinet.users import User, insert_user, mark_email_verified, user_by_email
from modelgate.storage.database import Executor


@dataclass(frozen=True, slots=True)
class SsoAccount:
    """The user a login resolved to, and whether this login created them."""

    user: User
    provisioned: bool


def has_email(claims: dict[str, Any]) -> bool:
    """Whether a claim set carries an e-mail at all (else the userinfo endpoint is asked)."""
    return isinstance(claims.get("email"), str) and bool(claims["email"])


def _is_true(value: Any) -> bool:
    # Some providers send the boolean as a string; anything else (1 included) is not true.
    return value is True or value == "true"


def _verified(claims: dict[str, Any]) -> bool:
    if "email_verified" in claims:
        return _is_true(claims["email_verified"])
    # Microsoft Entra ID never sends email_verified; its optional claim xms_edov ("email domain owner
    # verified") is Microsoft's signal for the same assurance. An explicit email_verified always wins.
    return _is_true(claims.get("xms_edov"))


def verified_email(claims: dict[str, Any], provider: OidcProvider) -> str:
    """The normalised e-mail of the claims: present, verified by the provider, in an allowed domain."""
    email = normalize_email(claims["email"]) if has_email(claims) else None
    if email is None:
        raise SsoFailure(
            "email_missing", "the provider sent no valid email claim (is the email scope granted?)"
        )
    if not _verified(claims):
        raise SsoFailure("email_not_verified", f"the provider has not verified {email}")
    domain = email.rpartition("@")[2]
    if domain not in provider.settings.allowed_domains:
        raise SsoFailure(
            "email_domain_not_allowed", f"the e-mail domain {domain} is not allowed for this provider"
        )
    return email


async def account_for(tx: Executor, provider: OidcProvider, email: str, at: float) -> SsoAccount:
    """The provider organization's user with this e-mail, created when the provider provisions users.

    Only a provider of a domain its organization verified vouches for the address: its sign-in verifies the
    account's address and takes the address from another organization's unverified account. Any other
    provider signs in and provisions, but verifies nothing and takes nothing.
    """
    vouches = await domain_verified_by(tx, provider.organization_id, email.rpartition("@")[2])
    user = await user_by_email(tx, email)
    if user is not None and vouches and user.organization_id != provider.organization_id:
        if not user.email_verified:
            await release_address(tx, user, at, "single_sign_on")
            user = None
    if user is not None:
        if user.organization_id != provider.organization_id:
            # E-mails are unique across organizations; a provider never reaches into another tenant.
            raise SsoFailure(
                "account_in_other_organization", f"{email} belongs to another organization's account"
            )
        if vouches and not user.email_verified:
            await mark_email_verified(tx, user.id, at)
        return SsoAccount(user, provisioned=False)
    if not provider.settings.auto_provision:
        raise SsoFailure("no_account", f"{email} has no account and this provider does not create accounts")
    # No password: the account signs in through its identity provider.
    created = await insert_user(
        tx, provider.organization_id, email, None, provider.settings.default_role, at, verified=vouches
    )
    await end_pending_invitations(tx, email, at)
    return SsoAccount(created, provisioned=True)
