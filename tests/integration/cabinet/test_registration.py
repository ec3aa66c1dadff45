"""POST /api/auth/register: organization, owner, first invoice and session at once, or a precise error."""

from __future__ import annotations

from tests.integration.cabinet.cabinet_client import PASSWORD, Cabinet, unique_email


def _register_body(**overrides: object) -> dict[str, object]:
    return {
        "legalName": "Acme Ltd",
        "email": unique_email("reg"),
        "password": PASSWORD,
        "planCode": "pro",
        **overrides,
    }


async def test_register_answers_201_with_a_session_token_and_the_email(cabinet: Cabinet) -> None:
    body = _register_body()

    reply = await cabinet.call("POST", "/auth/register", json=body)

    assert reply.status == 201
    assert set(reply.body) == {"token", "email"}
    assert reply.body["email"] == body["email"]
    session = await cabinet.call("GET", "/auth/session", token=reply.body["token"])
    assert session.status == 200
    assert session.body["user"]["role"] == "owner"
    assert session.body["organization"]["legalName"] == "Acme Ltd"
    assert session.body["organization"]["planCode"] == "pro"


async def test_register_opens_the_first_invoice_of_the_plan_in_micros(cabinet: Cabinet) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)

    invoices = await cabinet.db.fetch(
        "SELECT plan_code, amount_micros, status FROM invoices WHERE organization_id = $1", org_id
    )

    assert invoices == [{"plan_code": "pro", "amount_micros": 49_000_000, "status": "open"}]


async def test_register_records_an_audit_entry(cabinet: Cabinet) -> None:
    owner = await cabinet.register(plan="free")
    paying = await cabinet.register(plan="pro")

    events = [e["event"] for e in await cabinet.audit_events(owner)]

    # The free plan's 0.00 invoice is paid as it is opened (both at the same instant: in either order).
    assert sorted(events) == ["auth.registered", "invoice.paid"]
    assert [e["event"] for e in await cabinet.audit_events(paying)] == ["auth.registered"]


async def test_register_normalises_the_email_case_and_whitespace(cabinet: Cabinet) -> None:
    reply = await cabinet.call(
        "POST", "/auth/register", json=_register_body(email="  Mixed.Case@Example.COM \n")
    )

    assert reply.status == 201
    assert reply.body["email"] == "mixed.case@example.com"
    assert (await cabinet.login("MIXED.case@example.com")).status == 200


async def test_register_with_a_taken_email_is_409_in_any_case(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    # A verified account holds its address (an unverified one does not: test_verified_addresses.py).
    await cabinet.verify_address(owner)

    reply = await cabinet.call("POST", "/auth/register", json=_register_body(email=owner.email.upper()))

    assert (reply.status, reply.body) == (409, {"error": "an account with this e-mail already exists"})


REGISTER_FIELDS = ("legalName", "email", "password", "planCode")


async def test_every_register_field_is_required(cabinet: Cabinet) -> None:
    for field in REGISTER_FIELDS:
        body = _register_body()
        del body[field]

        reply = await cabinet.call("POST", "/auth/register", json=body)

        assert (reply.status, reply.body) == (400, {"error": f"{field} is required"})


async def test_every_register_field_must_be_a_string(cabinet: Cabinet) -> None:
    for field in REGISTER_FIELDS:
        reply = await cabinet.call("POST", "/auth/register", json=_register_body(**{field: 12345678901}))

        assert (reply.status, reply.body) == (400, {"error": f"{field} must be a string"})


async def test_register_rejects_a_malformed_email(cabinet: Cabinet) -> None:
    for email in (
        "no-at-sign",
        "two@@example.com",
        "spaces in@example.com",
        "x@nodot",
        "a@b.c",
        "a@.example.com",
    ):
        reply = await cabinet.call("POST", "/auth/register", json=_register_body(email=email))

        assert (reply.status, reply.body) == (400, {"error": "email must be a valid e-mail address"}), email


async def test_register_rejects_a_password_shorter_than_10_characters(cabinet: Cabinet) -> None:
    reply = await cabinet.call("POST", "/auth/register", json=_register_body(password="short-pw1"))

    assert (reply.status, reply.body) == (400, {"error": "password must be at least 10 characters"})


async def test_register_rejects_the_email_as_password(cabinet: Cabinet) -> None:
    email = unique_email("same")

    reply = await cabinet.call(
        "POST", "/auth/register", json=_register_body(email=email, password=email.upper())
    )

    assert (reply.status, reply.body) == (400, {"error": "password must not be the e-mail address"})


async def test_register_rejects_a_plan_that_is_not_in_the_config(cabinet: Cabinet) -> None:
    reply = await cabinet.call("POST", "/auth/register", json=_register_body(planCode="platinum"))

    assert (reply.status, reply.body) == (400, {"error": "planCode must be one of: free, pro, enterprise"})


async def test_a_failed_registration_leaves_no_rows_behind(cabinet: Cabinet) -> None:
    await cabinet.call("POST", "/auth/register", json=_register_body(planCode="platinum"))
    await cabinet.call("POST", "/auth/register", json=_register_body(password="short"))

    for table in ("organizations", "users", "sessions", "invoices", "audit_log"):
        assert await cabinet.db.fetchval(f"SELECT COUNT(*) FROM {table}") == 0, table


async def test_a_unicode_legal_name_round_trips(cabinet: Cabinet) -> None:
    owner = await cabinet.register(legal_name="Ünïcode GmbH — 株式会社 🚀")

    session = await cabinet.session(owner)

    assert session["organization"]["legalName"] == "Ünïcode GmbH — 株式会社 🚀"
