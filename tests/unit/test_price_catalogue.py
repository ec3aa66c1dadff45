"""The shipped price catalogue prices a model the config leaves unpriced (by its upstream model name), the
config wins when it names prices, and the CLI shows the sheet with its source and warns about a free model."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from modelgate.cli import main
from modelgate.config import ConfigError, load_config
from modelgate.config.catalogue import shipped_catalogue
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


def test_every_catalogue_entry_is_dated_with_a_source_and_valid() -> None:
    catalogue = shipped_catalogue()
    assert catalogue
    for entry in catalogue.values():
        assert entry.date and entry.source_url.startswith("https://") and entry.context_window > 0


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
    assert "2 models imported" in capsys.readouterr().err
    config = CONFIG.replace("[[plans]]", '[billing]\nprice_catalogue = "prices.toml"\n\n[[plans]]', 1)
    config += '\n[[models]]\nname = "gem"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "a"\n'
    config += 'upstream_model = "gemini-test-pro"\n'
    config += '\n[[models]]\nname = "gpt"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "a"\n'
    config += 'upstream_model = "gpt-test"\n'
    path = tmp_path / "c.toml"
    path.write_text(config, encoding="utf-8")
    models = {m.name: m for m in load_config(path, env={}, chain=chain_plugins()).models}

    gem = models["gem"]
    assert gem.max_context_tokens == 1048576
    assert (gem.prices.tokens.input_per_mtok, gem.prices.tokens.cached_input_per_mtok) == (1.25, 0.125)
    assert gem.prices.tokens.input_audio_per_mtok == 1.0
    assert gem.prices.long_context[0].above_input_tokens == 200000
    assert gem.prices.long_context[0].tokens.output_per_mtok == 15.0
    tiers = dict(models["gpt"].prices.service_tiers)
    assert (tiers["priority"].input_per_mtok, tiers["priority"].output_per_mtok) == (2.5, 20.0)
    assert tiers["flex"].input_per_mtok == 0.625
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
