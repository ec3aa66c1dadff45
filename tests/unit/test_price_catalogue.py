"""The shipped price catalogue prices a model the config leaves unpriced (by its upstream model name), the
config wins when it names prices, and the CLI shows the sheet with its source and warns about a free model."""

from __future__ import annotations

import datetime
from pathlib import Path

import orjson
import pytest

from modelgate.cli import main
from modelgate.config import ConfigError, load_config
from modelgate.config.catalogue import CatalogueError, read_catalogue, shipped_catalogue
from modelgate.config.dialects import PRESET_URLS
from modelgate.domain.prices import TokenRates
from modelgate.plugins import chain_plugins

CONFIG = """
[[providers]]
name = "a"
kind = "anthropic"
base_url = "http://127.0.0.1:9"
api_key = "k"

[[plans]]
code = "free"

[[models]]
name = "haiku"
kinds = ["messages"]
[[models.rows]]
provider = "a"
upstream_model = "claude-haiku-4-5"

[[models]]
name = "haiku-own-prices"
kinds = ["messages"]
[[models.rows]]
provider = "a"
upstream_model = "claude-haiku-4-5"
[models.prices]
input_per_mtok = 9

[[models]]
name = "unknown"
kinds = ["messages"]
[[models.rows]]
provider = "a"
"""


# The providers issue #32 names, and the OpenAI-compatible presets whose own prices the catalogue lists.
FAMILIES = {"openai", "anthropic", "google", "mistral", "deepseek", "xai", "groq", "fireworks"}
REQUIRED = {
    "openai": {"gpt-6-sol", "gpt-6-luna", "gpt-5.5", "gpt-5.4", "gpt-4.1", "gpt-4.1-mini", "gpt-4o",
               "gpt-4o-mini", "o3", "gpt-5", "gpt-5-mini", "gpt-5-nano", "gpt-image-1.5",
               "text-embedding-3-small", "whisper-1", "gpt-4o-transcribe", "gpt-realtime"},
    "google": {"gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3.8-flash",
               "gemini-3.1-pro-preview"},
    "deepseek": {"deepseek-flash", "deepseek-v4-pro"},
    "xai": {"grok-4.3"},
    "mistral": {"mistral-medium-3.5"},
}  # fmt: skip


def test_every_catalogue_entry_is_dated_with_an_https_source_and_a_window_when_it_generates_tokens() -> None:
    catalogue = shipped_catalogue()
    assert catalogue
    for name, entry in catalogue.items():
        assert datetime.date.fromisoformat(entry.date) <= datetime.date.today(), name
        assert entry.source_url.startswith("https://") and " " not in entry.source_url, name
        if entry.prices.tokens.output_per_mtok is not None:
            assert entry.context_window > 0, name
        if entry.max_output_tokens:
            assert entry.max_output_tokens <= entry.context_window, name
        assert entry.prices.source.startswith(f"catalogue: {entry.model}, {entry.provider}, {entry.date}, ")


def test_every_provider_family_has_entries_and_the_named_models_are_listed() -> None:
    catalogue = shipped_catalogue()
    by_provider: dict[str, set[str]] = {}
    for name, entry in catalogue.items():
        by_provider.setdefault(entry.provider, set()).add(name)
    assert set(by_provider) == FAMILIES
    for provider, models in REQUIRED.items():
        assert models <= by_provider[provider], (provider, models - by_provider[provider])


def test_a_preset_services_entries_are_named_after_the_preset() -> None:
    """ "<preset>/<upstream>": found for a row on that preset's host, and for no other service's same name."""
    for name, entry in shipped_catalogue().items():
        if entry.provider in ("groq", "fireworks", "together", "openrouter"):
            assert entry.provider in PRESET_URLS and name.startswith(f"{entry.provider}/"), name


def test_every_tier_prices_reasoning_at_its_own_output_rate() -> None:
    """Thinking tokens above 200K or on the priority tier cost the tier's output rate, and image inputs the
    tier's input rate, whether the tier names them or leaves them to be derived (docs/prices.md)."""
    for name, entry in shipped_catalogue().items():
        tiers = [t.tokens for t in entry.prices.long_context] + [t for _, t in entry.prices.service_tiers]
        for tier in tiers:
            rates = TokenRates.of(tier, entry.prices.tokens)
            assert rates.reasoning == rates.output, name
            assert rates.input_image == rates.input, name


def test_an_unpriced_model_takes_the_catalogues_sheet_and_config_wins(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CONFIG, encoding="utf-8")
    models = {m.name: m for m in load_config(path, env={}, chain=chain_plugins()).models}
    entry = shipped_catalogue()["claude-haiku-4-5"]
    assert models["haiku"].prices == entry.prices
    assert models["haiku"].max_context_tokens == entry.context_window
    assert models["haiku-own-prices"].prices.tokens.input_per_mtok == 9
    assert models["haiku-own-prices"].prices.source == "config"
    assert models["unknown"].prices.source == ""


