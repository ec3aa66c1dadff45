"""GET /api/requests, /api/requests/{id} and /api/requests.csv: the organization's ledger rows one by one,
filtered, paged by cursor and exported, on both storage backends."""

from __future__ import annotations

import csv
import io
import itertools
import os
from datetime import UTC, datetime
from urllib.parse import quote

import pytest

from modelgate.domain.usage_days import UsageDays
from modelgate.storage import Database
from tests.integration.billing_cabinet.billing_client import BillingCabinet

_numbers = itertools.count(1)
MOMENT = "must be a date YYYY-MM-DD or a time like 2025-03-01T12:00:00Z, from 1970 on"
DAY = "2025-06-10"


def at(hour: int, minute: int = 0, second: float = 0, day: str = DAY) -> float:
    """Epoch seconds of a UTC moment on `day`."""
    return datetime.fromisoformat(f"{day}T00:00:00+00:00").timestamp() + hour * 3600 + minute * 60 + second


async def add_row(
    db: Database,
    organization_id: str,
    created_at: float,
    *,
    admitted_at: float | None = None,
    key_id: str | None = None,
    system_id: str | None = None,
    model: str = "gpt-4o",
    row_key: str | None = "openai/gpt-4o-2024@api.openai.com",
    status: int = 200,
    outcome: str = "completed",
    input_tokens: int = 10,
    cached_input_tokens: int = 0,
    output_tokens: int = 20,
    cost_micros: int = 300,
    content_action: str = "",
    estimated: bool = False,
    usage_detail: str | None = None,
) -> str:
    """One ledger row as the model API's metering writes it (its id as `LedgerWriter.new_row_id` makes it);
    returns the id."""
    started = admitted_at if admitted_at is not None else created_at
    row_id = f"led_{int(started * 1000):011x}{os.urandom(8).hex()}{next(_numbers):08x}"
    async with db.transaction() as tx:  # as the ledger's flush writes a row: with its share of the daily sums
        await tx.execute(
            "INSERT INTO usage_ledger (id, organization_id, key_id, system_id, model, row_key, request_id,"
            " status, input_tokens, cached_input_tokens, output_tokens, units, cost_micros, created_at,"
            " outcome, content_action, usage_estimated, usage_detail)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
            row_id,
            organization_id,
            key_id,
            system_id,
            model,
            row_key,
            f"req-{next(_numbers)}",
            status,
            input_tokens,
            cached_input_tokens,
            output_tokens,
            0.0,
            cost_micros,
            created_at,
            outcome,
            content_action,
            estimated,
            usage_detail,
        )
        days = UsageDays()
        tokens = (input_tokens, cached_input_tokens, output_tokens)
        days.add(organization_id, created_at, model, key_id, system_id, status, tokens, cost_micros)
        await days.write(tx)
    return row_id


