"""Reading the audit log as a person does: the names beside the ids, an edit as the fields it changed, the
route as a client writes it, a date range, an actor, and the whole log as CSV — always of the caller's
organization only."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from typing import Any

import pytest

from modelgate.domain.audit_log import Actor, NewAuditEntry, record_many
from tests.integration.cabinet.cabinet_client import Account, Cabinet


def _at(day: str, hour: int = 12) -> float:
    """A time on a UTC day given as YYYY-MM-DD."""
    return datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC).timestamp()


def _request_entry(org_id: str, n: int, route: str, at: float = 1000.0) -> NewAuditEntry:
    """A content-policy entry of request req_<n> on a route, as the model API writes it."""
    return NewAuditEntry(
        organization_id=org_id,
        event="content_policy.flagged",
        actor=Actor("api_key", "key_x", None),
        at=at + n,
        target_id="pol_x",
        details={"requestId": f"req_{n}"},
        key_id="key_x",
        route=route,
    )


async def _entries(cabinet: Cabinet, account: Account, query: str) -> list[dict[str, Any]]:
    reply = await cabinet.call("GET", f"/audit-log?{query}", token=account.token)
    assert reply.status == 200, reply.body
    return reply.body["entries"]


async def _request_ids(cabinet: Cabinet, account: Account, query: str) -> list[str]:
    return [e["details"].get("requestId") for e in await _entries(cabinet, account, query)]


async def _rule(cabinet: Cabinet, owner: Account, **fields: Any) -> dict[str, Any]:
    body = {"subjectType": "organization", "effect": "allow", "models": ["*"], **fields}
    reply = await cabinet.call("POST", "/policy-rules", token=owner.token, json=body)
    assert reply.status == 201, reply.body
    return reply.body


# ---- an edit records what it changed


async def test_editing_one_field_of_a_rule_records_only_that_field(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    rule = await _rule(cabinet, owner, description="Everyone", rpm=10)
    # The web form sends every field back, changed or not.
    every_field = {k: rule[k] for k in ("subjectType", "effect", "models", "description")} | {"rpm": 20}

    reply = await cabinet.call("PATCH", f"/policy-rules/{rule['id']}", token=owner.token, json=every_field)
    [updated] = await _entries(cabinet, owner, "event=policy_rule.updated")

    assert reply.status == 200, reply.body
    assert updated["details"] == {"changes": {"rpm": {"before": 10, "after": 20}}}


async def test_a_rule_edit_that_changes_nothing_records_no_change(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    rule = await _rule(cabinet, owner, description="Same")

    await cabinet.call(
        "PATCH", f"/policy-rules/{rule['id']}", token=owner.token, json={"description": "Same"}
    )
    [updated] = await _entries(cabinet, owner, "event=policy_rule.updated")

    assert updated["details"] == {"changes": {}}


async def test_renaming_a_system_records_the_name_before_and_after(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner, "billing", description="Invoices")).body

    await cabinet.call(
        "PATCH",
        f"/systems/{system['id']}",
        token=owner.token,
        json={"name": "ledger", "description": "Invoices"},
    )
    [updated] = await _entries(cabinet, owner, "event=system.updated")

    assert updated["details"] == {"changes": {"name": {"before": "billing", "after": "ledger"}}}


# ---- names beside ids


async def test_entries_carry_the_names_of_the_key_system_rule_and_member_they_reference(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    system = (await cabinet.create_system(owner, "Payments")).body
    key = (await cabinet.create_key(owner, "checkout-key", systemId=system["id"])).body
    rule = await _rule(cabinet, owner, description="Checkout models")
    await record_many(
        cabinet.db,
        [
            NewAuditEntry(
                org_id,
                "content_policy.flagged",
                Actor("api_key", key["id"], None),
                2e9,
                target_id=rule["id"],
                key_id=key["id"],
                system_id=system["id"],
                route="chat_completions",
            )
        ],
    )

    [flagged] = await _entries(cabinet, owner, "event=content_policy.flagged")
    [created] = await _entries(cabinet, owner, "event=api_key.created")

    assert flagged["names"] == {
        key["id"]: "checkout-key",
        system["id"]: "Payments",
        rule["id"]: "Checkout models",
    }
    # The system is named in the details (`systemId`): ids among the details' values get names too.
    assert created["names"] == {
        key["id"]: "checkout-key",
        await cabinet.user_id(owner): owner.email,
        system["id"]: "Payments",
    }


async def test_an_id_of_another_organization_gets_no_name(cabinet: Cabinet) -> None:
    owner, stranger = await cabinet.register(), await cabinet.register()
    foreign_key = (await cabinet.create_key(stranger, "their-secret-project")).body
    org_id = await cabinet.organization_id(owner)
    await record_many(
        cabinet.db,
        [
            NewAuditEntry(
                org_id,
                "content_policy.flagged",
                Actor("api_key", foreign_key["id"], None),
                2e9,
                target_id=foreign_key["id"],
                key_id=foreign_key["id"],
            )
        ],
    )

    [entry] = await _entries(cabinet, owner, "event=content_policy.flagged")

    assert entry["keyId"] == foreign_key["id"]
    assert entry["names"] == {}


# ---- the route as the client wrote it


@pytest.fixture
async def routed(cabinet: Cabinet) -> Account:
    """An owner whose log holds req_0 on chat_completions, req_1 on messages, req_2 on responses_get and
    req_3 on responses_delete."""
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    routes = ["chat_completions", "messages", "responses_get", "responses_delete"]
    await record_many(cabinet.db, [_request_entry(org_id, n, route) for n, route in enumerate(routes)])
    return owner


@pytest.mark.parametrize(
    ("route", "request_ids"),
    [
        ("chat_completions", ["req_0"]),
        ("/v1/chat/completions", ["req_0"]),
        ("v1/chat/completions/", ["req_0"]),
        ("/chat/completions", ["req_0"]),
        ("POST /v1/chat/completions", ["req_0"]),
        ("https://gateway.example/v1/chat/completions", ["req_0"]),
        ("/v1/chat/completions?stream=true", ["req_0"]),
        ("/v1/messages", ["req_1"]),
        ("/v1/responses/resp_123", ["req_3", "req_2"]),
        ("DELETE /v1/responses/resp_123", ["req_3"]),
        ("delete /v1/responses/resp_123", ["req_3"]),
        ("GET /v1/messages", []),
        ("/v1/assistants", []),
    ],
)
async def test_the_route_filter_takes_a_route_name_or_the_path_a_client_calls(
    cabinet: Cabinet, routed: Account, route: str, request_ids: list[str]
) -> None:
    query = "route=" + route.replace("?", "%3F").replace("&", "%26").replace(" ", "%20")

    assert await _request_ids(cabinet, routed, query) == request_ids


# ---- date range and actor


@pytest.fixture
async def dated(cabinet: Cabinet) -> Account:
    """req_0 on 2026-03-01 00:00, req_1 on 2026-03-01 23:59:59, req_2 on 2026-03-02 12:00, req_3 on
    2026-03-05 12:00 (UTC)."""
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    times = [_at("2026-03-01", 0), _at("2026-03-02", 0) - 1, _at("2026-03-02"), _at("2026-03-05")]
    await record_many(
        cabinet.db, [_request_entry(org_id, n, "chat_completions", at=t - n) for n, t in enumerate(times)]
    )
    return owner


@pytest.mark.parametrize(
    ("query", "request_ids"),
    [
        ("from=2026-03-01&to=2026-03-01", ["req_1", "req_0"]),
        ("from=2026-03-02&to=2026-03-04", ["req_2"]),
        ("from=2026-03-02&event=content_policy.", ["req_3", "req_2"]),
        ("to=2026-03-01", ["req_1", "req_0"]),
        ("from=2026-03-06&to=2026-03-09", []),
    ],
)
async def test_from_and_to_keep_the_entries_of_those_utc_days(
    cabinet: Cabinet, dated: Account, query: str, request_ids: list[str]
) -> None:
    assert await _request_ids(cabinet, dated, query) == request_ids


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("from=2026-3-1", "from must be a date YYYY-MM-DD"),
        ("to=yesterday", "to must be a date YYYY-MM-DD"),
        ("from=2026-02-30", "from must be a date YYYY-MM-DD"),
        ("from=2026-03-05&to=2026-03-01", "from must not be after to"),
        ("format=xml", "format must be json or csv"),
    ],
)
async def test_a_bad_date_or_format_is_a_400_naming_it(
    cabinet: Cabinet, dated: Account, query: str, message: str
) -> None:
    reply = await cabinet.call("GET", f"/audit-log?{query}", token=dated.token)

    assert (reply.status, reply.body) == (400, {"error": message})


async def test_the_actor_filter_takes_a_members_email_in_any_case_or_an_actor_id(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    admin = await cabinet.add_member(owner, "admin")
    await cabinet.create_key(owner, "by-owner")
    await cabinet.create_key(admin, "by-admin")

    by_email = await _entries(cabinet, owner, f"event=api_key.created&actor={admin.email.upper()}")
    by_id = await _entries(cabinet, owner, f"event=api_key.created&actor={await cabinet.user_id(owner)}")

    assert [e["details"]["alias"] for e in by_email] == ["by-admin"]
    assert [e["details"]["alias"] for e in by_id] == ["by-owner"]


# ---- CSV


def _csv(raw: bytes) -> list[dict[str, str]]:
    text = raw.decode("utf-8")
    assert text.startswith("\ufeff")
    return list(csv.DictReader(io.StringIO(text[1:])))


async def test_the_csv_export_holds_every_matching_entry_with_names(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    keys = [(await cabinet.create_key(owner, f"csv-key-{n}")).body for n in range(3)]

    reply = await cabinet.call(
        "GET", "/audit-log?format=csv&event=api_key.created&limit=1", token=owner.token
    )
    rows = _csv(reply.raw)

    assert reply.status == 200
    assert reply.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert reply.headers["Content-Disposition"] == 'attachment; filename="audit-log.csv"'
    assert [(r["event"], r["targetId"], r["targetName"]) for r in rows] == [
        ("api_key.created", k["id"], k["alias"]) for k in reversed(keys)
    ]
    assert {r["actorEmail"] for r in rows} == {owner.email}


async def test_csv_cells_that_start_like_a_formula_are_neutralised(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    hostile = ['=HYPERLINK("http://x")', "+1", "-2", "@SUM(A1)"]
    await record_many(
        cabinet.db,
        [
            NewAuditEntry(
                org_id,
                "content_policy.flagged",
                Actor("api_key", None, None),
                2e9 + n,
                target_id=t,
                route="r",
            )
            for n, t in enumerate(hostile)
        ],
    )

    rows = _csv((await cabinet.call("GET", "/audit-log?format=csv&route=r", token=owner.token)).raw)

    assert [r["targetId"] for r in rows] == ["'" + t for t in reversed(hostile)]


async def test_the_csv_export_is_of_the_callers_organization_and_for_owners_and_admins(
    cabinet: Cabinet,
) -> None:
    owner, stranger = await cabinet.register(), await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    await cabinet.create_key(stranger, "not-yours")
    await cabinet.create_key(owner, "yours")

    rows = _csv((await cabinet.call("GET", "/audit-log?format=csv&event=api_key.", token=owner.token)).raw)
    refused = await cabinet.call("GET", "/audit-log?format=csv", token=member.token)

    assert [r["targetName"] for r in rows] == ["yours"]
    assert refused.status == 403


async def test_every_filter_reads_only_the_callers_organization(cabinet: Cabinet) -> None:
    owner, stranger = await cabinet.register(), await cabinet.register()
    stranger_org = await cabinet.organization_id(stranger)
    await record_many(cabinet.db, [_request_entry(stranger_org, 0, "chat_completions", at=_at("2026-03-01"))])

    found = await _request_ids(
        cabinet, owner, "route=/v1/chat/completions&from=2026-03-01&to=2026-03-01&actor=key_x&keyId=key_x"
    )
    theirs = await _request_ids(
        cabinet, stranger, "route=/v1/chat/completions&from=2026-03-01&to=2026-03-01&actor=key_x&keyId=key_x"
    )

    assert (found, theirs) == ([], ["req_0"])