def test_prices_show_names_the_source_and_check_config_warns_about_a_free_model(
    tmp_path: Path, capsys
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CONFIG, encoding="utf-8")
    assert main(["prices", "show", "haiku", "--config", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "prices from catalogue: claude-haiku-4-5, anthropic" in shown
    assert "output_per_mtok = 5.0" in shown
    assert main(["check-config", str(path)]) == 0
    warned = capsys.readouterr().err
    assert "model 'unknown' has no prices" in warned
    assert "'haiku'" not in warned


# Shaped like entries of LiteLLM's model_prices_and_context_window.json (USD per token).
LITELLM = {
    "sample_spec": {"max_tokens": "set to max_output_tokens", "input_cost_per_token": 0.0},
    "gemini-test-pro": {
        "litellm_provider": "vertex_ai-language-models",
        "max_input_tokens": 1048576,
        "max_tokens": 65535,
        "input_cost_per_token": 1.25e-06,
        "input_cost_per_token_above_200k_tokens": 2.5e-06,
        "output_cost_per_token": 1e-05,
        "output_cost_per_token_above_200k_tokens": 1.5e-05,
        "cache_read_input_token_cost": 1.25e-07,
        "input_cost_per_audio_token": 1e-06,
        "output_cost_per_reasoning_token": 1e-05,
        "max_output_tokens": 65535,
    },
    "gpt-test-long": {
        "litellm_provider": "openai",
        "max_input_tokens": 1050000,
        "input_cost_per_token": 2.5e-06,
        "output_cost_per_token": 1.5e-05,
        "input_cost_per_token_above_272k_tokens": 5e-06,
        "output_cost_per_token_above_272k_tokens": 2.25e-05,
    },
    "gpt-test": {
        "litellm_provider": "openai",
        "max_input_tokens": 400000,
        "input_cost_per_token": 1.25e-06,
        "output_cost_per_token": 1e-05,
        "cache_read_input_token_cost": 1.25e-07,
        "input_cost_per_token_priority": 2.5e-06,
        "output_cost_per_token_priority": 2e-05,
        "input_cost_per_token_flex": 6.25e-07,
    },
    "no-price-model": {"litellm_provider": "x", "max_input_tokens": 1000, "mode": "embedding"},
}


def test_a_litellm_price_file_imports_as_a_catalogue_the_config_can_name(tmp_path: Path, capsys) -> None:
    source = tmp_path / "model_prices_and_context_window.json"
    source.write_text(orjson.dumps(LITELLM).decode(), encoding="utf-8")
    assert main(["prices", "import-litellm", str(source), "--output", str(tmp_path / "prices.toml")]) == 0
    assert "3 models imported" in capsys.readouterr().err
    config = CONFIG.replace("[[plans]]", '[billing]\nprice_catalogue = "prices.toml"\n\n[[plans]]', 1)
    config += '\n[[models]]\nname = "gem"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "a"\n'
    config += 'upstream_model = "gemini-test-pro"\n'
    config += '\n[[models]]\nname = "gpt"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "a"\n'
    config += 'upstream_model = "gpt-test"\n'
    config += '\n[[models]]\nname = "gpt-long"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "a"\n'
    config += 'upstream_model = "gpt-test-long"\n'
    path = tmp_path / "c.toml"
    path.write_text(config, encoding="utf-8")
    models = {m.name: m for m in load_config(path, env={}, chain=chain_plugins()).models}

    gem = models["gem"]
    assert gem.max_context_tokens == 1048576
    assert (gem.prices.tokens.input_per_mtok, gem.prices.tokens.cached_input_per_mtok) == (1.25, 0.125)
    assert gem.prices.tokens.input_audio_per_mtok == 1.0
    assert gem.prices.long_context[0].above_input_tokens == 200000
    assert gem.prices.long_context[0].tokens.output_per_mtok == 15.0
    # Thinking tokens above 200K cost the tier's output rate, not the base sheet's reasoning rate.
    assert gem.prices.long_context[0].tokens.reasoning_per_mtok == 15.0
    long = models["gpt-long"].prices.long_context
    assert [(t.above_input_tokens, t.tokens.input_per_mtok, t.tokens.output_per_mtok) for t in long] == [
        (272000, 5.0, 22.5)
    ]
    tiers = dict(models["gpt"].prices.service_tiers)
    assert (tiers["priority"].input_per_mtok, tiers["priority"].output_per_mtok) == (2.5, 20.0)
    assert tiers["flex"].input_per_mtok == 0.625
    assert tiers["priority"].reasoning_per_mtok == 20.0
    assert models["unknown"].prices.source == ""


def test_a_price_catalogue_the_config_names_that_is_broken_is_a_config_problem(tmp_path: Path) -> None:
    (tmp_path / "prices.toml").write_text('[models."x"]\nprovider = "p"\n', encoding="utf-8")
    config = CONFIG.replace("[[plans]]", '[billing]\nprice_catalogue = "prices.toml"\n\n[[plans]]', 1)
    path = tmp_path / "c.toml"
    path.write_text(config, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, chain=chain_plugins())
    [problem] = caught.value.problems
    assert "billing.price_catalogue: cannot use" in problem
    assert "models.x.date: missing required key" in problem


PRESETS = """
[[providers]]
name = "compat"
kind = "openai"
[[providers.hosts]]
name = "groq"
preset = "groq"
api_key = "k"
[[providers.hosts]]
name = "openrouter"
preset = "openrouter"
api_key = "k"

[[plans]]
code = "free"

[[models]]
name = "oss-on-groq"
kinds = ["chat"]
[[models.rows]]
provider = "compat"
host = "groq"
upstream_model = "openai/gpt-oss-120b"

[[models]]
name = "oss-on-openrouter"
kinds = ["chat"]
[[models.rows]]
provider = "compat"
host = "openrouter"
upstream_model = "openai/gpt-oss-120b"

[[models]]
name = "grok"
kinds = ["chat"]
[[models.rows]]
provider = "compat"
host = "groq"
upstream_model = "grok-4.3"

[[models]]
name = "transcribe"
kinds = ["audio_transcriptions"]
max_context_tokens = 5000
[[models.rows]]
provider = "compat"
host = "openrouter"
upstream_model = "gpt-4o-transcribe"
"""


def test_a_row_on_a_preset_host_takes_that_services_entry_and_no_other_services(
    tmp_path: Path, capsys
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(PRESETS, encoding="utf-8")
    models = {m.name: m for m in load_config(path, env={}, chain=chain_plugins()).models}
    groq = shipped_catalogue()["groq/openai/gpt-oss-120b"]
    assert models["oss-on-groq"].prices == groq.prices
    assert models["oss-on-groq"].max_context_tokens == groq.context_window
    # OpenRouter's model of the same name is not priced by Groq's list: unpriced, and check-config says so.
    assert models["oss-on-openrouter"].prices.source == ""
    # A preset's host serving an upstream name the preset has no entry for: the plain name's entry.
    assert models["grok"].prices == shipped_catalogue()["grok-4.3"].prices
    # A model priced by the second has no window in the catalogue: the config's stays.
    assert models["transcribe"].prices.per_audio_second == 0.0001
    assert models["transcribe"].max_context_tokens == 5000
    assert main(["check-config", str(path)]) == 0
    warned = capsys.readouterr().err
    assert "model 'oss-on-openrouter' has no prices" in warned
    assert "'oss-on-groq'" not in warned and "'transcribe'" not in warned


def test_prices_show_prints_a_catalogue_sheet_for_an_upstream_name_no_config_serves(capsys) -> None:
    assert main(["prices", "show", "gpt-4.1"]) == 0
    shown = capsys.readouterr().out
    assert "upstream model gpt-4.1 (not served by" in shown
    assert "https://developers.openai.com/api/docs/pricing" in shown
    assert "context window: 1047576 tokens" in shown and "max output: 32768 tokens" in shown
    assert "  input_per_mtok = 2.0\n" in shown and "  cached_input_per_mtok = 0.5\n" in shown
    assert "service tier priority:\n    input_per_mtok = 3.5\n" in shown

    assert main(["prices", "show", "gemini-2.5-pro"]) == 0
    shown = capsys.readouterr().out
    assert "https://ai.google.dev/gemini-api/docs/pricing" in shown
    assert "above 200000 prompt tokens:\n    input_per_mtok = 2.5\n" in shown
    assert "    output_per_mtok = 15.0\n" in shown

    assert main(["prices", "show", "no-such-model"]) == 2
    assert "no model 'no-such-model'" in capsys.readouterr().err


def test_a_catalogue_entry_with_an_output_price_and_no_window_or_a_bad_date_is_refused() -> None:
    given = {"provider": "p", "date": "2026-11-29", "source": "https://p"}
    document = {
        "models": {
            "chatty": {**given, "prices": {"output_per_mtok": 1}},
            "by-second": {**given, "prices": {"per_audio_second": 0.001}},
            "undated": {**given, "date": "29/11/2026", "context_window": 10, "prices": {"input_per_mtok": 1}},
        }
    }
    with pytest.raises(CatalogueError) as caught:
        read_catalogue(document, "test")
    assert str(caught.value).splitlines() == [
        "test: models.chatty.context_window: missing required key (a model with an output price has one)",
        "test: models.undated.date: expected a date as YYYY-MM-DD, got '29/11/2026'",
    ]
    del document["models"]["chatty"], document["models"]["undated"]
    assert read_catalogue(document, "test")["by-second"].context_window == 0
