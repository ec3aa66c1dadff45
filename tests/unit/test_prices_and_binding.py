"""Two shortcuts of the metering hot path give what the general forms give: the crash row's prompt cost,
and the SQLite binding of None and bools."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.domain.prices import ModelPrices
from modelgate.domain.usage import Usage
from modelgate.storage import open_database

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
