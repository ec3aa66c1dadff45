"""GET /api/usage: the organization's ledger summed by day, model, key or system over whole UTC days."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.billing_cabinet.billing_client import BillingCabinet, insert_usage


def at(day: str, hour: int = 12, minute: int = 0, second: float = 0) -> float:
    """Epoch seconds of a UTC moment on `day`."""
    moment = datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(hours=hour, minutes=minute)
    return moment.timestamp() + second


ZERO = {"requests": 0, "served": 0, "refused": 0, "errors": 0, "inputTokens": 0, "cachedInputTokens": 0,
        "outputTokens": 0, "costMicros": 0}  # fmt: skip


async def test_usage_by_day_lists_every_day_of_the_range_with_its_sums(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    await insert_usage(
        cabinet.db, org, at("2025-03-01", 0, 0), input_tokens=10, output_tokens=5, cost_micros=7
    )
    await insert_usage(
        cabinet.db, org, at("2025-03-01", 23, 59, 59.5), input_tokens=1, cached_input_tokens=1, cost_micros=3
    )
    await insert_usage(cabinet.db, org, at("2025-03-03", 8), output_tokens=100, cost_micros=90)

    reply = await cabinet.call("GET", "/usage?from=2025-03-01&to=2025-03-03", token=owner.token)

    assert reply.status == 200
    assert (reply.body["from"], reply.body["to"], reply.body["groupBy"], reply.body["currency"]) == (
        "2025-03-01",
        "2025-03-03",
        "day",
        "USD",
    )
    assert reply.body["rows"] == [
        {"day": "2025-03-01", "requests": 2, "served": 2, "refused": 0, "errors": 0, "inputTokens": 11,
         "cachedInputTokens": 1, "outputTokens": 5, "costMicros": 10},
        {"day": "2025-03-02", **ZERO},
        {"day": "2025-03-03", "requests": 1, "served": 1, "refused": 0, "errors": 0, "inputTokens": 0,
         "cachedInputTokens": 0, "outputTokens": 100, "costMicros": 90},
    ]  # fmt: skip
    assert reply.body["totals"] == {
        "requests": 3,
        "served": 3,
        "refused": 0,
        "errors": 0,
        "inputTokens": 11,
        "cachedInputTokens": 1,
        "outputTokens": 105,
        "costMicros": 100,
    }


async def test_the_range_is_whole_utc_days_with_to_inclusive(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    await insert_usage(cabinet.db, org, at("2025-03-01", 0, 0, -0.001), cost_micros=1)  # the day before
    await insert_usage(cabinet.db, org, at("2025-03-01", 0, 0), cost_micros=10)
    await insert_usage(cabinet.db, org, at("2025-03-02", 23, 59, 59.999), cost_micros=100)
    await insert_usage(cabinet.db, org, at("2025-03-03", 0, 0), cost_micros=1000)  # the day after

    reply = await cabinet.call("GET", "/usage?from=2025-03-01&to=2025-03-02", token=owner.token)

    assert [(r["day"], r["costMicros"]) for r in reply.body["rows"]] == [
        ("2025-03-01", 10),
        ("2025-03-02", 100),
    ]
    assert reply.body["totals"]["costMicros"] == 110


async def test_usage_by_model_key_and_system_is_costliest_first(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    system = (await cabinet.create_system(owner)).body["id"]
    key_a = (await cabinet.create_key(owner, systemId=system)).body["id"]
    key_b = (await cabinet.create_key(owner)).body["id"]
    day = "2025-04-10"
    await insert_usage(
        cabinet.db, org, at(day), model="gpt-4o", key_id=key_a, system_id=system, cost_micros=5
    )
    await insert_usage(cabinet.db, org, at(day), model="gpt-4o", key_id=key_b, cost_micros=5)
    await insert_usage(
        cabinet.db, org, at(day), model="claude-3", key_id=key_a, system_id=system, cost_micros=50
    )

    async def grouped(group_by: str) -> list[tuple[object, int, int]]:
        reply = await cabinet.call("GET", f"/usage?from={day}&to={day}&groupBy={group_by}", token=owner.token)
        assert reply.status == 200, reply.body
        name = {"model": "model", "key": "keyId", "system": "systemId"}[group_by]
        return [(row[name], row["requests"], row["costMicros"]) for row in reply.body["rows"]]

    assert await grouped("model") == [("claude-3", 1, 50), ("gpt-4o", 2, 10)]
    assert await grouped("key") == [(key_a, 2, 55), (key_b, 1, 5)]
    assert await grouped("system") == [(system, 2, 55), (None, 1, 5)]


async def test_then_splits_each_row_by_a_second_grouping_in_one_report(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    key = (await cabinet.create_key(owner)).body["id"]
    await insert_usage(cabinet.db, org, at("2025-05-01", 1), model="gpt-4o", key_id=key, cost_micros=5)
    await insert_usage(cabinet.db, org, at("2025-05-01", 2), model="claude-3", cost_micros=50)
    await insert_usage(cabinet.db, org, at("2025-05-01", 3), model="gpt-4o", cost_micros=6)
    await insert_usage(cabinet.db, org, at("2025-05-03", 4), model="gpt-4o", key_id=key, cost_micros=1)

    reply = await cabinet.call("GET", "/usage?from=2025-05-01&to=2025-05-03&then=model", token=owner.token)

    assert reply.status == 200, reply.body
    split = [
        (r["day"], [(p["model"], p["requests"], p["costMicros"]) for p in r["breakdown"]])
        for r in reply.body["rows"]
    ]
    assert split == [
        ("2025-05-01", [("claude-3", 1, 50), ("gpt-4o", 2, 11)]),
        ("2025-05-02", []),
        ("2025-05-03", [("gpt-4o", 1, 1)]),
    ]  # fmt: skip
    by_model = await cabinet.call(
        "GET", "/usage?from=2025-05-01&to=2025-05-03&groupBy=model&then=key", token=owner.token
    )
    split = [
        (r["model"], [(p["keyId"], p["requests"], p["costMicros"]) for p in r["breakdown"]])
        for r in by_model.body["rows"]
    ]
    assert split == [
        ("claude-3", [(None, 1, 50)]),
        ("gpt-4o", [(key, 2, 6), (None, 1, 6)]),  # equal cost: more requests first
    ]  # fmt: skip
    plain = await cabinet.call("GET", "/usage?from=2025-05-01&to=2025-05-03", token=owner.token)
    assert all("breakdown" not in row for row in plain.body["rows"])


async def test_by_default_the_last_30_days_are_reported_by_day(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org = await cabinet.organization_id(owner)
    today = datetime.now(UTC).date()
    await insert_usage(cabinet.db, org, datetime.now(UTC).timestamp(), cost_micros=4)
    await insert_usage(cabinet.db, org, at((today - timedelta(days=30)).isoformat()), cost_micros=400)

    reply = await cabinet.call("GET", "/usage", token=owner.token)

    assert (reply.body["from"], reply.body["to"]) == (
        (today - timedelta(days=29)).isoformat(),
        today.isoformat(),
    )
    assert len(reply.body["rows"]) == 30
    assert reply.body["rows"][-1]["costMicros"] == 4
    assert reply.body["totals"]["costMicros"] == 4


async def test_invalid_queries_are_400(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()

    cases = [
        ("from=2025-13-01", "from must be a date YYYY-MM-DD"),
        ("from=2025-02-30", "from must be a date YYYY-MM-DD"),
        ("to=yesterday", "to must be a date YYYY-MM-DD"),
        ("to=2025-1-5", "to must be a date YYYY-MM-DD"),
        ("from=%EF%BC%92025-01-01", "from must be a date YYYY-MM-DD"),
        ("from=1969-12-31&to=1970-01-01", "from must be between 1970-01-01 and 9998-12-31"),
        ("to=9999-12-31", "to must be between 1970-01-01 and 9998-12-31"),
        ("from=2025-03-02&to=2025-03-01", "from must not be after to"),
        ("from=2024-01-01&to=2025-01-01", "the range from..to may span at most 366 days"),
        ("groupBy=week", "groupBy must be one of: day, model, key, system"),
        ("group_by=model", "unknown query parameter: group_by"),
        ("from=2025-01-01&from=2025-01-02", "from may be given only once"),
        ("then=day", "then must be one of: model, key, system"),
        ("groupBy=model&then=model", "then must be one of: key, system"),
    ]
    for query, message in cases:
        reply = await cabinet.call("GET", f"/usage?{query}", token=owner.token)

        assert reply.status == 400, (query, reply.body)
        assert reply.body["error"].startswith(message), (query, reply.body)


async def test_a_leap_year_fits_in_the_longest_range(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call("GET", "/usage?from=2024-01-01&to=2024-12-31", token=owner.token)

    assert reply.status == 200
    assert len(reply.body["rows"]) == 366


async def test_an_organization_never_sees_another_organizations_usage(cabinet: BillingCabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    alices_org, bobs_org = await cabinet.organization_id(alice), await cabinet.organization_id(bob)
    bobs_key = (await cabinet.create_key(bob)).body["id"]
    await insert_usage(cabinet.db, alices_org, at("2025-05-05"), model="mine", cost_micros=1)
    await insert_usage(
        cabinet.db, bobs_org, at("2025-05-05"), model="theirs", key_id=bobs_key, cost_micros=99
    )

    for group_by in ("day", "model", "key", "system"):
        reply = await cabinet.call(
            "GET", f"/usage?from=2025-05-05&to=2025-05-05&groupBy={group_by}", token=alice.token
        )

        assert reply.body["totals"]["costMicros"] == 1, group_by
        assert "theirs" not in str(reply.body) and bobs_key not in str(reply.body)


async def test_every_role_reads_usage_but_only_with_a_bearer_token(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")

    assert (await cabinet.call("GET", "/usage", token=member.token)).status == 200
    assert (await cabinet.call("GET", "/usage")).status == 401


async def test_usage_of_a_range_without_ledger_rows_is_zero(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()

    by_day = await cabinet.call("GET", "/usage?from=2025-01-01&to=2025-01-02", token=owner.token)
    by_model = await cabinet.call(
        "GET", "/usage?from=2025-01-01&to=2025-01-02&groupBy=model", token=owner.token
    )

    assert by_day.body["rows"] == [{"day": "2025-01-01", **ZERO}, {"day": "2025-01-02", **ZERO}]
    assert (by_model.body["rows"], by_model.body["totals"]) == ([], ZERO)
