"""The price catalogue shipped as data: providers' list prices and context windows, by upstream model name.

`price_catalogue.toml` beside this file holds one entry per model, each with its provider, the date its
prices were read and the URL they were read from. A served model with no `[models.prices]` of its own is
charged by the entry of its first row's upstream model name (else its own name), and a row on a preset's
host (groq, fireworks, ...) by "<preset>/<upstream model>" first; its config wins whenever it names prices.
The shipped file is read once per process, at the first config load that needs it.
"""

from __future__ import annotations

import datetime
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .price_sheet import read_prices
from .reader import ABSENT, ReadContext, Table, above, non_empty
from .schema import PriceConfig

CATALOGUE_PATH = Path(__file__).with_name("price_catalogue.toml")


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    """One model's list prices, its context window and where they came from."""

    model: str
    provider: str
    date: str
    source_url: str
    context_window: int  # 0: the provider lists none (a model billed by the second or per image)
    prices: PriceConfig
    max_output_tokens: int = 0  # 0: not listed


class CatalogueError(ValueError):
    """The catalogue file is not valid (every problem, one per line)."""


def read_catalogue(data: dict, source: str) -> dict[str, CatalogueEntry]:
    """The entries of a catalogue document (`[models."name"]` tables); CatalogueError lists every problem."""
    context = ReadContext(source, {})
    root = Table(context, "", data)
    models = root.table("models")
    entries: dict[str, CatalogueEntry] = {}
    for name in models.keys():
        t = models.table(name)
        provider = t.string("provider", required=True, check=non_empty)
        date = t.string("date", required=True, check=_iso_date)
        url = t.string("source", required=True, check=non_empty)  # a URL; an imported file's name
        window = t.integer("context_window", check=above(0))
        most_output = t.integer("max_output_tokens", check=above(0))
        aliases = t.strings("aliases")  # the provider's other names for it (dated snapshot ids)
        label = f"catalogue: {name}, {provider}, {date}, {url}"
        prices = read_prices(t.table("prices"), label)
        if not t.has("context_window") and _generates_tokens(prices):
            t.report("context_window", "missing required key (a model with an output price has one)")
        t.finish()
        window_read = window is not ABSENT or not t.has("context_window")  # absent, or a valid one
        if isinstance(provider, str) and isinstance(date, str) and isinstance(url, str) and window_read:
            entry = CatalogueEntry(name, provider, date, url, 0 if window is ABSENT else window, prices,
                                   0 if most_output is ABSENT else most_output)  # fmt: skip
            for known in (name, *(() if aliases is ABSENT else aliases)):
                if known in entries:
                    t.report("aliases", f"{known!r} is listed twice")
                entries[known] = entry
    root.finish()
    if context.problems:
        raise CatalogueError("\n".join(context.problems))
    return entries


def _iso_date(value: str) -> str | None:
    """The day the prices were read, as YYYY-MM-DD."""
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return f"expected a date as YYYY-MM-DD, got {value!r}"
    return None if len(value) == 10 else f"expected a date as YYYY-MM-DD, got {value!r}"


def _generates_tokens(prices: PriceConfig) -> bool:
    """Whether a sheet prices generated tokens (a chat model: it has a context window; a model priced per
    second or per image, or an embedding model, may list none)."""
    return prices.tokens.output_per_mtok is not None or bool(prices.long_context or prices.service_tiers)


@cache
def shipped_catalogue() -> dict[str, CatalogueEntry]:
    """The catalogue shipped with the package (read once)."""
    return read_catalogue(tomllib.loads(CATALOGUE_PATH.read_text("utf-8")), CATALOGUE_PATH.name)


def find_in_catalogue(
    *names: str, extra: Mapping[str, CatalogueEntry] | None = None
) -> CatalogueEntry | None:
    """The first of `names` the operator's catalogue (`extra`), else the shipped one, lists; a name with a
    path prefix (`models/gemini-2.5-pro`, `openai/gpt-4o`) is also looked up by its last part."""
    for catalogue in (extra or {}, shipped_catalogue()):
        for name in names:
            entry = catalogue.get(name)
            if entry is None and "/" in name:
                entry = catalogue.get(name.rsplit("/", 1)[1])
            if entry is not None:
                return entry
    return None
