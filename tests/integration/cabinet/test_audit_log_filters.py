"""GET /api/audit-log filtered by event (a name or a prefix), rule, key, system and route, paged with the
same cursor; entries the model API appends in batches (`record_many`) read like any other."""

from __future__ import annotations

from typing import Any

import pytest

from modelgate.domain.audit_log import Actor, NewAuditEntry, newest_entries, record, record_many
from tests.integration.cabinet.cabinet_client import Account, Cabinet

# Where a content-policy entry comes from unless a test says otherwise.
_PLACE = {"key_id": "key_a", "system_id": "sys_a", "target_id": "pol_a", "route": "chat.completions"}


def _content_entry(org_id: str, n: int, event: str = "content_policy.blocked", **place: str) -> NewAuditEntry:
    """A content-policy entry as the model API writes it, at time 1000 + n, for request req_<n>."""
    place = {**_PLACE, **place}
    return NewAuditEntry(
        organization_id=org_id,
        event=event,
        actor=Actor("api_key", place["key_id"], None),
        at=1000.0 + n,
        details={"where": "prompt", "label": "email", "requestId": f"req_{n}", "model": "gpt-4o"},
        **place,
    )


async def _filtered(cabinet: Cabinet, account: Account, query: str) -> list[dict[str, Any]]:
    reply = await cabinet.call("GET", f"/audit-log?{query}", token=account.token)
    assert reply.status == 200, reply.body
    return reply.body["entries"]


async def _request_ids(cabinet: Cabinet, account: Account, query: str) -> list[str]:
    return [e["details"]["requestId"] for e in await _filtered(cabinet, account, query)]


@pytest.fixture
async def owner(cabinet: Cabinet) -> Account:
    """An organization's owner with six content-policy entries beside its registration entry:
    req_0 blocked (key_a, pol_a), req_1 redacted (key_b, system sys_b, pol_b), req_2 flagged (route
    messages), req_3 blocked (key_b), req_4 redacted, req_5 blocked."""
    account = await cabinet.register()
    org_id = await cabinet.organization_id(account)
    await record_many(
        cabinet.db,
        [
            _content_entry(org_id, 0),
            _content_entry(
                org_id, 1, "content_policy.redacted", key_id="key_b", system_id="sys_b", target_id="pol_b"
            ),
            _content_entry(org_id, 2, "content_policy.flagged", route="messages"),
            _content_entry(org_id, 3, key_id="key_b"),
            _content_entry(org_id, 4, "content_policy.redacted"),
            _content_entry(org_id, 5),
        ],
    )
    return account


async def test_entries_written_in_a_batch_read_with_their_key_system_and_route(
    cabinet: Cabinet, owner: Account
) -> None:
    newest = (await _filtered(cabinet, owner, "event=content_policy.blocked&limit=1"))[0]

    assert {k: v for k, v in newest.items() if k not in ("id", "createdAt")} == {
        "event": "content_policy.blocked",
        "actor": {"type": "api_key", "id": "key_a", "email": None},
        "targetId": "pol_a",
        "keyId": "key_a",
        "systemId": "sys_a",
        "route": "chat.completions",
        "details": {"where": "prompt", "label": "email", "requestId": "req_5", "model": "gpt-4o"},
        "names": {},  # none of the objects it references exists
    }
    assert newest["id"].startswith("aud_")


async def test_an_entry_of_the_cabinet_has_no_key_system_or_route(cabinet: Cabinet, owner: Account) -> None:
    [registered] = await _filtered(cabinet, owner, "event=auth.registered")

    assert (registered["keyId"], registered["systemId"], registered["route"]) == (None, None, None)


@pytest.mark.parametrize(
    ("query", "request_ids"),
    [
        ("event=content_policy.blocked", ["req_5", "req_3", "req_0"]),
        ("event=content_policy.", ["req_5", "req_4", "req_3", "req_2", "req_1", "req_0"]),
        ("ruleId=pol_b", ["req_1"]),
        ("keyId=key_b", ["req_3", "req_1"]),
        ("systemId=sys_b", ["req_1"]),
        ("route=messages", ["req_2"]),
        ("event=content_policy.redacted&keyId=key_a", ["req_4"]),
        ("event=content_policy.blocked&keyId=key_b&ruleId=pol_a&route=chat.completions", ["req_3"]),
        ("keyId=key_c", []),
        ("event=content_policy", []),
        ("event=content_policy.block", []),
        ("event=", [None, "req_5", "req_4", "req_3", "req_2", "req_1", "req_0"]),
    ],
)
async def test_each_filter_keeps_only_the_entries_that_match_it(
    cabinet: Cabinet, owner: Account, query: str, request_ids: list[str | None]
) -> None:
    entries = await _filtered(cabinet, owner, query)

    assert [e["details"].get("requestId") for e in entries] == request_ids


