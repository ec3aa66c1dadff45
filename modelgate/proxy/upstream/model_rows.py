"""Models, their routing rows, row health and the choice of the rows to try for one request.

Selection: rows of the best priority that are not cooling down, in weighted random order, then the next
priority as failover. A row that fails `failure_threshold` times in a row cools down for `cooldown_seconds`.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from modelgate.config import Config, ModelConfig
from modelgate.domain.prices import ModelPrices
from modelgate.proxy.upstream.providers import upstream_key

if TYPE_CHECKING:
    from modelgate.proxy.upstream.providers import Upstream


@dataclass(slots=True, eq=False)
class RowHealth:
    """Consecutive failures and the cool-down deadline of one row (mutable, process-local)."""

    failures: int = 0
    cooled_until: float = 0.0


@dataclass(frozen=True, slots=True, eq=False)
class RoutingRow:
    """One way to serve a model: a provider, a host and the upstream model name."""

    model: str
    provider: str
    host: str
    upstream_model: str
    weight: float
    priority: int
    upstream: Upstream
    health: RowHealth = field(default_factory=RowHealth)
    # A stable name for the row, stored with objects it created (e.g. response ids) and on every ledger row,
    # log line and metric: made once.
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.provider}/{self.upstream_model}@{self.host}")


@dataclass(frozen=True, slots=True, eq=False)
class ModelEntry:
    """A configured model with its rows, as the router sees it."""

    name: str
    kinds: frozenset[str]
    rows: tuple[RoutingRow, ...]
    config: ModelConfig
    prices: ModelPrices  # from config.prices, computed once with the catalog


class ModelCatalog:
    """Every configured model by name; built once from the config."""

    def __init__(self, config: Config, upstreams: dict[str, Upstream]) -> None:
        self.models: dict[str, ModelEntry] = {}
        providers = {provider.name: provider for provider in config.providers}
        for model in config.models:
            rows = tuple(
                RoutingRow(
                    model=model.name,
                    provider=row.provider,
                    host=host,
                    upstream_model=row.upstream_model,
                    weight=row.weight,
                    priority=row.priority,
                    upstream=upstreams[upstream_key(providers[row.provider], host)],
                )
                for row in model.rows
                # A row that names no host of a provider with several is a row per host.
                for host in ((row.host,) if row.host else providers[row.provider].host_names)
            )
            self.models[model.name] = ModelEntry(
                model.name, frozenset(model.kinds), rows, model, ModelPrices.of(model)
            )
        self.provider_names = frozenset(providers)
        self.host_names = frozenset(row.host for m in self.models.values() for row in m.rows)
        self.rows_by_key = {row.key: row for m in self.models.values() for row in m.rows}

    def get(self, name: str) -> ModelEntry | None:
        return self.models.get(name)


class RowSelector:
    """Orders candidate rows for one request and keeps their health."""

    __slots__ = ("_cooldown", "_random", "_threshold")

    def __init__(
        self, cooldown_seconds: float, failure_threshold: int, rng: random.Random | None = None
    ) -> None:
        self._cooldown = cooldown_seconds
        self._threshold = failure_threshold
        self._random = rng or random.Random()

    def order(self, rows: list[RoutingRow]) -> list[RoutingRow]:
        """Healthy rows to try, best priority first, weighted-random within a priority."""
        if len(rows) == 1:
            row = rows[0]
            return [row] if row.health.cooled_until <= time.monotonic() else []
        now = time.monotonic()
        healthy = [r for r in rows if r.health.cooled_until <= now]
        by_priority: dict[int, list[RoutingRow]] = {}
        for row in healthy:
            by_priority.setdefault(row.priority, []).append(row)
        ordered: list[RoutingRow] = []
        for priority in sorted(by_priority):
            ordered.extend(self._weighted_shuffle(by_priority[priority]))
        return ordered

    def _weighted_shuffle(self, rows: list[RoutingRow]) -> list[RoutingRow]:
        # Efraimidis-Spirakis: sort by u^(1/w), a weighted random permutation in one pass.
        if len(rows) == 1:
            return rows
        return sorted(rows, key=lambda r: self._random.random() ** (1.0 / r.weight), reverse=True)

    def succeeded(self, row: RoutingRow) -> None:
        if row.health.failures:
            row.health.failures = 0

    def failed(self, row: RoutingRow) -> None:
        health = row.health
        health.failures += 1
        if health.failures >= self._threshold:
            health.cooled_until = time.monotonic() + self._cooldown
            health.failures = 0