async def test_a_request_lists_every_column_the_ledger_keeps(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    system = (await cabinet.create_system(owner)).body["id"]
    key = (await cabinet.create_key(owner, systemId=system)).body["id"]
    row_id = await add_row(
        cabinet.db,
        org,
        at(12, 0, 1.25),
        admitted_at=at(12, 0, 0.5),
        key_id=key,
        system_id=system,
        input_tokens=120,
        cached_input_tokens=100,
        output_tokens=7,
        cost_micros=1234,
        content_action="redacted",
        estimated=True,
        usage_detail='{"reasoning_tokens": 3}',
    )

    reply = await cabinet.call("GET", "/requests", token=owner.token)

    assert reply.status == 200, reply.body
    assert reply.body["currency"] == "USD"
    assert reply.body["nextCursor"] is None
    [listed] = reply.body["requests"]
    assert listed == {
        "id": row_id,
        "createdAt": "2025-06-10T12:00:01.250Z",
        "requestId": listed["requestId"],
        "keyId": key,
        "systemId": system,
        "model": "gpt-4o",
        "provider": "openai",
        "row": "openai/gpt-4o-2024@api.openai.com",
        "status": 200,
        "outcome": "completed",
        "refused": False,
        "inputTokens": 120,
        "cachedInputTokens": 100,
        "outputTokens": 7,
        "costMicros": 1234,
        "latencyMs": 750,
        "contentAction": "redacted",
        "estimated": True,
    }
    detail = await cabinet.call("GET", f"/requests/{row_id}", token=owner.token)
    assert detail.status == 200, detail.body
    assert {k: detail.body[k] for k in listed} == listed
    assert detail.body["usageDetail"] == {"reasoning_tokens": 3}
    assert (detail.body["overReservationMicros"], detail.body["usageImplausible"]) == (0, False)


async def test_each_filter_keeps_only_the_rows_it_names(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    system = (await cabinet.create_system(owner)).body["id"]
    key_a = (await cabinet.create_key(owner, systemId=system)).body["id"]
    key_b = (await cabinet.create_key(owner)).body["id"]
    db = cabinet.db
    served = await add_row(db, org, at(9), key_id=key_a, system_id=system, model="gpt-4o")
    refused = await add_row(
        db, org, at(10), key_id=key_b, model="gpt-4o", status=429, outcome="refused", cost_micros=0
    )
    claude = await add_row(
        db, org, at(11), key_id=key_b, model="claude-3", status=502, outcome="upstream_error"
    )
    yesterday = await add_row(db, org, at(23, day="2025-06-09"), key_id=key_a, system_id=system)

    async def ids(query: str) -> list[str]:
        reply = await cabinet.call("GET", f"/requests?{query}", token=owner.token)
        assert reply.status == 200, reply.body
        return [row["id"] for row in reply.body["requests"]]

    assert await ids("") == [claude, refused, served, yesterday]
    assert await ids(f"keyId={key_a}") == [served, yesterday]
    assert await ids(f"systemId={system}") == [served, yesterday]
    assert await ids("model=claude-3") == [claude]
    assert await ids("status=429") == [refused]
    assert await ids("outcome=upstream_error") == [claude]
    assert await ids(f"from={DAY}") == [claude, refused, served]
    assert await ids("to=2025-06-09") == [yesterday]
    assert await ids(f"from={quote('2025-06-10T09:30:00Z')}&to={quote('2025-06-10T11:00:00+00:00')}") == [
        refused
    ]
    assert await ids(f"keyId={key_b}&model=gpt-4o&from={DAY}&to={DAY}") == [refused]
    assert await ids("model=mistral") == []


async def test_cursor_pages_hold_every_row_once_newest_first_even_with_equal_times(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    written = []
    for n in range(23):
        # Pairs of rows share a time: the cursor must break the tie by id.
        written.append((at(8, n // 2), await add_row(cabinet.db, org, at(8, n // 2))))
    expected = [row_id for _, row_id in sorted(written, reverse=True)]

    seen: list[str] = []
    cursor = ""
    pages = 0
    while True:
        reply = await cabinet.call("GET", f"/requests?limit=5&cursor={cursor}", token=owner.token)
        assert reply.status == 200, reply.body
        seen += [row["id"] for row in reply.body["requests"]]
        pages += 1
        cursor = reply.body["nextCursor"]
        if cursor is None:
            break
        # A row that arrives while paging is newer than every cursor: it never shifts the pages after it.
        await add_row(cabinet.db, org, at(20, pages))

    assert pages == 5
    assert seen == expected


async def test_cursor_pages_keep_their_filter(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    refused = [await add_row(cabinet.db, org, at(7, n), status=402, outcome="refused") for n in range(5)]
    for n in range(5):
        await add_row(cabinet.db, org, at(7, n, 30))

    first = await cabinet.call("GET", "/requests?status=402&limit=3", token=owner.token)
    rest = await cabinet.call(
        "GET", f"/requests?status=402&limit=3&cursor={first.body['nextCursor']}", token=owner.token
    )

    assert [r["id"] for r in first.body["requests"] + rest.body["requests"]] == refused[::-1]
    assert rest.body["nextCursor"] is None


async def test_another_organizations_rows_never_appear(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    other = await cabinet.register()
    mine = await add_row(cabinet.db, await cabinet.organization_id(owner), at(12))
    theirs_org = await cabinet.organization_id(other)
    theirs_key = (await cabinet.create_key(other)).body["id"]
    theirs = await add_row(cabinet.db, theirs_org, at(13), key_id=theirs_key, model="secret-model")

    listed = await cabinet.call("GET", "/requests", token=owner.token)
    by_key = await cabinet.call("GET", f"/requests?keyId={theirs_key}", token=owner.token)
    by_model = await cabinet.call("GET", "/requests?model=secret-model", token=owner.token)
    detail = await cabinet.call("GET", f"/requests/{theirs}", token=owner.token)
    exported = await cabinet.call("GET", "/requests.csv", token=owner.token)

    assert [r["id"] for r in listed.body["requests"]] == [mine]
    assert (by_key.body["requests"], by_model.body["requests"]) == ([], [])
    assert detail.status == 404 and detail.body == {"error": "request not found"}
    assert theirs.encode() not in exported.raw and mine.encode() in exported.raw


async def test_a_member_reads_the_request_log(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, role="member")
    row_id = await add_row(cabinet.db, await cabinet.organization_id(owner), at(12))
    reply = await cabinet.call("GET", "/requests", token=member.token)
    assert [r["id"] for r in reply.body["requests"]] == [row_id]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=abc", "status must be an HTTP status from 100 to 599"),
        ("status=999", "status must be an HTTP status from 100 to 599"),
        ("from=2025-02-30", f"from {MOMENT}"),
        ("to=yesterday", f"to {MOMENT}"),
        ("from=2025-06-10&to=2025-06-09", "from must be before to"),
        ("keyId=not%20an%20id", "keyId is not an id"),
        ("systemId=sys_XYZ", "systemId is not an id"),
        ("outcome=Robert%27);", "outcome must be a word such as " + ", ".join(
            ("completed", "refused", "blocked", "client_closed", "upstream_error", "shutdown", "crashed"))),
        ("limit=0", "limit must be an integer from 1 to 200"),
        ("limit=201", "limit must be an integer from 1 to 200"),
        ("cursor=%21%21", "cursor is not valid"),
        ("cursor=bmFufGxlZF8x", "cursor is not valid"),
        ("model=" + "m" * 201, "model must be at most 200 printable characters"),
        ("colour=red", "unknown query parameter: colour; use from, to, keyId, systemId, model, status,"
                       " outcome, limit, cursor"),
        ("status=200&status=429", "status may be given only once"),
    ],
)  # fmt: skip
async def test_a_bad_filter_is_a_400_naming_it(cabinet: BillingCabinet, query: str, message: str) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call("GET", f"/requests?{query}", token=owner.token)

    assert (reply.status, reply.body) == (400, {"error": message})


async def test_the_csv_export_paging_and_filters_and_formula_cells(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    key = (await cabinet.create_key(owner, alias='=HYPERLINK("http://evil")')).body["id"]
    for n in range(1205):  # more than one page of the export's reads
        await add_row(cabinet.db, org, at(6, second=n), key_id=key if n % 2 else None, cost_micros=n)
    await add_row(
        cabinet.db, org, at(6, second=2000), model="-2+3", key_id=key, status=429, outcome="refused"
    )

    reply = await cabinet.call("GET", "/requests.csv", token=owner.token)
    filtered = await cabinet.call("GET", "/requests.csv?status=429", token=owner.token)
    bad = await cabinet.call("GET", "/requests.csv?limit=5", token=owner.token)

    assert reply.status == 200
    assert reply.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert "attachment" in reply.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(reply.raw.decode())))
    assert len(rows) == 1206
    assert rows[0]["model"] == "'-2+3"
    assert rows[0]["key_alias"] == '\'=HYPERLINK("http://evil")'
    assert (rows[0]["status"], rows[0]["outcome"], rows[0]["cost_usd"]) == ("429", "refused", "0.000300")
    assert rows[1]["cost_usd"] == "0.001204" and rows[-1]["cost_usd"] == "0.000000"
    assert [r["time"] for r in rows] == sorted((r["time"] for r in rows), reverse=True)
    assert len({r["id"] for r in rows}) == 1206
    assert [r["id"] for r in csv.DictReader(io.StringIO(filtered.raw.decode()))] == [rows[0]["id"]]
    assert (bad.status, bad.body) == (
        400,
        {"error": "unknown query parameter: limit; use from, to, keyId, systemId, model, status, outcome"},
    )


async def test_an_unknown_request_id_is_404(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()

    unknown = await cabinet.call("GET", "/requests/led_0123456789abcdef", token=owner.token)
    not_an_id = await cabinet.call("GET", "/requests/..%2Fetc", token=owner.token)

    assert (unknown.status, unknown.body) == (404, {"error": "request not found"})
    assert not_an_id.status == 404


async def test_usage_and_the_overview_count_refused_and_failed_requests_apart(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    key = (await cabinet.create_key(owner)).body["id"]
    now = datetime.now(UTC).timestamp()
    today = datetime.now(UTC).date().isoformat()
    await add_row(cabinet.db, org, now - 1, key_id=key, cost_micros=5)
    for status in (402, 403, 429, 429):
        await add_row(cabinet.db, org, now - 1, key_id=key, status=status, outcome="refused", cost_micros=0)
    await add_row(cabinet.db, org, now - 1, status=502, outcome="upstream_error", cost_micros=0)
    await add_row(cabinet.db, org, now - 1, model="claude-3", status=0, outcome="crashed", cost_micros=7)

    usage = await cabinet.call("GET", f"/usage?from={today}&to={today}", token=owner.token)
    of_key = await cabinet.call("GET", f"/usage?from={today}&to={today}&keyId={key}", token=owner.token)
    of_model = await cabinet.call("GET", f"/usage?from={today}&to={today}&model=claude-3", token=owner.token)
    overview = await cabinet.call("GET", "/overview", token=owner.token)

    totals = usage.body["totals"]
    assert (totals["requests"], totals["served"], totals["refused"], totals["errors"]) == (7, 3, 4, 2)
    assert {k: of_key.body["totals"][k] for k in ("requests", "served", "refused", "errors")} == {
        "requests": 5,
        "served": 1,
        "refused": 4,
        "errors": 0,
    }
    assert (of_model.body["totals"]["requests"], of_model.body["totals"]["costMicros"]) == (1, 7)
    month = overview.body["billing"]["usage"]
    assert (month["requests"], month["served"], month["refused"], month["errors"]) == (7, 3, 4, 2)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("keyId=key%20one", "keyId is not an id"),
        ("model=" + "m" * 201, "model must be at most 200 printable characters"),
    ],
)
async def test_a_bad_usage_filter_is_a_400(cabinet: BillingCabinet, query: str, message: str) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call("GET", f"/usage?{query}", token=owner.token)

    assert (reply.status, reply.body) == (400, {"error": message})
