"""Money: integer micro-units of the configured currency, and the one rounding rule that makes them.

Every amount the gateway and the cabinet store, reserve, settle or show is an `int` of micro-units. Amounts
written by people (the config's prices and plans, the CLI) are decimals; they become micro-units here and
only here, rounded half away from zero on their decimal text (so `0.0000005` is 1 micro-unit on every
path, with no binary float drift).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

MICROS = 1_000_000
# One billion currency units per credit: far above any real payment, far below BIGINT overflow.
MAX_CREDIT_MICROS = 10**15

Micros = int


def to_micros(amount: float | int | str | Decimal) -> Micros:
    """A currency amount as integer micro-units, rounded half up on its decimal text."""
    value = amount if isinstance(amount, Decimal) else Decimal(str(amount))
    return int((value * MICROS).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def parse_money(text: str, *, allow_zero: bool = False, allow_negative: bool = False) -> Micros:
    """A decimal amount typed by a person (`25`, `25.5`, `0.000001`) as micro-units; ValueError if invalid."""
    try:
        amount = Decimal(text.strip())
    except InvalidOperation as exc:
        raise ValueError(f"not an amount: {text!r}") from exc
    if not amount.is_finite():
        raise ValueError(f"not an amount: {text!r}")
    if (amount < 0 and not allow_negative) or (amount == 0 and not allow_zero):
        raise ValueError(f"the amount must be a positive number, not {text!r}")
    micros = amount * MICROS
    if micros != micros.to_integral_value():
        raise ValueError("the amount has more than 6 decimal places")
    if abs(micros) > MAX_CREDIT_MICROS:
        raise ValueError(f"the amount is larger than {format_money(MAX_CREDIT_MICROS)}")
    return int(micros)


def format_money(micros: Micros) -> str:
    """Micro-units as a decimal amount with at least two decimals: 49000000 → `49.00`, 1 → `0.000001`."""
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), MICROS)
    digits = f"{fraction:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}{whole}.{digits}"
