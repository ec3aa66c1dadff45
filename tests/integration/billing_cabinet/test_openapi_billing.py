"""The OpenAPI document describes the billing objects with the fields the API actually returns."""

from __future__ import annotations

from modelgate.cabinet.openapi import openapi_document
from tests.integration.billing_cabinet.billing_client import BillingCabinet

SCHEMAS = openapi_document()["components"]["schemas"]


async def test_the_policy_rule_and_invoice_schemas_list_the_returned_fields(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    rule = (await cabinet.create_rule(owner)).body
    [invoice] = (await cabinet.call("GET", "/invoices", token=owner.token)).body["invoices"]

    assert set(SCHEMAS["PolicyRule"]["properties"]) == set(rule)
    assert set(SCHEMAS["Invoice"]["properties"]) == set(invoice)


async def test_the_billing_overview_schema_lists_the_returned_fields(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    billing = (await cabinet.call("GET", "/overview", token=owner.token)).body["billing"]

    assert set(SCHEMAS["BillingOverview"]["properties"]) == set(billing)
    assert SCHEMAS["Overview"]["properties"]["billing"] == {"$ref": "#/components/schemas/BillingOverview"}


def test_operator_routes_use_the_operator_token_scheme() -> None:
    document = openapi_document()
    operator_ops = {
        (method.upper(), path): op
        for path, item in document["paths"].items()
        if path.startswith("/api/operator/")
        for method, op in item.items()
        if method != "parameters"
    }

    assert set(operator_ops) == {
        ("POST", "/api/operator/invoices/{id}/mark-paid"),
        ("POST", "/api/operator/organizations/{id}/top-up"),
        ("GET", "/api/operator/organizations/{id}/invoices"),
        ("POST", "/api/operator/organizations/{id}/adjust"),
        ("POST", "/api/operator/organizations/{id}/plan"),
        ("POST", "/api/operator/registration-invitations"),
        ("POST", "/api/operator/organizations/{id}/sso-domains"),  # the operator's approval of a domain
        ("DELETE", "/api/operator/sso-domains/{domain}"),
        ("GET", "/api/operator/mail"),  # links waiting for the operator when no [email] is set
    }
    assert all(op["security"] == [{"operator": []}] for op in operator_ops.values())
    assert document["components"]["securitySchemes"]["operator"]["scheme"] == "bearer"


async def test_the_operator_schemas_list_the_returned_fields(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)

    adjusted = await cabinet.operator(
        "POST", f"/organizations/{org_id}/adjust", json={"kind": "credit", "amountMicros": 1, "reason": "x"}
    )
    planned = await cabinet.operator("POST", f"/organizations/{org_id}/plan", json={"planCode": "free"})
    invited = await cabinet.operator(
        "POST", "/registration-invitations", json={"email": "new@example.com", "planCode": "pro"}
    )

    assert set(SCHEMAS["Adjustment"]["properties"]) == set(adjusted.body)
    assert set(SCHEMAS["PlanChange"]["properties"]) == set(planned.body)
    assert set(SCHEMAS["RegistrationInvitation"]["properties"]) == set(invited.body)
    assert set(SCHEMAS["RegisterRequest"]["required"]) == {"legalName", "email", "password"}
