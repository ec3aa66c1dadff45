"""The one money path (modelgate/domain/charges.py): the reservation's image bound by each provider's formula,
the charge by the truth rule, and the one ledger-row builder."""

from __future__ import annotations

import orjson

from modelgate.config import ModelConfig, RowConfig
from modelgate.config.schema import CLAUDE_MAX_IMAGE_TOKENS
from modelgate.domain.charges import Charge, charge_row, charge_usage, input_bound
from modelgate.domain.prices import ModelPrices
from modelgate.domain.usage import Usage

GPT = ModelConfig(name="gpt", kinds=("chat",), rows=(RowConfig("openai", "gpt-4o"),))
CLAUDE = ModelConfig(
    name="claude", kinds=("chat",), rows=(RowConfig("anthropic", "claude"),), claude_images=True
)
PRICES = ModelPrices(
    input_per_token=1.0,
    cached_input_per_token=0.5,
    output_per_token=10.0,
    per_request=0,
    default_max_tokens=100,
)


def _image_tokens(model: ModelConfig, part: dict) -> int:
    payload = {"messages": [{"role": "user", "content": [part]}]}
    body = len(orjson.dumps(payload))
    return input_bound(body, payload, model, 0) - (body // 2 + 1)


def test_an_image_is_bounded_by_openais_tile_formula_on_an_openai_model() -> None:
    url = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    assert _image_tokens(GPT, url) == 85 + 8 * 170
    low = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}
    assert _image_tokens(GPT, low) == 85


def test_an_image_is_bounded_by_anthropics_formula_on_a_claude_model_whatever_its_detail() -> None:
    # Anthropic: tokens = width x height / 750, images scaled to at most ~1.15 megapixels: ~1,600 tokens.
    assert CLAUDE_MAX_IMAGE_TOKENS == 1600 > 85 + 8 * 170
    low = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}
    assert _image_tokens(CLAUDE, low) == CLAUDE_MAX_IMAGE_TOKENS


def test_a_messages_image_part_is_bounded_by_anthropics_formula_even_on_a_model_not_marked_claude() -> None:
    part = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    assert _image_tokens(GPT, part) == CLAUDE_MAX_IMAGE_TOKENS


def test_the_truth_is_charged_past_the_reservation_and_the_excess_recorded() -> None:
    charge = Charge()
    usage = Usage(input_tokens=100, output_tokens=4000)
    assert charge_usage(charge, PRICES, usage, 1000, 128_000, 10) == 100 + 40_000
    assert (charge.cost_micros, charge.over_reservation_micros, charge.usage_implausible) == (
        40_100,
        39_100,
        False,
    )


def test_usage_beyond_the_context_window_and_the_output_allowance_is_charged_at_that_bound() -> None:
    charge = Charge()
    usage = Usage(input_tokens=1000, output_tokens=5000)
    bound = PRICES.worst_case(500, 10)
    assert charge_usage(charge, PRICES, usage, None, 500, 10) == bound
    assert (charge.usage_implausible, charge.reported_cost_micros) == (True, 51_000)
    assert charge.over_reservation_micros == 0  # nothing was reserved to go over


def test_without_an_output_allowance_there_is_no_physical_bound() -> None:
    charge = Charge()
    assert charge_usage(charge, PRICES, Usage(input_tokens=1000, output_tokens=5000), None, 500, 0) == 51_000
    assert not charge.usage_implausible


def test_the_row_reads_its_columns_detail_and_marks_from_the_usage() -> None:
    usage = Usage(input_tokens=30, cached_input_tokens=10, output_tokens=5, cache_write_1h_tokens=6)
    row = charge_row(
        "led_1", "org", "key", None, "m", "p/m@h", "req", 200, "completed", usage, 99, 1.0, (), "", 7
    )
    assert row[7:12] == (200, 30, 10, 5, 99)
    assert row[14:] == ("completed", (), "", False, 7, False, '{"cache_write_1h_tokens":6}')


def test_a_row_without_usage_is_the_estimate_of_its_prompt_said_estimated() -> None:
    row = charge_row(
        "led_2", "org", "key", None, "m", None, "req", 0, "crashed", None, 40, 1.0, (), "", 0, False, 12
    )
    assert row[8:11] == (12, 0, 0) and row[16:] == ("", True)
    nothing = charge_row("led_3", "org", "key", None, "m", None, "req", 402, "refused", None, 0, 1.0, ())
    assert len(nothing) == 16 and nothing[8:12] == (0, 0, 0, 0)
