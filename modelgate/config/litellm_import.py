"""LiteLLM's `model_prices_and_context_window.json` as a modelgate price catalogue (the TOML of
`price_catalogue.toml`), for operators who keep that file: `modelgate prices import-litellm FILE`, and the
result named by `[billing] price_catalogue`.

LiteLLM prices are USD per token; the catalogue's are per million tokens (the same digits, moved six places,
in decimal so no binary float drift enters). Entries without an input or output price or a context window
are left out, as is `sample_spec`; the rest keep the kinds LiteLLM names that the sheet has.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

# LiteLLM's per-token keys → the sheet's per-million keys.
_TOKEN_KEYS = {
    "input_cost_per_token": "input_per_mtok",
    "cache_read_input_token_cost": "cached_input_per_mtok",
    "cache_creation_input_token_cost": "cache_write_5m_per_mtok",
    "cache_creation_input_token_cost_above_1hr": "cache_write_1h_per_mtok",
    "input_cost_per_audio_token": "input_audio_per_mtok",
    "output_cost_per_token": "output_per_mtok",
    "output_cost_per_reasoning_token": "reasoning_per_mtok",
    "output_cost_per_audio_token": "output_audio_per_mtok",
}
# LiteLLM's "_above_128k_tokens" / "_above_200k_tokens" / "_above_272k_tokens" prices: a long-context tier
# at that many prompt tokens, of these kinds.
_LONG_CONTEXT_AT = {"128k": 128_000, "200k": 200_000, "272k": 272_000}
_LONG_CONTEXT_KEYS = {
    "input_cost_per_token": "input_per_mtok",
    "cache_read_input_token_cost": "cached_input_per_mtok",
    "input_cost_per_audio_token": "input_audio_per_mtok",
    "output_cost_per_token": "output_per_mtok",
}
_TIERS = ("priority", "flex")  # LiteLLM's "_priority" / "_flex" suffixed prices


def _per_million(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        amount = Decimal(str(value)) * 1_000_000
    except InvalidOperation:
        return None
    if not amount.is_finite() or amount < 0:
        return None
    return format(amount.normalize(), "f")


def _max_output(entry: dict) -> list[str]:
    """The `max_output_tokens` line of an entry that names a positive one."""
    most = entry.get("max_output_tokens")
    return [f"max_output_tokens = {most}"] if type(most) is int and most > 0 else []


def _with_reasoning(tier: dict[str, str]) -> dict[str, str]:
    """A tier's rates with its reasoning rate named: LiteLLM bills reasoning tokens as output tokens, and a
    kind a tier leaves out would stay at the base sheet's rate (docs/prices.md)."""
    if "output_per_mtok" in tier and "reasoning_per_mtok" not in tier:
        return {**tier, "reasoning_per_mtok": tier["output_per_mtok"]}
    return tier


def catalogue_from_litellm(data: Any, date: str, source: str) -> tuple[str, int]:
    """(the catalogue's TOML text, the number of models in it) of a LiteLLM price document."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object of models")
    out = [
        f"# Imported from LiteLLM's price file {source} on {date} (modelgate prices import-litellm).",
        "",
    ]
    count = 0
    for name, entry in data.items():
        if name == "sample_spec" or not isinstance(entry, dict):
            continue
        window = entry.get("max_input_tokens") or entry.get("max_tokens")
        prices = {
            key: price for litellm, key in _TOKEN_KEYS.items() if (price := _per_million(entry.get(litellm)))
        }
        if not isinstance(window, int) or window < 1 or "input_per_mtok" not in prices:
            continue
        count += 1
        provider = entry.get("litellm_provider")
        provider = provider if isinstance(provider, str) and provider else "unknown"
        table = f"models.{json.dumps(name)}"
        out += [
            f"[{table}]",
            f"provider = {json.dumps(provider)}",
            f"date = {json.dumps(date)}",
            f"source = {json.dumps(source)}",
            f"context_window = {window}",
            *_max_output(entry),
            f"[{table}.prices]",
            *(f"{key} = {value}" for key, value in prices.items()),
        ]
        for suffix, above in _LONG_CONTEXT_AT.items():
            tier = {
                key: price
                for litellm, key in _LONG_CONTEXT_KEYS.items()
                if (price := _per_million(entry.get(f"{litellm}_above_{suffix}_tokens")))
            }
            if tier:
                out.append(f"[[{table}.prices.long_context]]")
                out.append(f"above_input_tokens = {above}")
                out += [f"{key} = {value}" for key, value in _with_reasoning(tier).items()]
        for name_of_tier in _TIERS:
            rates = {
                key: price
                for litellm, key in _TOKEN_KEYS.items()
                if (price := _per_million(entry.get(f"{litellm}_{name_of_tier}")))
            }
            if rates:
                out.append(f"[{table}.prices.service_tiers.{name_of_tier}]")
                out += [f"{key} = {value}" for key, value in _with_reasoning(rates).items()]
        out.append("")
    return "\n".join(out), count
