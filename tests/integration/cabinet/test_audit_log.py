"""GET /api/audit-log: newest first, in pages with a stable cursor, for owners and admins."""

from __future__ import annotations

from typing import Any

from tests.integration.cabinet.cabinet_client import Account, Cabinet


async def _all_pages(cabinet: Cabinet, account: Account, limit: int) -> list[list[dict[str, Any]]]:
    pages, cursor = [], None
    while True:
        query = f"/audit-log?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        reply = await cabinet.call("GET", query, token=account.token)
        assert reply.status == 200, reply.body
        pages.append(reply.body["entries"])
        cursor = reply.body["nextCursor"]
        if cursor is None:
            return pages


async def test_entries_come_newest_first_in_pages_that_cover_everything_once(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    for n in range(6):
        await cabinet.create_system(owner, f"system {n}")

    pages = await _all_pages(cabinet, owner, limit=3)
    entries = [e for page in pages for e in page]

    assert [len(p) for p in pages] == [3, 3, 1]
    assert [e["event"] for e in entries] == ["system.created"] * 6 + ["auth.registered"]
    assert [e["details"]["name"] for e in entries[:6]] == [f"system {n}" for n in reversed(range(6))]
    assert len({e["id"] for e in entries}) == 7


async def test_paging_is_stable_when_entries_share_a_timestamp(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    for n in range(5):
        await cabinet.create_system(owner, f"system {n}")
    await cabinet.db.execute("UPDATE audit_log SET created_at = 1700000000.25")

    entries = [e for page in await _all_pages(cabinet, owner, limit=2) for e in page]

    assert len(entries) == 6
    assert len({e["id"] for e in entries}) == 6


async def test_new_entries_do_not_shift_the_following_pages(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    for n in range(4):
        await cabinet.create_system(owner, f"before {n}")
    first = await cabinet.call("GET", "/audit-log?limit=2", token=owner.token)
    await cabinet.create_system(owner, "after")

    second = await cabinet.call(
        "GET", f"/audit-log?limit=10&cursor={first.body['nextCursor']}", token=owner.token
    )

    names = [e["details"].get("name") for e in first.body["entries"] + second.body["entries"]]
    assert names == ["before 3", "before 2", "before 1", "before 0", None]


async def test_an_entry_names_the_event_actor_target_and_time(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner, "crm")).body

    entry = (await cabinet.audit_events(owner))[0]

    assert set(entry) == {
        "id",
        "event",
        "actor",
        "targetId",
        "keyId",
        "systemId",
        "route",
        "details",
        "createdAt",
        "names",
    }
    assert entry["event"] == "system.created"
    assert entry["actor"] == {"type": "user", "id": await cabinet.user_id(owner), "email": owner.email}
    assert entry["targetId"] == system["id"]


async def test_members_cannot_read_the_audit_log(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")
    admin = await cabinet.add_member(owner, "admin")

    assert (await cabinet.call("GET", "/audit-log", token=member.token)).status == 403
    assert (await cabinet.call("GET", "/audit-log", token=admin.token)).status == 200


async def test_a_bad_limit_or_cursor_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    for query in ("limit=0", "limit=201", "limit=abc", "limit=-1", "limit=%C2%B2", "limit=" + "9" * 5000):
        reply = await cabinet.call("GET", f"/audit-log?{query}", token=owner.token)
        assert (reply.status, reply.body) == (400, {"error": "limit must be an integer from 1 to 200"}), query
    for cursor in ("garbage!", "bm90LWEtY3Vyc29y", "%F0%9F%99%82"):
        reply = await cabinet.call("GET", f"/audit-log?cursor={cursor}", token=owner.token)
        assert (reply.status, reply.body) == (400, {"error": "cursor is not valid"}), cursor
