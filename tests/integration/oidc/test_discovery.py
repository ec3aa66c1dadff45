"""POST /api/auth/oidc/providers/{id}/discover: the provider's discovery document is fetched and checked, its
endpoints stored and returned; anything unusable is a 400 that says what is wrong."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from modelgate.cabinet.oidc.urls import CALLBACK_PATH
from tests.integration.cabinet.cabinet_client import Account
from tests.integration.oidc.fake_idp import FakeIdp
from tests.integration.oidc.node_idp import NodeIdp
from tests.integration.oidc.sso_client import SsoGateway

# Validation logic, not storage: SQLite is enough (the login flow itself runs on both backends).
pytestmark = pytest.mark.parametrize("storage_url", ["sqlite"], indirect=True)


async def _provider(gateway: SsoGateway, issuer: str, **fields: Any) -> tuple[Account, str]:
    owner = await gateway.cabinet.register()
    created = await gateway.add_provider(owner, issuer, **fields)
    assert created.status == 201, created.body
    return owner, created.body["id"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_discovery_of_the_real_provider_stores_its_endpoints(
    gateway: SsoGateway, node_idp: NodeIdp
) -> None:
    owner, provider_id = await _provider(gateway, node_idp.issuer)

    reply = await gateway.discover(owner, provider_id)
    provider = await gateway.cabinet.call("GET", f"/auth/oidc/providers/{provider_id}", token=owner.token)
    events = [e["event"] for e in await gateway.cabinet.audit_events(owner)]

    assert reply.status == 200, reply.body
    assert reply.body["issuer"] == node_idp.issuer
    assert reply.body["authorizationEndpoint"] == f"{node_idp.issuer}/auth"
    assert reply.body["tokenEndpoint"] == f"{node_idp.issuer}/token"
    assert reply.body["jwksUri"] == f"{node_idp.issuer}/jwks"
    assert reply.body["userinfoEndpoint"] == f"{node_idp.issuer}/me"
    assert reply.body["idTokenSigningAlgs"] == ["RS256"]
    assert reply.body["codeChallengeMethod"] == "S256"
    assert reply.body["signingKeys"] == 1
    assert reply.body["redirectUri"] == gateway.base_url + CALLBACK_PATH
    assert provider.body["discovered"] is True
    assert provider.body["endpoints"]["jwksUri"] == f"{node_idp.issuer}/jwks"
    assert "oidc_provider.discovered" in events


async def test_an_unreachable_issuer_is_a_400(gateway: SsoGateway) -> None:
    owner, provider_id = await _provider(gateway, f"http://127.0.0.1:{_closed_port()}")

    reply = await gateway.discover(owner, provider_id)

    assert reply.status == 400
    assert reply.body["error"].startswith("discovery failed: the issuer is unreachable")


async def test_an_issuer_that_differs_from_the_document_is_a_400(
    gateway: SsoGateway, node_idp: NodeIdp
) -> None:
    # The same provider under another spelling: its document names http://127.0.0.1:<port>.
    owner, provider_id = await _provider(gateway, node_idp.issuer.replace("127.0.0.1", "localhost"))

    reply = await gateway.discover(owner, provider_id)

    assert reply.status == 400
    assert reply.body["error"].startswith("discovery failed: issuer mismatch")
    assert repr(node_idp.issuer) in reply.body["error"]


@pytest.mark.parametrize(
    ("document_change", "message"),
    [
        ({"code_challenge_methods_supported": ["plain"]}, "does not advertise PKCE with S256"),
        ({"code_challenge_methods_supported": None}, "does not advertise PKCE with S256"),
        ({"jwks_uri": None}, "has no jwks_uri"),
        ({"token_endpoint": "http://idp.example.com/token"}, "token_endpoint must use https"),
        ({"response_types_supported": ["id_token"]}, "authorization-code flow"),
        (
            {"token_endpoint_auth_methods_supported": ["private_key_jwt"]},
            "does not accept client_secret_basic",
        ),
        ({"id_token_signing_alg_values_supported": ["HS256"]}, "signs ID tokens with none of"),
    ],
)
async def test_an_unsuitable_discovery_document_is_a_400(
    gateway: SsoGateway, fake_idp: FakeIdp, document_change: dict[str, Any], message: str
) -> None:
    owner, provider_id = await _provider(gateway, fake_idp.issuer)
    fake_idp.discovery_overrides = document_change

    reply = await gateway.discover(owner, provider_id)

    assert reply.status == 400
    assert message in reply.body["error"]


async def test_pkce_s256_can_be_assumed_for_a_provider_that_does_not_list_its_methods(
    gateway: SsoGateway, fake_idp: FakeIdp
) -> None:
    # Microsoft Entra ID supports S256 but its discovery document has no code_challenge_methods_supported.
    owner, provider_id = await _provider(gateway, fake_idp.issuer, assumePkceS256=True)
    fake_idp.discovery_overrides = {"code_challenge_methods_supported": None}

    reply = await gateway.discover(owner, provider_id)

    assert (reply.status, reply.body["codeChallengeMethod"]) == (200, "S256")


async def test_pkce_s256_is_never_assumed_against_a_list_without_it(
    gateway: SsoGateway, fake_idp: FakeIdp
) -> None:
    owner, provider_id = await _provider(gateway, fake_idp.issuer, assumePkceS256=True)
    fake_idp.discovery_overrides = {"code_challenge_methods_supported": ["plain"]}

    reply = await gateway.discover(owner, provider_id)

    assert reply.status == 400
    assert "does not advertise PKCE with S256" in reply.body["error"]


async def test_a_discovery_document_that_is_not_json_is_a_400(gateway: SsoGateway, fake_idp: FakeIdp) -> None:
    owner, provider_id = await _provider(gateway, fake_idp.issuer)
    fake_idp.discovery_raw = b"<html>not json</html>"

    reply = await gateway.discover(owner, provider_id)

    assert reply.status == 400
    assert "is not a valid JSON object" in reply.body["error"]


async def test_a_missing_discovery_document_is_a_400(gateway: SsoGateway, fake_idp: FakeIdp) -> None:
    owner, provider_id = await _provider(gateway, fake_idp.issuer + "/no-such-tenant")

    reply = await gateway.discover(owner, provider_id)

    assert reply.status == 400
    assert "HTTP 404" in reply.body["error"]


async def test_a_failed_discovery_leaves_the_provider_unusable(
    gateway: SsoGateway, fake_idp: FakeIdp
) -> None:
    owner, provider_id = await _provider(gateway, fake_idp.issuer)
    fake_idp.discovery_overrides = {"issuer": "https://someone-else.example"}

    await gateway.discover(owner, provider_id)
    provider = await gateway.cabinet.call("GET", f"/auth/oidc/providers/{provider_id}", token=owner.token)

    assert (provider.body["discovered"], provider.body["endpoints"]) == (False, None)


async def test_discovery_needs_an_owner_or_admin(gateway: SsoGateway, fake_idp: FakeIdp) -> None:
    owner, provider_id = await _provider(gateway, fake_idp.issuer)
    member = await gateway.cabinet.add_member(owner, "member")

    anonymous = await gateway.cabinet.call("POST", f"/auth/oidc/providers/{provider_id}/discover")
    as_member = await gateway.discover(member, provider_id)

    assert anonymous.status == 401
    assert as_member.status == 403
