"""Reading a price sheet: a model's `[models.prices]` table, or a catalogue entry's `prices`.

Every price is a non-negative number; long-context tiers ascend; a service tier is named by the provider's
name for it (the default tier's names are refused: its prices are the sheet's own). Every problem is
reported with its key path, at load time.
"""

from __future__ import annotations

from dataclasses import fields

from .reader import ABSENT, Table, at_least, given
from .schema import DEFAULT_SERVICE_TIERS, LongContextPriceConfig, PriceConfig, TokenPriceConfig

_TOKEN_PRICES = tuple(f.name for f in fields(TokenPriceConfig))
_UNIT_PRICES = tuple(
    f.name for f in fields(PriceConfig) if f.name.startswith("per_") and f.name != "per_image_by"
)


def read_prices(t: Table, source: str) -> PriceConfig:
    """A `[models.prices]` table (or a catalogue entry's `prices`): every price a non-negative number, tiers
    ascending and named, each problem reported with its key path."""
    tokens = _token_prices(t)
    units = given(**{name: t.number(name, check=at_least(0)) for name in _UNIT_PRICES})
    variants = t.table("per_image_by")
    per_image_by = tuple(
        (variant, price)
        for variant in variants.keys()
        if (price := variants.number(variant, check=at_least(0))) is not ABSENT
    )
    long_context: list[LongContextPriceConfig] = []
    for tier in t.tables("long_context"):
        above_tokens = tier.integer("above_input_tokens", check=at_least(1))
        if above_tokens is ABSENT and not tier.has("above_input_tokens"):
            tier.report("above_input_tokens", "missing required key")
        tier_tokens = _token_prices(tier)
        tier.finish()
        if above_tokens is ABSENT:
            continue
        if long_context and above_tokens <= long_context[-1].above_input_tokens:
            tier.report("above_input_tokens", f"tiers must ascend: {above_tokens} follows"
                        f" {long_context[-1].above_input_tokens}")  # fmt: skip
        long_context.append(LongContextPriceConfig(above_tokens, tier_tokens))
    tiers_table = t.table("service_tiers")
    service_tiers: list[tuple[str, TokenPriceConfig]] = []
    for name in tiers_table.keys():
        if name in DEFAULT_SERVICE_TIERS:
            tiers_table.report(name, f"{name!r} is the default tier: its prices are the sheet's own")
        tier = tiers_table.table(name)
        service_tiers.append((name, _token_prices(tier)))
        tier.finish()
    tiers_table.finish()
    t.finish()
    return PriceConfig(
        tokens=tokens,
        per_image_by=per_image_by,
        long_context=tuple(long_context),
        service_tiers=tuple(service_tiers),
        source=source,
        **units,
    )


def _token_prices(t: Table) -> TokenPriceConfig:
    return TokenPriceConfig(**given(**{name: t.number(name, check=at_least(0)) for name in _TOKEN_PRICES}))
