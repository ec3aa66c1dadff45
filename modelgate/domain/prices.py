"""Price sheets: what each kind of usage costs, in micro-units of the currency; worst-case and real costs.

A model's sheet has token rates (input, cached input, cache writes of 5 minutes and 1 hour, input and
output audio, input and output image, output, reasoning), per-request, per-tool-call, per-image (by size and
quality), per-audio-second and per-video-second prices, long-context tiers (above N prompt tokens the whole
request at the tier's rates) and service tiers (`priority`, `flex`, ... each at its own rates). A cost is
summed in fractions of a micro-unit and rounded up once per request (`money.py` makes the micro-units).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from modelgate.config import ModelConfig
from modelgate.config.schema import DEFAULT_SERVICE_TIERS, TokenPriceConfig
from modelgate.domain.money import MICROS, to_micros
from modelgate.domain.usage import Usage

_TOKEN_PRICE_FIELDS = tuple(f.name for f in fields(TokenPriceConfig))


@dataclass(frozen=True, slots=True)
class TokenRates:
    """Micro-units per token of each token kind (a config price per million tokens is the same number)."""

    input: float
    cached_input: float
    cache_write_5m: float
    cache_write_1h: float
    input_audio: float
    input_image: float
    output: float
    reasoning: float
    output_audio: float
    output_image: float

    @classmethod
    def flat(cls, input_rate: float, cached_rate: float, output_rate: float) -> TokenRates:
        """Rates of a three-number sheet: every input kind at the input rate, every output kind at output."""
        i, o = input_rate, output_rate
        return cls(i, cached_rate, i, i, i, i, o, o, o, o)

    @classmethod
    def of(cls, prices: TokenPriceConfig, sheet: TokenPriceConfig | None = None) -> TokenRates:
        """The rates a config table names. A tier's table takes a kind it leaves out from its `sheet`'s table
        when that names it; a kind neither names is derived from the tier's own rates, as on a sheet: cache
        writes, audio and image inputs at the input rate, reasoning, audio and image outputs at the output
        rate, cached input at the input rate (a provider that gives no discount bills it whole). So thinking
        tokens of a long-context tier that names only input and output cost the tier's output rate."""
        if sheet is not None:
            prices = TokenPriceConfig(
                *(
                    getattr(sheet, name) if getattr(prices, name) is None else getattr(prices, name)
                    for name in _TOKEN_PRICE_FIELDS
                )
            )
        i = prices.input_per_mtok or 0.0
        o = prices.output_per_mtok or 0.0

        def rate(value: float | None, default: float) -> float:
            return default if value is None else value

        return cls(
            i,
            rate(prices.cached_input_per_mtok, i),
            rate(prices.cache_write_5m_per_mtok, i),
            rate(prices.cache_write_1h_per_mtok, i),
            rate(prices.input_audio_per_mtok, i),
            rate(prices.input_image_per_mtok, i),
            o,
            rate(prices.reasoning_per_mtok, o),
            rate(prices.output_audio_per_mtok, o),
            rate(prices.output_image_per_mtok, o),
        )

    def tokens_cost(self, usage: Usage) -> float:
        """The token part of a usage's cost, unrounded: each part of a total at its rate, the rest of the
        total at the text rate. Parts are taken from the total in order (cache reads, cache writes, audio,
        image; reasoning, audio, image), each at most what is left of it, so a token a provider counts in two
        parts (a cached audio token) is charged once, and never more tokens than the total."""
        left = usage.input_tokens - usage.cached_input_tokens
        cost = usage.cached_input_tokens * self.cached_input
        # The usual answer has none of the other parts: their branches are skipped.
        if usage.cache_write_5m_tokens or usage.cache_write_1h_tokens or usage.input_audio_tokens:
            for tokens, rate in (
                (usage.cache_write_5m_tokens, self.cache_write_5m),
                (usage.cache_write_1h_tokens, self.cache_write_1h),
                (usage.input_audio_tokens, self.input_audio),
            ):
                part = tokens if tokens < left else max(left, 0)
                cost += part * rate
                left -= part
        if usage.input_image_tokens:
            part = usage.input_image_tokens if usage.input_image_tokens < left else max(left, 0)
            cost += part * self.input_image
            left -= part
        if left > 0:
            cost += left * self.input
        left = usage.output_tokens
        if usage.reasoning_tokens or usage.output_audio_tokens or usage.output_image_tokens:
            for tokens, rate in (
                (usage.reasoning_tokens, self.reasoning),
                (usage.output_audio_tokens, self.output_audio),
                (usage.output_image_tokens, self.output_image),
            ):
                part = tokens if tokens < left else max(left, 0)
                cost += part * rate
                left -= part
        if left > 0:
            cost += left * self.output
        return cost

    @property
    def highest_input(self) -> float:
        """The dearest rate a prompt token can be charged at (cache reads are never dearer than input)."""
        return max(self.input, self.cached_input, self.cache_write_5m, self.cache_write_1h, self.input_audio,
                   self.input_image)  # fmt: skip

    @property
    def highest_output(self) -> float:
        return max(self.output, self.reasoning, self.output_audio, self.output_image)


