"""Single sign-on domains (issue 33, finding 2): an organization's provider is offered on the sign-in page
and accepted at the callback only for e-mail domains that organization proved — by a DNS TXT record,
looked up on a real DNS server on loopback, or by the operator's approval. One domain, one organization;
public mail domains never."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from tests.integration.cabinet.cabinet_client import Account
from tests.integration.oidc.browser import Browser
from tests.integration.oidc.conftest import GatewayFactory
from tests.integration.oidc.dns_server import DnsServer
from tests.integration.oidc.fake_idp import FakeIdp
from tests.integration.oidc.node_idp import NodeIdp
from tests.integration.oidc.sso_client import ALLOWED_DOMAIN, SsoGateway


async def _sign_in_options(gateway: SsoGateway, email: str) -> list[dict[str, Any]]:
    reply = await gateway.cabinet.call("GET", f"/auth/sign-in-options?email={email}")
    assert reply.status == 200, reply.body
    return reply.body["providers"]


async def _discovered_provider(gateway: SsoGateway, owner: Account, issuer: str, **fields: Any) -> str:
    """A created and discovered provider, its domains left as they are (not approved)."""
    created = await gateway.add_provider(owner, issuer, **fields)
    assert created.status == 201, created.body
    discovered = await gateway.discover(owner, created.body["id"])
    assert discovered.status == 200, discovered.body
    return created.body["id"]


async def _claim(gateway: SsoGateway, owner: Account, domain: str) -> Any:
    return await gateway.cabinet.call(
        "POST", "/auth/oidc/domains", token=owner.token, json={"domain": domain}
    )


async def _verify(gateway: SsoGateway, owner: Account, domain: str) -> Any:
    return await gateway.cabinet.call("POST", f"/auth/oidc/domains/{domain}/verify", token=owner.token)


async def test_a_provider_named_like_the_victims_is_not_offered_for_the_victims_domain_or_gmail(
    gateway: SsoGateway, fake_idp: FakeIdp
) -> None:
    """The finding as reported: org A adds a provider named like the victim's for victim.example and
    gmail.com and discovers it; the sign-in page lists only the victim's, and nothing for gmail.com."""
    victim = await gateway.cabinet.register()
    victim_provider = await gateway.ready_provider(
        victim, fake_idp.issuer, name="Victim SSO", allowedDomains=["victim.example"]
    )
    attacker = await gateway.cabinet.register()
    await _discovered_provider(
        gateway, attacker, fake_idp.issuer, name="Victim SSO", allowedDomains=["victim.example", "gmail.com"]
    )

    offered = await _sign_in_options(gateway, "alice@victim.example")

    assert [p["id"] for p in offered] == [victim_provider]
    assert await _sign_in_options(gateway, "bob@gmail.com") == []


async def test_a_domain_verified_by_one_organization_cannot_be_claimed_by_another_until_released(
    gateway: SsoGateway,
) -> None:
    holder, other = await gateway.cabinet.register(), await gateway.cabinet.register()
    assert (await gateway.approve_domain(holder, "held.example")).status == 200

    refused = await _claim(gateway, other, "held.example")
    approval = await gateway.approve_domain(other, "held.example")
    released = await gateway.cabinet.call("DELETE", "/auth/oidc/domains/held.example", token=holder.token)
    after = await _claim(gateway, other, "HELD.example.")

    assert refused.status == 409 and "another organization" in refused.body["error"]
    assert approval.status == 409
    assert released.status == 200 and released.body["released"] is True
    assert after.status == 201 and after.body["domain"] == "held.example"


