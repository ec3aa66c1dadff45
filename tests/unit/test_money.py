"""The one rounding rule of money (`domain.money.to_micros`): ties half away from zero on the decimal text,
and the cabinet and the gateway turning the same config amounts into the same micro-units."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from modelgate.cabinet.billing import billing_overview
from modelgate.cabinet.organizations import insert_organization
from modelgate.config import load_config
from modelgate.domain.accounts import Accounts, balance_key
from modelgate.domain.counters import InProcessCounters
from modelgate.domain.errors import InsufficientBalance
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.money import format_money, parse_money, to_micros
from modelgate.domain.policy_decisions import PolicyDirectory
from modelgate.storage import apply_migrations, open_database


@pytest.mark.parametrize(
    ("amount", "micros"),
    [
        ("0.0000005", 1),  # a tie rounds up
        ("0.0000004999", 0),
        (2.5e-6, 3),  # a float is read by its shortest decimal text, "2.5e-06": no binary drift to 2.4999…
        (1.0000005, 1_000_001),  # 1.0000005 as a binary double is 1.00000049999…; its text is the tie
        ("1.0000005", 1_000_001),
        (Decimal("0.0000015"), 2),
        (49, 49_000_000),
        (0.1 + 0.2, 300_000),  # 0.30000000000000004 → 300000.00000000004 → 300000
        ("-0.0000005", -1),  # negative ties round away from zero, mirroring the positive ones
        (-2.5e-6, -3),
        ("-1.0000005", -1_000_001),
        ("-0.0000004", 0),
    ],
)
def test_to_micros_rounds_ties_half_away_from_zero_on_the_decimal_text(amount, micros: int) -> None:
    assert to_micros(amount) == micros


def test_parse_money_takes_exact_amounts_only() -> None:
    assert parse_money("25.5") == 25_500_000
    assert parse_money("0", allow_zero=True) == 0
    assert parse_money("-3.25", allow_negative=True) == -3_250_000
    for text in ("0", "-1", "1.0000005", "nan", "abc"):
        with pytest.raises(ValueError):
            parse_money(text)


def test_format_money_shows_every_micro_unit() -> None:
    assert [format_money(m) for m in (49_000_000, 1, -1_000_001, 0)] == [
        "49.00",
        "0.000001",
        "-1.000001",
        "0.00",
    ]


_TIE_CONFIG = """
[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "m"
kinds = ["chat"]
[[models.rows]]
provider = "mock"

[[plans]]
code = "ties"
monthly_fee = 2.5e-6
credit_limit = 1.0000005
"""


async def test_the_cabinet_and_the_gateway_agree_on_a_plans_amounts(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(_TIE_CONFIG)
    config = load_config(tmp_path / "c.toml", env={})
    db = await open_database(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        await apply_migrations(db)
        org = await insert_organization(db, "Ties Ltd", "ties", 1_000.0)
        accounts = Accounts(
            db,
            config,
            InProcessCounters(),
            LedgerWriter(db, interval=60, batch_size=10),
            PolicyDirectory(db),
            shared=False,
        )

        overview = await billing_overview(db, config, org, 2_000.0)
        # The gateway lets the organization spend exactly its credit limit: 1000001 micro-units, not one more.
        await accounts.reserve_balance(org.id, "ties", 1_000_001, balance_key(org.id))
        with pytest.raises(InsufficientBalance):
            await accounts.reserve_balance(org.id, "ties", 1, balance_key(org.id))
    finally:
        await db.close()

    assert overview["plan"]["monthlyFeeMicros"] == 3
    assert overview["plan"]["creditLimitMicros"] == overview["creditLimitMicros"] == 1_000_001
