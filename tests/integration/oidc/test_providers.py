"""Managing an organization's identity providers: owner/admin only, scoped to the organization, the client
secret accepted but never shown again, bad settings answered 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.cabinet.cabinet_client import Account
from tests.integration.oidc.conftest import GatewayFactory
from tests.integration.oidc.fake_idp import FakeIdp
from tests.integration.oidc.sso_client import SsoGateway

SECRET = "a-client-secret-never-to-be-shown"
ISSUER = "https://login.example.com/tenant"


def _settings(**changes: Any) -> dict[str, Any]:
    """Valid settings with some changed; a change to `...` leaves the field out."""
    body = {
        "name": "Example SSO",
        "issuer": ISSUER,
        "clientId": "gateway-client",
        "clientSecret": SECRET,
        "allowedDomains": ["Example.com"],
    }
    return {k: v for k, v in {**body, **changes}.items() if v is not ...}


async def _create(gateway: SsoGateway, account: Account, **changes: Any):
    return await gateway.cabinet.call(
        "POST", "/auth/oidc/providers", token=account.token, json=_settings(**changes)
    )


async def test_an_owner_adds_a_provider_with_defaults_and_the_secret_is_never_returned(
    gateway: SsoGateway,
) -> None:
    owner = await gateway.cabinet.register()

    created = await _create(gateway, owner)
    provider_id = created.body["id"]
    read = await gateway.cabinet.call("GET", f"/auth/oidc/providers/{provider_id}", token=owner.token)
    listed = await gateway.cabinet.call("GET", "/auth/oidc/providers", token=owner.token)

    assert created.status == 201
    assert created.body == {
        "id": provider_id,
        "organizationId": await gateway.cabinet.organization_id(owner),
        "name": "Example SSO",
        "issuer": ISSUER,
        "clientId": "gateway-client",
        "tokenAuthMethod": "client_secret_basic",
        "scopes": ["openid", "email", "profile"],
        "allowedDomains": ["example.com"],
        "defaultRole": "member",
        "autoProvision": False,
        "assumePkceS256": False,
        "discovered": False,
        "endpoints": None,
        "loginUrl": f"{gateway.base_url}/api/auth/oidc/{provider_id}/login",
        "discoveredAt": None,
        "createdAt": created.body["createdAt"],
        "updatedAt": created.body["updatedAt"],
    }
    assert read.body == created.body
    assert listed.body == {"providers": [created.body]}
    for reply in (created, read, listed):
        assert SECRET.encode() not in reply.raw


async def test_an_admin_manages_providers_and_a_member_cannot(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()
    admin = await gateway.cabinet.add_member(owner, "admin")
    member = await gateway.cabinet.add_member(owner, "member")

    by_admin = await _create(gateway, admin)
    by_member = await _create(gateway, member, name="other")
    member_list = await gateway.cabinet.call("GET", "/auth/oidc/providers", token=member.token)

    assert by_admin.status == 201
    assert (by_member.status, member_list.status) == (403, 403)


async def test_a_request_without_a_token_is_401(gateway: SsoGateway) -> None:
    reply = await gateway.cabinet.call("POST", "/auth/oidc/providers", json=_settings())

    assert (reply.status, reply.body) == (401, {"error": "missing bearer token"})


async def test_another_organizations_provider_is_not_found(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()
    provider_id = (await _create(gateway, owner)).body["id"]
    stranger = await gateway.cabinet.register()
    path = f"/auth/oidc/providers/{provider_id}"

    replies = [
        await gateway.cabinet.call("GET", path, token=stranger.token),
        await gateway.cabinet.call("PATCH", path, token=stranger.token, json={"name": "mine now"}),
        await gateway.cabinet.call("DELETE", path, token=stranger.token),
        await gateway.cabinet.call("POST", f"{path}/discover", token=stranger.token),
    ]
    listed = await gateway.cabinet.call("GET", "/auth/oidc/providers", token=stranger.token)

    assert [(r.status, r.body) for r in replies] == [(404, {"error": "identity provider not found"})] * 4
    assert listed.body == {"providers": []}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"issuer": ...}, "issuer is required"),
        ({"issuer": "http://login.example.com"}, "issuer must use https"),
        ({"issuer": "ftp://login.example.com"}, "issuer must be an https:// URL with a host"),
        ({"issuer": "https://login.example.com/?tenant=1"}, "issuer must not contain a query"),
        ({"issuer": 7}, "issuer must be a string"),
        ({"clientId": ""}, "clientId is required"),
        ({"clientSecret": ...}, "clientSecret is required"),
        ({"clientSecret": ["x"]}, "clientSecret must be a string"),
        (
            {"tokenAuthMethod": "private_key_jwt"},
            "tokenAuthMethod must be one of: client_secret_basic, client_secret_post",
        ),
        ({"scopes": "openid email"}, "scopes must be a list of strings"),
        ({"scopes": ["email"]}, "scopes must include openid"),
        ({"scopes": ["openid", "two words"]}, "scopes has an invalid scope: 'two words'"),
        ({"allowedDomains": []}, "allowedDomains must name at least one e-mail domain"),
        ({"allowedDomains": ["@example.com"]}, "allowedDomains has an invalid domain: '@example.com'"),
        ({"defaultRole": "owner"}, "defaultRole must be one of: member, admin"),
        ({"autoProvision": "yes"}, "autoProvision must be true or false"),
        ({"assumePkceS256": 1}, "assumePkceS256 must be true or false"),
        ({"clientSceret": "typo"}, "unknown field: clientSceret"),
    ],
)
async def test_bad_provider_settings_are_a_400(
    gateway: SsoGateway, changes: dict[str, Any], message: str
) -> None:
    owner = await gateway.cabinet.register()

    reply = await _create(gateway, owner, **changes)

    assert reply.status == 400
    assert reply.body["error"].startswith(message)


async def test_a_plain_http_issuer_is_refused_when_the_gateway_itself_runs_on_https(
    start_gateway: GatewayFactory,
) -> None:
    gateway = await start_gateway(public_url="https://gateway.example.com")
    owner = await gateway.cabinet.register()

    reply = await _create(gateway, owner, issuer="http://127.0.0.1:9999")

    assert (reply.status, reply.body) == (400, {"error": "issuer must use https"})


async def test_a_body_that_is_not_a_json_object_is_a_400(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()

    reply = await gateway.cabinet.call("POST", "/auth/oidc/providers", token=owner.token, data="[1, 2]")

    assert (reply.status, reply.body) == (400, {"error": "request body must be a JSON object"})


async def test_a_second_provider_with_the_same_name_is_409(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()
    await _create(gateway, owner)

    reply = await _create(gateway, owner)

    assert (reply.status, reply.body) == (
        409,
        {"error": "an identity provider named 'Example SSO' already exists"},
    )


async def test_an_update_changes_only_the_given_fields(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()
    created = (await _create(gateway, owner)).body
    path = f"/auth/oidc/providers/{created['id']}"

    updated = await gateway.cabinet.call(
        "PATCH",
        path,
        token=owner.token,
        json={"autoProvision": True, "defaultRole": "admin", "clientSecret": "rotated-secret"},
    )

    changed = {field for field, value in updated.body.items() if created[field] != value} - {"updatedAt"}

    assert updated.status == 200
    assert changed == {"autoProvision", "defaultRole"}
    assert b"rotated-secret" not in updated.raw


async def test_an_update_with_bad_settings_changes_nothing(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()
    created = (await _create(gateway, owner)).body
    path = f"/auth/oidc/providers/{created['id']}"

    empty = await gateway.cabinet.call("PATCH", path, token=owner.token, json={})
    bad = await gateway.cabinet.call("PATCH", path, token=owner.token, json={"name": "ok", "scopes": []})
    read = await gateway.cabinet.call("GET", path, token=owner.token)

    assert empty.status == 400 and empty.body["error"].startswith("give at least one field to change")
    assert (bad.status, bad.body) == (400, {"error": "scopes must include openid"})
    assert read.body == created


async def test_a_new_issuer_drops_the_discovered_endpoints(gateway: SsoGateway, fake_idp: FakeIdp) -> None:
    owner = await gateway.cabinet.register()
    provider_id = await gateway.ready_provider(owner, fake_idp.issuer)

    updated = await gateway.cabinet.call(
        "PATCH", f"/auth/oidc/providers/{provider_id}", token=owner.token, json={"issuer": ISSUER}
    )

    assert (updated.body["issuer"], updated.body["discovered"], updated.body["endpoints"]) == (
        ISSUER,
        False,
        None,
    )


async def test_a_deleted_provider_is_gone(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()
    provider_id = (await _create(gateway, owner)).body["id"]
    path = f"/auth/oidc/providers/{provider_id}"

    deleted = await gateway.cabinet.call("DELETE", path, token=owner.token)
    again = await gateway.cabinet.call("DELETE", path, token=owner.token)
    read = await gateway.cabinet.call("GET", path, token=owner.token)

    assert (deleted.status, deleted.body["deleted"]) == (200, True)
    assert again.status == read.status == 404


async def test_provider_changes_are_audited_without_the_secret(gateway: SsoGateway) -> None:
    owner = await gateway.cabinet.register()
    provider_id = (await _create(gateway, owner)).body["id"]
    path = f"/auth/oidc/providers/{provider_id}"
    await gateway.cabinet.call("PATCH", path, token=owner.token, json={"clientSecret": "another-secret"})
    await gateway.cabinet.call("DELETE", path, token=owner.token)

    entries = [
        e for e in await gateway.cabinet.audit_events(owner) if e["event"].startswith("oidc_provider.")
    ]

    assert [e["event"] for e in entries] == [
        "oidc_provider.deleted",
        "oidc_provider.updated",
        "oidc_provider.created",
    ]
    assert entries[1]["details"] == {"fields": ["clientSecret"]}
    assert all(e["targetId"] == provider_id for e in entries)
    assert SECRET not in str(entries) and "another-secret" not in str(entries)
