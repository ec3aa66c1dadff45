"""Prices per model and token kind, in integer micro-units of the currency; worst-case and real costs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from modelgate.config import ModelConfig
from modelgate.domain.money import MICROS, to_micros
from modelgate.domain.usage import Usage


@dataclass(frozen=True, slots=True)
class ModelPrices:
    """Micro-units per token (fractions allowed), per request and per media unit, from the model's config."""

    input_per_token: float
    cached_input_per_token: float
    output_per_token: float
    per_request: int
    default_max_tokens: int
    per_image: int = 0
    per_audio_second: float = 0.0
    per_video_second: float = 0.0
    max_audio_seconds: float = 0.0

    @classmethod
    def of(cls, model: ModelConfig) -> ModelPrices:
        prices = model.prices
        # Config prices are per million tokens; per token in micro-units that is the same number.
        return cls(
            prices.input_per_mtok,
            prices.cached_input_per_mtok,
            prices.output_per_mtok,
            to_micros(prices.per_request),
            model.default_max_tokens,
            to_micros(prices.per_image),
            prices.per_audio_second * MICROS,
            prices.per_video_second * MICROS,
            model.max_audio_seconds,
        )

    def cost(self, usage: Usage | None) -> int:
        """The real cost of an answer (rounded up to a whole micro-unit)."""
        if usage is None:
            return self.per_request
        uncached = max(usage.input_tokens - usage.cached_input_tokens, 0)
        variable = (
            uncached * self.input_per_token
            + usage.cached_input_tokens * self.cached_input_per_token
            + usage.output_tokens * self.output_per_token
            + usage.audio_seconds * self.per_audio_second
            + usage.video_seconds * self.per_video_second
        )
        return self.per_request + usage.images * self.per_image + math.ceil(variable - 1e-9)

    def prompt_cost(self, input_tokens: int) -> int:
        """`cost` of a usage of `input_tokens` uncached prompt tokens and nothing else (no Usage built)."""
        return self.per_request + math.ceil(input_tokens * self.input_per_token - 1e-9)

    def worst_case(self, input_tokens: int, max_output_tokens: int) -> int:
        """The most a request can cost: every prompt token uncached and the whole output allowance used."""
        return self.per_request + math.ceil(
            input_tokens * self.input_per_token + max_output_tokens * self.output_per_token
        )