async def test_public_mail_domains_can_never_be_claimed(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()

    claimed = await _claim(gateway, owner, "gmail.com")
    approved = await gateway.approve_domain(owner, "outlook.com")

    assert claimed.status == 400 and "public mail domain" in claimed.body["error"]
    assert approved.status == 400 and "public mail domain" in approved.body["error"]


async def test_bad_domains_are_refused_with_400(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()

    for value in ("", "no-dot", "a..b.example", "exa mple.com", 7, "x" * 300 + ".com"):
        reply = await _claim(gateway, owner, value)  # type: ignore[arg-type]
        assert reply.status == 400, (value, reply.body)
    extra = await gateway.cabinet.call(
        "POST", "/auth/oidc/domains", token=owner.token, json={"domain": "ok.example", "verified": True}
    )
    assert extra.status == 400 and "unknown field: verified" in extra.body["error"]


async def test_a_member_cannot_claim_a_domain(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()
    member = await gateway.cabinet.add_member(owner)

    assert (await _claim(gateway, member, "members.example")).status == 403


async def test_a_domain_is_verified_by_the_txt_record_its_organization_publishes(
    start_gateway: GatewayFactory, dns_server: DnsServer
) -> None:
    gateway = await start_gateway(dns_resolvers=(dns_server.address,))
    owner, rival = await gateway.cabinet.register(), await gateway.cabinet.register()
    claim = (await _claim(gateway, owner, "proven.example")).body
    rival_claim = (await _claim(gateway, rival, "proven.example")).body
    assert claim["status"] == "pending" and claim["txtName"] == "_modelgate.proven.example"

    unpublished = await _verify(gateway, owner, "proven.example")
    dns_server.zone.publish("_modelgate.proven.example", rival_claim["txtValue"])  # another tenant's token
    wrong_token = await _verify(gateway, owner, "proven.example")
    dns_server.zone.publish("_modelgate.proven.example", claim["txtValue"])
    verified = await _verify(gateway, owner, "proven.example")
    rival_after = await _verify(gateway, rival, "proven.example")

    assert unpublished.status == 400 and claim["txtValue"] in unpublished.body["error"]
    assert wrong_token.status == 400
    assert verified.status == 200
    assert (verified.body["status"], verified.body["verifiedBy"]) == ("verified", "dns")
    assert rival_after.status == 409  # its record is published too, but the domain is taken
    assert "_modelgate.proven.example" in dns_server.zone.queries


async def test_a_txt_record_at_the_domain_itself_also_proves_it(
    start_gateway: GatewayFactory, dns_server: DnsServer
) -> None:
    gateway = await start_gateway(dns_resolvers=(dns_server.address,))
    owner = await gateway.cabinet.register()
    claim = (await _claim(gateway, owner, "apex.example")).body
    dns_server.zone.publish("apex.example", "v=spf1 -all")
    dns_server.zone.publish("apex.example", claim["txtValue"])

    verified = await _verify(gateway, owner, "apex.example")

    assert verified.status == 200 and verified.body["status"] == "verified"


async def test_a_dns_server_that_does_not_answer_is_503_and_the_claim_stays_pending(
    start_gateway: GatewayFactory, dns_server: DnsServer
) -> None:
    gateway = await start_gateway(dns_resolvers=(dns_server.address,))
    owner = await gateway.cabinet.register()
    claim = (await _claim(gateway, owner, "quiet.example")).body
    dns_server.zone.publish("_modelgate.quiet.example", claim["txtValue"])
    dns_server.zone.servfail = True

    failed = await _verify(gateway, owner, "quiet.example")
    listed = await gateway.cabinet.call("GET", "/auth/oidc/domains", token=owner.token)

    assert failed.status == 503 and "DNS lookup failed" in failed.body["error"]
    assert [d["status"] for d in listed.body["domains"]] == ["pending"]


async def test_verifying_or_releasing_a_domain_not_claimed_is_404(gateway: SsoGateway) -> None:
    owner, other = await gateway.cabinet.register(), await gateway.cabinet.register()
    await _claim(gateway, other, "theirs.example")

    assert (await _verify(gateway, owner, "theirs.example")).status == 404
    assert (await _verify(gateway, owner, "not a domain")).status == 404
    released = await gateway.cabinet.call("DELETE", "/auth/oidc/domains/theirs.example", token=owner.token)
    assert released.status == 404


async def test_the_operator_approves_and_releases_a_domain(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()

    without_token = await gateway.cabinet.call(
        "POST",
        f"/operator/organizations/{await gateway.cabinet.organization_id(owner)}/sso-domains",
        token=owner.token,
        json={"domain": "approved.example"},
    )
    unknown = await gateway.cabinet.call(
        "POST",
        "/operator/organizations/org_missing/sso-domains",
        token=gateway.operator_token,
        json={"domain": "approved.example"},
    )
    approved = await gateway.approve_domain(owner, "approved.example")
    released = await gateway.cabinet.call(
        "DELETE", "/operator/sso-domains/approved.example", token=gateway.operator_token
    )
    events = [e["event"] for e in await gateway.cabinet.audit_events(owner)]

    assert without_token.status == 401
    assert unknown.status == 404
    assert (approved.status, approved.body["verifiedBy"]) == (200, "operator")
    assert released.status == 200
    assert {"sso_domain.verified", "sso_domain.released"} <= set(events)


async def test_a_sign_in_through_a_provider_whose_domain_its_organization_did_not_verify_is_refused(
    gateway: SsoGateway, node_idp: NodeIdp, browser: Browser
) -> None:
    """A tenant's identity provider may vouch for any address; without the domain proven, its sign-in
    would provision alice@allowed.test into that tenant."""
    owner = await gateway.cabinet.register()
    provider_id = await _discovered_provider(gateway, owner, node_idp.issuer)

    journey = await browser.sign_in(gateway.login_url(provider_id), "alice")

    assert journey.params == {"error": "email_domain_not_verified"}
    alice = "alice@" + ALLOWED_DOMAIN
    assert await gateway.cabinet.db.fetchval("SELECT COUNT(*) FROM users WHERE email = $1", alice) == 0


async def _sso_cli(*args: str) -> tuple[int, str, str]:
    """`python -m modelgate sso …`, without blocking the loop the test's cabinet runs on."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "modelgate",
        "sso",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_the_operator_approves_and_releases_a_domain_from_the_command_line(
    gateway: SsoGateway, storage_url: str, tmp_path: Path
) -> None:
    owner = await gateway.cabinet.register()
    organization_id = await gateway.cabinet.organization_id(owner)
    config = tmp_path / "modelgate.toml"
    config.write_text(
        f'[storage]\nurl = "{storage_url}"\n[[providers]]\nname = "mock"\nkind = "mock"\n'
        '[[models]]\nname = "m"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "mock"\n'
        '[[plans]]\ncode = "pro"\n'
    )

    approved = await _sso_cli("approve-domain", organization_id, "Cli.Example", "--config", str(config))
    listed = await gateway.cabinet.call("GET", "/auth/oidc/domains", token=owner.token)
    public = await _sso_cli("approve-domain", organization_id, "yahoo.com", "--config", str(config))
    released = await _sso_cli("release-domain", "cli.example", "--config", str(config))
    again = await _sso_cli("release-domain", "cli.example", "--config", str(config))

    assert approved[0] == 0 and f"cli.example is verified for organization {organization_id}" in approved[1]
    assert [(d["domain"], d["verifiedBy"]) for d in listed.body["domains"]] == [("cli.example", "operator")]
    assert public[0] == 2 and "public mail domain" in public[2]
    assert released[0] == 0 and "released" in released[1]
    assert again[0] == 2 and "domain not found" in again[2]