async def test_an_event_prefix_is_taken_literally_not_as_a_pattern(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    await record_many(
        cabinet.db,
        [
            _content_entry(org_id, 0, "contentXpolicy.blocked"),
            _content_entry(org_id, 1, "CONTENT_POLICY.blocked"),
        ],
    )

    assert await _filtered(cabinet, owner, "event=content_policy.") == []
    assert await _filtered(cabinet, owner, "event=content%25") == []


async def test_filtered_pages_cover_every_matching_entry_once(cabinet: Cabinet, owner: Account) -> None:
    pages, cursor = [], None
    while True:
        query = "event=content_policy.&keyId=key_a&limit=2" + (f"&cursor={cursor}" if cursor else "")
        reply = await cabinet.call("GET", f"/audit-log?{query}", token=owner.token)
        pages.append([e["details"]["requestId"] for e in reply.body["entries"]])
        cursor = reply.body["nextCursor"]
        if cursor is None:
            break

    assert pages == [["req_5", "req_4"], ["req_2", "req_0"]]


async def test_a_cursor_of_a_filtered_page_stays_valid_as_entries_are_added(
    cabinet: Cabinet, owner: Account
) -> None:
    first = await cabinet.call("GET", "/audit-log?keyId=key_b&limit=1", token=owner.token)
    org_id = await cabinet.organization_id(owner)
    await record_many(cabinet.db, [_content_entry(org_id, 9, key_id="key_b")])

    second = await _request_ids(cabinet, owner, f"keyId=key_b&cursor={first.body['nextCursor']}")

    assert [e["details"]["requestId"] for e in first.body["entries"]] == ["req_3"]
    assert second == ["req_1"]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("event=" + "e" * 201, "event must be at most 200 printable characters"),
        ("ruleId=pol%0Aa", "ruleId must be at most 200 printable characters"),
        ("keyId=key%09a", "keyId must be at most 200 printable characters"),
        ("systemId=" + "s" * 201, "systemId must be at most 200 printable characters"),
        ("route=chat%1Bcompletions", "route must be at most 200 printable characters"),
        ("keyId=key%00a", None),
        ("route=%FF", None),
    ],
)
async def test_a_bad_filter_value_is_400(
    cabinet: Cabinet, owner: Account, query: str, error: str | None
) -> None:
    reply = await cabinet.call("GET", f"/audit-log?{query}", token=owner.token)

    assert reply.status == 400
    if error is not None:
        assert reply.body == {"error": error}


async def test_filters_never_reach_another_organizations_entries(cabinet: Cabinet, owner: Account) -> None:
    stranger = await cabinet.register()

    assert await _filtered(cabinet, stranger, "event=content_policy.") == []
    assert await _filtered(cabinet, stranger, "keyId=key_a") == []
    assert await _filtered(cabinet, stranger, "ruleId=pol_a&route=chat.completions") == []


async def test_members_cannot_read_the_filtered_audit_log(cabinet: Cabinet, owner: Account) -> None:
    member = await cabinet.add_member(owner, "member")

    reply = await cabinet.call("GET", "/audit-log?event=content_policy.", token=member.token)

    assert reply.status == 403


async def test_record_names_the_key_system_and_route_it_is_given(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    async with cabinet.db.transaction() as tx:
        await record(
            tx,
            org_id,
            "content_policy.flagged",
            Actor("api_key", "key_z", None),
            2000.0,
            target_id="pol_z",
            key_id="key_z",
            system_id="sys_z",
            route="responses",
        )

    [entry] = await _filtered(cabinet, owner, "route=responses")

    assert (entry["targetId"], entry["keyId"], entry["systemId"]) == ("pol_z", "key_z", "sys_z")


async def test_record_many_of_nothing_writes_nothing(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    await record_many(cabinet.db, [])

    assert [e.event for e in await newest_entries(cabinet.db, org_id, 10, None)] == ["auth.registered"]


async def test_record_many_writes_a_batch_larger_than_one_statement_in_a_transaction(
    cabinet: Cabinet,
) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    async with cabinet.db.transaction() as tx:
        await record_many(tx, [_content_entry(org_id, n, key_id="key_many") for n in range(2500)])

    count = await cabinet.db.fetchval("SELECT COUNT(*) FROM audit_log WHERE key_id = 'key_many'")
    assert count == 2500