@dataclass(frozen=True, slots=True)
class ModelPrices:
    """A model's price sheet in micro-units (fractions allowed), from its config or the catalogue."""

    input_per_token: float
    cached_input_per_token: float
    output_per_token: float
    per_request: int
    default_max_tokens: int
    per_image: int = 0
    per_audio_second: float = 0.0
    per_video_second: float = 0.0
    max_audio_seconds: float = 0.0
    rates: TokenRates | None = None  # None: flat, from the three numbers above
    long_context: tuple[tuple[int, TokenRates], ...] = ()  # (above this many prompt tokens, rates), ascending
    service_tiers: dict[str, TokenRates] = field(default_factory=dict)
    per_web_search_call: float = 0.0
    per_file_search_call: float = 0.0
    per_code_interpreter_call: float = 0.0
    per_image_by: dict[str, float] = field(default_factory=dict)  # "1024x1024/high" or "1024x1024"
    highest_input: float = 0.0  # derived: the dearest input and output rates of every tier
    highest_output: float = 0.0

    def __post_init__(self) -> None:
        rates = self.rates
        if rates is None:
            rates = TokenRates.flat(self.input_per_token, self.cached_input_per_token, self.output_per_token)
            object.__setattr__(self, "rates", rates)
        every = (rates, *(rates for _, rates in self.long_context), *self.service_tiers.values())
        object.__setattr__(self, "highest_input", max(rates.highest_input for rates in every))
        object.__setattr__(self, "highest_output", max(rates.highest_output for rates in every))

    @classmethod
    def of(cls, model: ModelConfig) -> ModelPrices:
        prices = model.prices
        rates = TokenRates.of(prices.tokens)
        return cls(
            rates.input,
            rates.cached_input,
            rates.output,
            to_micros(prices.per_request),
            model.default_max_tokens,
            to_micros(prices.per_image),
            prices.per_audio_second * MICROS,
            prices.per_video_second * MICROS,
            model.max_audio_seconds,
            rates=rates,
            long_context=tuple(
                (tier.above_input_tokens, TokenRates.of(tier.tokens, prices.tokens))
                for tier in prices.long_context
            ),
            service_tiers={
                name: TokenRates.of(tokens, prices.tokens) for name, tokens in prices.service_tiers
            },
            per_web_search_call=prices.per_web_search_call * MICROS,
            per_file_search_call=prices.per_file_search_call * MICROS,
            per_code_interpreter_call=prices.per_code_interpreter_call * MICROS,
            per_image_by={variant: price * MICROS for variant, price in prices.per_image_by},
        )

    def prices_tier(self, service_tier: object) -> bool:
        """Whether a request may ask for this service tier: the default one, or one the sheet prices."""
        if not isinstance(service_tier, str):
            return False
        return service_tier in DEFAULT_SERVICE_TIERS or service_tier in self.service_tiers

    def rates_for(self, usage: Usage) -> TokenRates:
        """The rates a usage is charged at: its service tier's; else the highest long-context tier its
        prompt passes; else the base rates. A tier the sheet does not price (the provider chose it for
        `auto`) is charged at the dearest rates of the sheet, never at the default ones."""
        tier = usage.service_tier
        if tier:
            rates = self.service_tiers.get(tier)
            if rates is None:
                return TokenRates.flat(self.highest_input, self.highest_input, self.highest_output)
            return rates
        rates = self.rates
        if rates is None:  # never: __post_init__ fills it in
            rates = TokenRates.flat(self.input_per_token, self.cached_input_per_token, self.output_per_token)
        for above, tier_rates in self.long_context:
            if usage.input_tokens > above:
                rates = tier_rates
        return rates

    def image_price(self, variant: str) -> float:
        """Micro-units per image of a size and quality ("1024x1024/high"): that variant's price, else the
        size's, else `per_image`."""
        by = self.per_image_by
        if by and variant:
            price = by.get(variant)
            if price is None:
                price = by.get(variant.partition("/")[0])
            if price is not None:
                return price
        return self.per_image

    @property
    def highest_image_price(self) -> float:
        return max(self.per_image, *self.per_image_by.values()) if self.per_image_by else self.per_image

    def cost(self, usage: Usage | None) -> int:
        """The real cost of an answer: every kind at its rate, rounded up to a whole micro-unit once."""
        if usage is None:
            return self.per_request
        # The usual sheet has no tiers and the usual answer no tier: its base rates, with no call to choose.
        rates = self.rates_for(usage) if usage.service_tier or self.long_context else self.rates
        variable = rates.tokens_cost(usage)  # type: ignore[union-attr]
        if usage.audio_seconds or usage.video_seconds:
            variable += usage.audio_seconds * self.per_audio_second
            variable += usage.video_seconds * self.per_video_second
        if usage.images:
            variable += usage.images * self.image_price(usage.image_variant)
        if usage.web_search_calls or usage.file_search_calls or usage.code_interpreter_calls:
            variable += (
                usage.web_search_calls * self.per_web_search_call
                + usage.file_search_calls * self.per_file_search_call
                + usage.code_interpreter_calls * self.per_code_interpreter_call
            )
        return self.per_request + math.ceil(variable - 1e-9)

    def prompt_cost(self, input_tokens: int) -> int:
        """`cost` of a usage of `input_tokens` uncached prompt tokens and nothing else (no Usage built)."""
        return self.per_request + math.ceil(input_tokens * self.input_per_token - 1e-9)

    def worst_case(self, input_tokens: int, max_output_tokens: int) -> int:
        """The most a request can cost in tokens: every prompt token and the whole output allowance at the
        dearest rates of the sheet (cache writes, audio, long-context and service tiers included)."""
        return self.per_request + math.ceil(
            input_tokens * self.highest_input + max_output_tokens * self.highest_output
        )
