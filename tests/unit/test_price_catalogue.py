"""The shipped price catalogue prices a model the config leaves unpriced (by its upstream model name), the
config wins when it names prices, and the CLI shows the sheet with its source and warns about a free model."""

from __future__ import annotations

from pathlib import Path

from modelgate.cli import main
from modelgate.config import load_config
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
