"""The OpenAPI document describes exactly the routes the cabinet serves."""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.app import build_cabinet_app
from modelgate.cabinet.openapi import openapi_document
from modelgate.cabinet.services import CabinetServices, NullKeySink
from modelgate.config import load_config
from modelgate.storage import Database
from tests.integration.cabinet.cabinet_client import Cabinet

HTTP_METHODS = {"get", "post", "put", "patch", "delete", "head", "options"}


def _served_routes(db: Database) -> set[tuple[str, str]]:
    app = build_cabinet_app(CabinetServices(load_config(None), db, NullKeySink()))
    return {(route.method.lower(), "/api" + route.resource.canonical) for route in app.router.routes()}


def _documented_routes(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


async def test_every_route_is_documented_and_every_documented_route_exists(db: Database) -> None:
    assert _documented_routes(openapi_document()) == _served_routes(db)


async def test_the_document_is_served_as_openapi_3_1(cabinet: Cabinet) -> None:
    reply = await cabinet.call("GET", "/openapi.json")

    assert reply.status == 200
    assert reply.body["openapi"] == "3.1.0"
    assert reply.body == openapi_document()


async def test_every_schema_reference_resolves(db: Database) -> None:
    document = openapi_document()
    schemas = document["components"]["schemas"]

    for ref in _refs(document):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


async def test_the_oidc_endpoints_of_the_description_are_documented(db: Database) -> None:
    paths = openapi_document()["paths"]

    assert "get" in paths["/api/auth/oidc/{providerId}/login"]
    assert "get" in paths["/api/auth/oidc/callback"]
    assert "post" in paths["/api/auth/oidc/providers/{id}/discover"]


async def test_the_oidc_client_secret_is_write_only(db: Database) -> None:
    schemas = openapi_document()["components"]["schemas"]

    assert schemas["OidcProviderRequest"]["properties"]["clientSecret"]["writeOnly"] is True
    assert "clientSecret" not in schemas["OidcProvider"]["properties"]


async def test_the_api_key_object_is_documented_with_the_fields_of_the_description(db: Database) -> None:
    schema = openapi_document()["components"]["schemas"]["ApiKey"]

    assert set(schema["properties"]) == {"id", "organizationId", "alias", "ownerEmail", "systemId", "status"}
