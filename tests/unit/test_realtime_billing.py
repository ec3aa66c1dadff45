"""How a realtime response is bounded and read: its output cap, its usage, its worst case, and the audio
appended to its input buffer."""

from __future__ import annotations

import base64

import pytest

from modelgate.domain.charges import AUDIO_UNITS_PER_SECOND, audio_input_tokens, realtime_reservation
from modelgate.domain.prices import ModelPrices
from modelgate.proxy.realtime.billing import decoded_size, input_audio_format, output_cap, realtime_usage

# 1 µ per input token, 10 µ per output token, 100 µ per request; a model default of 1000 output tokens.
PRICES = ModelPrices(
    input_per_token=1.0,
    cached_input_per_token=0.5,
    output_per_token=10.0,
    per_request=100,
    default_max_tokens=1000,
)


@pytest.mark.parametrize(
    ("options", "cap"),
    [
        ({"max_output_tokens": 200}, 200),  # the GA name
        ({"max_response_output_tokens": 300}, 300),  # the beta name
        ({"max_output_tokens": "inf"}, None),
        ({"max_output_tokens": True}, None),
        ({"max_output_tokens": 0}, None),
        ({}, None),
        (None, None),
    ],
)
def test_only_a_positive_integer_is_an_output_cap(options, cap) -> None:
    assert output_cap(options) == cap


def test_realtime_usage_reads_cached_input_from_input_token_details() -> None:
    usage = realtime_usage(
        {
            "total_tokens": 130,
            "input_tokens": 100,
            "output_tokens": 30,
            "input_token_details": {"cached_tokens": 64, "text_tokens": 40, "audio_tokens": 60},
            "output_token_details": {"text_tokens": 10, "audio_tokens": 20},
        }
    )
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (100, 64, 30)
    assert PRICES.cost(usage) == 100 + 36 * 1 + 32 + 30 * 10


def test_the_first_response_reserves_the_default_allowance_for_its_input_and_output() -> None:
    assert realtime_reservation(PRICES, None, 0, 0) == 100 + 1000 * 1 + 1000 * 10


def test_an_output_cap_bounds_the_output_part_only() -> None:
    assert realtime_reservation(PRICES, 50, 0, 0) == 100 + 1000 * 1 + 50 * 10


def test_the_worst_case_grows_with_the_conversation_and_the_text_sent_since() -> None:
    # The previous response re-read 400 tokens and wrote 100; the client then sent 600 bytes of text.
    assert realtime_reservation(PRICES, None, 500, 600) == 100 + (500 + 300 + 1000) * 1 + 1000 * 10


def test_appended_audio_is_reserved_at_one_token_per_100_ms_rounded_up() -> None:
    assert audio_input_tokens(0) == 0
    assert audio_input_tokens(1) == 1
    assert audio_input_tokens(AUDIO_UNITS_PER_SECOND) == 10
    assert audio_input_tokens(180 * AUDIO_UNITS_PER_SECOND) == 1_800
    assert realtime_reservation(PRICES, None, 0, 0, 180 * AUDIO_UNITS_PER_SECOND) == (
        100 + (1000 + 1_800) * 1 + 1000 * 10
    )


@pytest.mark.parametrize("size", range(12))
def test_the_decoded_size_of_base64_audio_is_read_from_its_length(size: int) -> None:
    encoded = base64.b64encode(bytes(range(size))).decode()
    assert decoded_size(encoded) == size


@pytest.mark.parametrize(
    ("session", "name"),
    [
        ({"input_audio_format": "g711_ulaw"}, "g711_ulaw"),  # beta
        ({"audio": {"input": {"format": {"type": "audio/pcma"}}}}, "audio/pcma"),  # GA
        ({"audio": {"input": {"format": "pcm16"}}}, None),
        ({"audio": {"output": {"format": {"type": "audio/pcmu"}}}}, None),
        ({"input_audio_format": 7}, None),
        ({}, None),
    ],
)
def test_the_input_audio_format_is_read_from_either_session_shape(session: dict, name: str | None) -> None:
    assert input_audio_format(session) == name
