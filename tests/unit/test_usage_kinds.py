"""Every kind of usage a provider bills is read from its answer, and the price sheet charges each kind once at
its rate: cache reads and writes (5m / 1h), audio, image, reasoning, tool calls, long-context and service
tiers. Expected costs are worked out by hand from the rates in each test."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from modelgate.config import ConfigError, load_config
from modelgate.domain.prices import ModelPrices
from modelgate.domain.usage import DETAIL_KINDS, StreamUsageScanner, Usage, usage_detail, usage_of_body
from modelgate.plugins import chain_plugins
from modelgate.proxy.upstream.dialects.bedrock_converse import chat_usage
from modelgate.proxy.upstream.dialects.gemini_answers import usage_of

CONFIG = """
[[providers]]
name = "p"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key = "k"

[[plans]]
code = "free"

[[models]]
name = "m"
kinds = ["chat"]

[[models.rows]]
provider = "p"

[models.prices]
{prices}
"""


def sheet(tmp_path: Path, prices: str) -> ModelPrices:
    path = tmp_path / "c.toml"
    path.write_text(CONFIG.format(prices=prices), encoding="utf-8")
    return ModelPrices.of(load_config(path, env={}, chain=chain_plugins()).models[0])


def problems(tmp_path: Path, prices: str) -> list[str]:
    path = tmp_path / "c.toml"
    path.write_text(CONFIG.format(prices=prices), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, chain=chain_plugins())
    return [problem.replace(f"{path}: ", "c.toml: ") for problem in caught.value.problems]


def read(document: dict) -> Usage:
    usage = usage_of_body(orjson.dumps(document))
    assert usage is not None
    return usage


def test_anthropic_cache_writes_are_split_5m_and_1h_and_added_to_the_prompt() -> None:
    usage = read(
        {
            "type": "message",
            "usage": {
                "input_tokens": 50,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 300,
                "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
                "output_tokens": 40,
                "server_tool_use": {"web_search_requests": 3},
                "service_tier": "standard",
            },
        }
    )
    assert (usage.input_tokens, usage.cached_input_tokens) == (1350, 1000)
    assert (usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) == (100, 200)
    assert (usage.web_search_calls, usage.service_tier) == (3, "")


def test_a_plain_anthropic_cache_write_is_a_5_minute_one() -> None:
    usage = read({"usage": {"input_tokens": 5, "cache_creation_input_tokens": 70, "output_tokens": 1}})
    assert (usage.input_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) == (75, 70, 0)


def test_openai_chat_details_are_parts_of_the_prompt_and_completion_totals() -> None:
    usage = read(
        {
            "service_tier": "priority",
            "usage": {
                "prompt_tokens": 1000,
                "completion_tokens": 500,
                "prompt_tokens_details": {"cached_tokens": 200, "audio_tokens": 300, "image_tokens": 100},
                "completion_tokens_details": {"reasoning_tokens": 250, "audio_tokens": 50},
            },
        }
    )
    assert (usage.input_tokens, usage.cached_input_tokens, usage.input_audio_tokens) == (1000, 200, 300)
    assert (usage.input_image_tokens, usage.reasoning_tokens, usage.output_audio_tokens) == (100, 250, 50)
    assert usage.service_tier == "priority"


def test_responses_tool_calls_are_counted_from_the_final_response_in_a_stream() -> None:
    response = {
        "id": "resp_1",
        "service_tier": "flex",
        "output": [
            {"type": "web_search_call"},
            {"type": "web_search_call"},
            {"type": "file_search_call"},
            {"type": "code_interpreter_call"},
            {"type": "message"},
        ],
        "usage": {
            "input_tokens": 900,
            "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 0},
            "output_tokens": 90,
            "output_tokens_details": {"reasoning_tokens": 30},
        },
    }
    scanner = StreamUsageScanner()
    scanner.feed(b'event: response.created\ndata: {"type":"response.created","response":{"usage":null}}\n\n')
    event = orjson.dumps({"type": "response.completed", "response": response})
    scanner.feed(b"event: response.completed\ndata: " + event[:40])
    scanner.feed(event[40:] + b"\n\n")
    usage = scanner.usage
    assert usage is not None
    assert (usage.web_search_calls, usage.file_search_calls, usage.code_interpreter_calls) == (2, 1, 1)
    assert (usage.input_tokens, usage.cached_input_tokens, usage.reasoning_tokens) == (900, 100, 30)
    assert usage.service_tier == "flex"


def test_converse_cache_reads_and_writes_reach_the_chat_usage() -> None:
    chat = chat_usage(
        {"inputTokens": 20, "outputTokens": 5, "cacheReadInputTokens": 11, "cacheWriteInputTokens": 3}
    )
    usage = read({"usage": chat})
    assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_5m_tokens) == (34, 11, 3)


def test_converse_cache_writes_split_by_ttl_reach_the_5m_and_1h_kinds() -> None:
    # botocore bedrock-runtime TokenUsage.cacheDetails: one CacheDetail (ttl "5m" | "1h", inputTokens) per
    # TTL, 1h first; cacheWriteInputTokens is their sum.
    converse = {
        "inputTokens": 20,
        "outputTokens": 5,
        "cacheReadInputTokens": 11,
        "cacheWriteInputTokens": 10,
        "cacheDetails": [{"ttl": "1h", "inputTokens": 6}, {"ttl": "5m", "inputTokens": 4}],
    }
    usage = read({"usage": chat_usage(converse)})
    assert (usage.input_tokens, usage.cached_input_tokens) == (41, 11)
    assert (usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) == (4, 6)


def test_gemini_cached_thoughts_tool_use_and_audio_are_read() -> None:
    chat = usage_of(
        {
            "promptTokenCount": 1000,
            "cachedContentTokenCount": 400,
            "toolUsePromptTokenCount": 50,
            "candidatesTokenCount": 80,
            "thoughtsTokenCount": 120,
            "promptTokensDetails": [
                {"modality": "TEXT", "tokenCount": 700},
                {"modality": "AUDIO", "tokenCount": 300},
            ],
            "cacheTokensDetails": [{"modality": "AUDIO", "tokenCount": 100}],
        }
    )
    usage = read({"usage": chat})
    assert (usage.input_tokens, usage.cached_input_tokens, usage.input_audio_tokens) == (1050, 400, 200)
    assert (usage.output_tokens, usage.reasoning_tokens) == (200, 120)


def test_each_kind_is_charged_once_at_its_rate(tmp_path: Path) -> None:
    prices = sheet(
        tmp_path,
        "input_per_mtok = 3\ncached_input_per_mtok = 0.3\ncache_write_5m_per_mtok = 3.75\n"
        "cache_write_1h_per_mtok = 6\ninput_audio_per_mtok = 40\noutput_per_mtok = 15\n"
        "reasoning_per_mtok = 12\n"
        "per_web_search_call = 0.01\nper_request = 0.0001",
    )
    usage = Usage(
        input_tokens=2000,
        cached_input_tokens=1000,
        cache_write_5m_tokens=300,
        cache_write_1h_tokens=200,
        input_audio_tokens=100,
        output_tokens=700,
        reasoning_tokens=500,
        web_search_calls=2,
    )
    # µ per token = USD per Mtok: 400 text input, 1000 cached, 300 5m, 200 1h, 100 audio; 200 text output,
    # 500 reasoning
    by_hand = 100 + 400 * 3 + 1000 * 0.3 + 300 * 3.75 + 200 * 6 + 100 * 40 + 200 * 15 + 500 * 12 + 2 * 10_000
    assert prices.cost(usage) == round(by_hand)


def test_unpriced_kinds_cost_their_text_rate_and_reasoning_the_output_rate(tmp_path: Path) -> None:
    prices = sheet(tmp_path, "input_per_mtok = 2\noutput_per_mtok = 8")
    usage = Usage(input_tokens=100, cached_input_tokens=40, cache_write_1h_tokens=10, output_tokens=50,
                  reasoning_tokens=30)  # fmt: skip
    assert prices.cost(usage) == 100 * 2 + 50 * 8


def test_a_long_prompt_is_charged_wholly_at_its_tier(tmp_path: Path) -> None:
    prices = sheet(
        tmp_path,
        "input_per_mtok = 1.25\noutput_per_mtok = 10\n[[models.prices.long_context]]\n"
        "above_input_tokens = 200000\ninput_per_mtok = 2.5\noutput_per_mtok = 15",
    )
    assert prices.cost(Usage(input_tokens=200_000, output_tokens=10)) == 250_000 + 100
    assert prices.cost(Usage(input_tokens=200_001, output_tokens=10)) == 500_003 + 150
    assert prices.worst_case(10, 10) == 10 * 2.5 + 10 * 15


def test_a_service_tier_is_charged_at_its_rates_and_an_unpriced_one_at_the_dearest(tmp_path: Path) -> None:
    prices = sheet(
        tmp_path,
        "input_per_mtok = 2\noutput_per_mtok = 8\n[models.prices.service_tiers.flex]\ninput_per_mtok = 1\n"
        "output_per_mtok = 4\n[models.prices.service_tiers.priority]\ninput_per_mtok = 3.5",
    )
    assert prices.cost(Usage(input_tokens=100, output_tokens=10, service_tier="flex")) == 100 + 40
    assert prices.cost(Usage(input_tokens=100, output_tokens=10, service_tier="priority")) == 350 + 80
    assert prices.cost(Usage(input_tokens=100, output_tokens=10, service_tier="scale")) == 350 + 80
    assert prices.prices_tier("flex") and prices.prices_tier("auto") and not prices.prices_tier("scale")


def test_images_are_priced_by_size_and_quality(tmp_path: Path) -> None:
    prices = sheet(
        tmp_path,
        'per_image = 0.04\n[models.prices.per_image_by]\n"1024x1024/high" = 0.167\n"1536x1024" = 0.063',
    )
    assert prices.cost(Usage(images=2, image_variant="1024x1024/high")) == 334_000
    assert prices.cost(Usage(images=1, image_variant="1536x1024/low")) == 63_000
    assert prices.cost(Usage(images=1, image_variant="1024x1024/low")) == 40_000


def test_a_price_sheet_is_checked_at_load_with_every_problem_named(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        "input_per_mtok = -1\nreasoning_per_mtok = 'x'\n[[models.prices.long_context]]\n"
        "above_input_tokens = 5\n"
        "[[models.prices.long_context]]\nabove_input_tokens = 4\n[models.prices.service_tiers.auto]\n"
        "input_per_mtok = 1\n[models.prices.service_tiers.priority]\ninptu_per_mtok = 1",
    )
    assert found == [
        "c.toml: models[0].prices.input_per_mtok: must be at least 0, got -1",
        "c.toml: models[0].prices.reasoning_per_mtok: expected a number, got string 'x'",
        "c.toml: models[0].prices.long_context[1].above_input_tokens: tiers must ascend: 4 follows 5",
        "c.toml: models[0].prices.service_tiers.auto: 'auto' is the default tier:"
        " its prices are the sheet's own",
        "c.toml: models[0].prices.service_tiers.priority.inptu_per_mtok: unknown key; did you mean"
        " 'input_per_mtok'?",
    ]


@pytest.mark.parametrize("kind", [kind for kind in DETAIL_KINDS if kind != "image_variant"])
def test_every_richer_kind_reaches_the_ledgers_usage_detail(kind: str) -> None:
    usage = Usage(input_tokens=10, output_tokens=10, cached_input_tokens=5)
    assert usage_detail(usage) == ""
    setattr(usage, kind, "priority" if kind == "service_tier" else 3)
    assert orjson.loads(usage_detail(usage)) == {kind: "priority" if kind == "service_tier" else 3}
