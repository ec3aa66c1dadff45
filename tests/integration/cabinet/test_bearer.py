"""Bearer rules of every cabinet endpoint: a session token or a management key, nothing else."""

from __future__ import annotations

import pytest

from modelgate.cabinet.app import ROUTES
from tests.integration.cabinet.cabinet_client import Cabinet

PUBLIC = {
    "/auth/register",
    "/auth/login",
    "/invitations/accept",
    "/openapi.json",
    # Single sign-on: the browser arrives without a token (tests/integration/oidc covers these).
    "/auth/oidc/{providerId}/login",
    "/auth/oidc/callback",
    "/auth/oidc/exchange",
    # What the web cabinet's sign-in page shows before anyone is signed in (tests/integration/cabinet/
    # test_web_session.py covers it).
    "/auth/sign-in-options",
}
# The operator API takes its own token and is absent (404) without one; see tests/integration/billing_cabinet.
OPERATOR_PREFIX = "/operator/"
BEARER_ROUTES = sorted(
    {(r.method, r.path) for r in ROUTES if r.path not in PUBLIC and not r.path.startswith(OPERATOR_PREFIX)}
)


def _concrete(path: str) -> str:
    # Any well-formed id will do: authentication is decided before the id is looked at.
    for name in ("{userId}", "{keyId}", "{id}"):
        path = path.replace(name, "xyz_000000000000000000000000")
    return path.replace("{domain}", "example.com")


async def test_every_bearer_endpoint_refuses_a_request_without_a_token(cabinet: Cabinet) -> None:
    for method, path in BEARER_ROUTES:
        reply = await cabinet.call(method, _concrete(path), json={})

        assert (reply.status, reply.body) == (401, {"error": "missing bearer token"}), (method, path)


async def test_every_bearer_endpoint_refuses_a_model_api_key(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    secret = (await cabinet.create_key(owner)).body["secret"]

    for method, path in BEARER_ROUTES:
        reply = await cabinet.call(method, _concrete(path), token=secret, json={})

        assert reply.status == 401, (method, path)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("Basic dXNlcjpwYXNz", "authorization must be a bearer token"),
        ("Bearer", "authorization must be a bearer token"),
        ("Bearer not-a-token", "invalid or expired session token"),
        ("Bearer sk-mgmt-unknown", "invalid or revoked management key"),
        ("Bearer 🙂", "invalid or expired session token"),
    ],
)
async def test_garbage_authorization_is_401(cabinet: Cabinet, header: str, message: str) -> None:
    reply = await cabinet.call("GET", "/overview", headers={"Authorization": header})

    assert (reply.status, reply.body) == (401, {"error": message})
    assert reply.headers["WWW-Authenticate"] == "Bearer"


async def test_a_model_api_key_is_not_accepted_by_the_cabinet(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    secret = (await cabinet.create_key(owner)).body["secret"]

    reply = await cabinet.call("GET", "/overview", token=secret)

    assert reply.status == 401
    assert reply.body == {
        "error": "model API keys are not accepted by the cabinet; use a session token or a management key"
    }


async def test_the_bearer_scheme_is_case_insensitive(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call("GET", "/overview", headers={"Authorization": f"bearer {owner.token}"})

    assert reply.status == 200


async def test_a_management_key_works_on_bearer_endpoints_with_admin_rights(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    key = (await cabinet.create_management_key(owner)).body["secret"]

    session = await cabinet.call("GET", "/auth/session", token=key)
    created = await cabinet.create_key(key, "from-automation")
    system = await cabinet.call("POST", "/systems", token=key, json={"name": "robot"})

    assert session.status == 200
    assert session.body["kind"] == "management_key"
    assert session.body["user"]["role"] == "admin"
    assert (created.status, system.status) == (201, 201)
    assert created.body["ownerEmail"] == owner.email


async def test_operations_by_a_management_key_are_audited_as_that_key(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    management_key = (await cabinet.create_management_key(owner)).body
    await cabinet.create_key(management_key["secret"])

    entry = next(e for e in await cabinet.audit_events(owner) if e["event"] == "api_key.created")

    assert entry["actor"] == {"type": "management_key", "id": management_key["id"], "email": None}


async def test_a_management_key_cannot_manage_management_keys(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    key = (await cabinet.create_management_key(owner)).body["secret"]

    reply = await cabinet.call("POST", "/organization/management-keys", token=key, json={"name": "another"})

    assert (reply.status, reply.body) == (403, {"error": "this action requires the owner role"})


async def test_a_revoked_management_key_is_refused_at_once(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    key = (await cabinet.create_management_key(owner)).body
    assert (await cabinet.call("GET", "/overview", token=key["secret"])).status == 200

    await cabinet.call("POST", f"/organization/management-keys/{key['id']}/revoke", token=owner.token)

    reply = await cabinet.call("GET", "/overview", token=key["secret"])
    assert (reply.status, reply.body) == (401, {"error": "invalid or revoked management key"})


async def test_a_demoted_user_loses_rights_on_the_next_request(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")
    assert (await cabinet.create_key(admin)).status == 201

    await cabinet.call(
        "PATCH", f"/members/{await cabinet.user_id(admin)}", token=owner.token, json={"role": "member"}
    )

    assert (await cabinet.create_key(admin)).status == 403
