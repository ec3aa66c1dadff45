"""Query text the storage cannot hold is a 400 `{"error"}` on every cabinet endpoint, on both backends:
a NUL (PostgreSQL text holds none, so a lookup with one failed with a 500) or invalid UTF-8 (read back,
the value is not what was sent). The walk takes every parameter the OpenAPI document lists, so a new one
is covered when it is documented (issue 33, finding 5)."""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import pytest

from modelgate.cabinet.openapi import PREFIX, openapi_document
from modelgate.config import load_config
from tests.integration.cabinet.cabinet_client import Account, Cabinet
from tests.integration.cabinet.conftest import CabinetFactory

OPERATOR_TOKEN = "operator-token-for-query-tests"
HTTP_METHODS = ("get", "post", "put", "patch", "delete")
# Percent-encoded values no query may carry: NUL alone and inside text, a stray continuation byte, an
# overlong encoding of NUL (the way past a naive `%00` check), a lone surrogate.
UNSTORABLE = ("%00", "abc%00def", "%FF", "%C0%80", "%ED%A0%80")
# A value for a path parameter that names nothing: the route matches, the id is unknown.
SOME_ID = "x_0123456789abcdef"


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# Parameters whose value is decoded once more by the gateway: what they carry inside must be storable too.
# "MS4wfAB4" is the issue's own: "1.0|\x00x".
ENCODED_INSIDE = {"cursor": ("MS4wfAB4", _cursor(b"1.0|aud_0123456789ab\x00"), _cursor(b"1.0|aud_\xff\xfe"))}


# The single sign-on callback is a browser's redirect: it refuses a bad query with its own redirect
# (`error=invalid_state`), tested with NUL and invalid UTF-8 in tests/integration/oidc/test_sso_failures.py.
OWN_REFUSAL = {"/auth/oidc/callback"}


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    document = openapi_document()
    return [
        (method.upper(), path.removeprefix(PREFIX), operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS and path.removeprefix(PREFIX) not in OWN_REFUSAL
    ]


def _query_parameters() -> list[tuple[str, str, str]]:
    return [
        (method, path, parameter["name"])
        for method, path, operation in _operations()
        for parameter in operation.get("parameters", ())
        if parameter["in"] == "query"
    ]


def _with_ids(path: str) -> str:
    for name in ("id", "userId", "keyId", "providerId"):
        path = path.replace("{" + name + "}", SOME_ID)
    return path


@pytest.fixture
async def cabinet(start_cabinet: CabinetFactory) -> Cabinet:
    config = load_config(None)
    return await start_cabinet(replace(config, server=replace(config.server, operator_token=OPERATOR_TOKEN)))


@pytest.fixture
async def owner(cabinet: Cabinet) -> Account:
    return await cabinet.register()


def _token(path: str, owner: Account) -> str:
    return OPERATOR_TOKEN if path.startswith("/operator/") else owner.token


def test_the_document_lists_query_parameters_to_walk() -> None:
    names = {name for _, _, name in _query_parameters()}

    # The walk below is only as good as the document: these are the endpoints that read a query.
    assert {"cursor", "limit", "event", "email", "from", "to", "groupBy", "then", "route"} <= names
    assert set(ENCODED_INSIDE) <= names


async def test_every_documented_query_parameter_refuses_unstorable_text(
    cabinet: Cabinet, owner: Account
) -> None:
    walked = 0
    for method, path, name in _query_parameters():
        for value in UNSTORABLE:
            reply = await cabinet.call(method, f"{_with_ids(path)}?{name}={value}", token=_token(path, owner))

            assert reply.status == 400, (method, path, name, value, reply.status, reply.raw[:200])
            assert set(reply.body) == {"error"}, (method, path, name, value)
            walked += 1
    assert walked >= 11 * len(UNSTORABLE)


async def test_a_cursor_that_decodes_to_unstorable_text_is_400(cabinet: Cabinet, owner: Account) -> None:
    for method, path, name in _query_parameters():
        for value in ENCODED_INSIDE.get(name, ()):
            reply = await cabinet.call(method, f"{path}?{name}={value}", token=_token(path, owner))

            assert (reply.status, reply.body) == (400, {"error": "cursor is not valid"}), (path, value)


async def test_a_cursor_the_gateway_made_still_pages(cabinet: Cabinet, owner: Account) -> None:
    for alias in ("one", "two", "three"):
        assert (await cabinet.create_key(owner, alias)).status == 201

    first = await cabinet.call("GET", "/audit-log?limit=1", token=owner.token)
    second = await cabinet.call(
        "GET", f"/audit-log?limit=1&cursor={first.body['nextCursor']}", token=owner.token
    )

    assert (first.status, second.status) == (200, 200)
    assert first.body["entries"][0]["id"] != second.body["entries"][0]["id"]


async def test_an_undocumented_query_parameter_cannot_carry_a_nul_either(
    cabinet: Cabinet, owner: Account
) -> None:
    for method, path, _ in _operations():
        reply = await cabinet.call(method, f"{_with_ids(path)}?anything=%00", token=_token(path, owner))

        assert (reply.status, reply.body) == (400, {"error": "the request URL contains a NUL character"}), (
            method,
            path,
        )


async def test_a_path_id_with_unstorable_text_names_nothing(cabinet: Cabinet, owner: Account) -> None:
    for method, path, operation in _operations():
        names = [p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"]
        for value in ("%00", "x_00%00", "%FF"):
            filled = path
            for name in names:
                filled = filled.replace("{" + name + "}", value)
            if filled == path:
                continue
            reply = await cabinet.call(method, filled, token=_token(path, owner), json={})

            # An id that is not id-shaped is answered like any unknown id (or refused as bad input).
            assert reply.status in (400, 404), (method, filled, reply.status, reply.raw[:200])
            assert set(reply.body) == {"error"}, (method, filled)
