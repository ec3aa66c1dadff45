"""Shortcuts of the metering hot path give what the general forms give: the crash row's prompt cost, the
SQLite binding of None and bools, and SQLite's executemany of a plain INSERT (in blocks of rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.config.schema import TokenPriceConfig
from modelgate.domain.prices import ModelPrices, TokenRates
from modelgate.domain.usage import Usage
from modelgate.storage import IntegrityViolation, open_database

PRICES = [
    ModelPrices(2.0, 1.0, 10.0, 0, 1000),
    ModelPrices(0.15, 0.075, 0.6, 0, 1000),  # fractions of a micro-unit per token
    ModelPrices(3, 0, 15, 250, 1000),  # whole numbers from the config, and a per-request price
    ModelPrices(0.1, 0.0, 0.0, 0, 1000, per_image=40_000, per_audio_second=100.0),
]


@pytest.mark.parametrize("prices", PRICES)
def test_a_prompt_cost_is_the_cost_of_a_usage_of_that_prompt_alone(prices: ModelPrices) -> None:
    for input_tokens in [*range(0, 2000), 12_345, 999_999, 10**9 + 7]:
        assert prices.prompt_cost(input_tokens) == prices.cost(Usage(input_tokens=input_tokens))


def test_a_kind_a_tier_leaves_out_is_derived_from_the_tier_unless_the_sheet_names_it() -> None:
    # Gemini 2.5 Pro: 1.25 / 10 per million tokens, above 200K prompt tokens 2.5 / 15; thinking tokens are
    # output tokens, billed at the tier's output rate.
    sheet = TokenPriceConfig(input_per_mtok=1.25, cached_input_per_mtok=0.31, output_per_mtok=10.0)
    tier = TokenRates.of(TokenPriceConfig(input_per_mtok=2.5, output_per_mtok=15.0), sheet)
    assert (tier.reasoning, tier.output_audio, tier.output_image) == (15.0, 15.0, 15.0)
    assert (tier.cache_write_5m, tier.input_audio) == (2.5, 2.5)
    assert tier.cached_input == 0.31  # the sheet names it: the tier keeps it
    usage = Usage(input_tokens=0, output_tokens=1_000, reasoning_tokens=800)
    assert tier.tokens_cost(usage) == 1_000 * 15.0  # micro-units: USD per million tokens = µ per token
    named = TokenPriceConfig(input_per_mtok=1.25, output_per_mtok=10.0, reasoning_per_mtok=12.0)
    assert TokenRates.of(TokenPriceConfig(input_per_mtok=2.5, output_per_mtok=15.0), named).reasoning == 12.0


async def test_sqlite_stores_none_as_null_and_a_bool_as_the_integer_it_stored_before(tmp_path: Path) -> None:
    db = await open_database(f"sqlite:///{tmp_path / 'binding.db'}")
    try:
        await db.execute("CREATE TABLE t (n TEXT, yes BOOLEAN NOT NULL, no BOOLEAN NOT NULL)")
        async with db.transaction() as tx:
            await tx.executemany("INSERT INTO t (n, yes, no) VALUES ($1, $2, $3)", [(None, True, False)])
        await db.execute("INSERT INTO t (n, yes, no) VALUES ($1, $2, $3)", None, True, False)

        rows = await db.fetch("SELECT typeof(n) AS n, typeof(yes) AS y, yes, no FROM t")
    finally:
        await db.close()
    assert rows == [{"n": "null", "y": "integer", "yes": 1, "no": 0}] * 2


@pytest.mark.parametrize("count", [0, 1, 49, 50, 51, 100, 137])
async def test_sqlite_executemany_of_a_plain_insert_stores_every_row_as_given(
    tmp_path: Path, count: int
) -> None:
    db = await open_database(f"sqlite:///{tmp_path / 'many.db'}")
    rows = [(f"id{n:04d}", n, n / 3, None if n % 2 else f"text {n}", n % 3 == 0) for n in range(count)]
    try:
        await db.execute("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER, x REAL, s TEXT, b BOOLEAN)")
        async with db.transaction() as tx:
            await tx.executemany("INSERT INTO t (id, n, x, s, b) VALUES ($1, $2, $3, $4, $5)", rows)

        stored = await db.fetch("SELECT id, n, x, s, b FROM t ORDER BY id")
    finally:
        await db.close()
    assert [tuple(row.values()) for row in stored] == [(i, n, x, s, int(b)) for i, n, x, s, b in rows]


@pytest.mark.parametrize("duplicate_at", [3, 60, 101])
async def test_sqlite_executemany_of_a_duplicate_row_is_an_integrity_violation_and_writes_nothing(
    tmp_path: Path, duplicate_at: int
) -> None:
    db = await open_database(f"sqlite:///{tmp_path / 'dup.db'}")
    rows = [(f"id{n:04d}", n) for n in range(120)]
    rows[duplicate_at] = rows[0]
    try:
        await db.execute("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER)")
        with pytest.raises(IntegrityViolation):
            async with db.transaction() as tx:
                await tx.executemany("INSERT INTO t (id, n) VALUES ($1, $2)", rows)

        assert await db.fetchval("SELECT count(*) FROM t") == 0
    finally:
        await db.close()
