"""A provider served from several hosts ([[providers.hosts]]): each host its own URL, dialect and credentials;
rows name the provider and optionally a host; a row naming none is a row per host."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.config import ConfigError, load_config
from modelgate.plugins import chain_plugins
from modelgate.proxy.upstream.model_rows import ModelCatalog
from modelgate.proxy.upstream.providers import build_upstreams

HOSTS = """
[[providers]]
name = "alpha"
kind = "openai"
api_key = "provider-key"
headers = {{ "X-Team" = "core" }}
{extra}
[[providers.hosts]]
name = "eu"
base_url = "https://eu.example.com/v1/"
[[providers.hosts]]
name = "us"
base_url = "https://us.example.com/v1"
api_key = "us-key"
headers = {{ "X-Region" = "us" }}
[[providers.hosts]]
name = "claude"
base_url = "https://claude.example.com"
dialect = "anthropic"

[[models]]
name = "m"
kinds = ["chat"]
[[models.rows]]
provider = "alpha"
{row}

[[plans]]
code = "free"
"""


def load(tmp_path: Path, *, row: str = "", extra: str = ""):
    path = tmp_path / "hosts.toml"
    path.write_text(HOSTS.format(row=row, extra=extra), encoding="utf-8")
    return load_config(path, env={}, chain=chain_plugins())


def problems(tmp_path: Path, **parts: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, **parts)
    return [p.split(": ", 1)[1] for p in caught.value.problems]


def test_each_host_is_served_with_its_url_dialect_key_and_headers_over_the_providers(tmp_path: Path) -> None:
    [provider] = load(tmp_path).providers
    assert provider.host_names == ("eu", "us", "claude")
    eu, us, claude = (provider.served_from(name) for name in provider.host_names)
    assert (eu.base_url, eu.kind, eu.api_key) == ("https://eu.example.com/v1", "openai", "provider-key")
    assert (us.api_key, us.headers) == ("us-key", (("X-Team", "core"), ("X-Region", "us")))
    assert (claude.kind, claude.native_messages) == ("anthropic", True)
    assert eu.native_messages is False


def test_a_row_naming_no_host_is_a_row_per_host_each_with_its_own_client(tmp_path: Path) -> None:
    config = load(tmp_path)
    upstreams = build_upstreams(config.providers)
    rows = ModelCatalog(config, upstreams).get("m").rows
    assert [(r.provider, r.host) for r in rows] == [("alpha", "eu"), ("alpha", "us"), ("alpha", "claude")]
    assert [r.upstream for r in rows] == [
        upstreams["alpha@eu"],
        upstreams["alpha@us"],
        upstreams["alpha@claude"],
    ]
    assert [r.upstream.kind for r in rows] == ["openai", "openai", "anthropic"]


def test_a_row_naming_a_host_is_served_there_only(tmp_path: Path) -> None:
    config = load(tmp_path, row='host = "us"')
    [row] = ModelCatalog(config, build_upstreams(config.providers)).get("m").rows
    assert row.host == "us" and row.upstream.kind == "openai" and row.key == "alpha/m@us"


def test_a_row_naming_an_unknown_host_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    assert problems(tmp_path, row='host = "uss"') == [
        "models[0].rows[0].host: unknown host of provider alpha: 'uss'; did you mean 'us'?"
    ]


def test_a_provider_gives_base_url_or_hosts_not_both(tmp_path: Path) -> None:
    assert problems(tmp_path, extra='base_url = "https://x.example.com/v1"') == [
        "providers[0].base_url: give either base_url or [[providers.hosts]], not both"
    ]


def test_host_names_are_unique_and_dialects_known(tmp_path: Path) -> None:
    text = HOSTS.format(row="", extra="") + ""
    text = text.replace('name = "us"', 'name = "eu"').replace('dialect = "anthropic"', 'dialect = "bedrock"')
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, chain=chain_plugins())
    found = " | ".join(caught.value.problems)
    assert "duplicate host name 'eu'" in found
    assert "dialect" in found and "bedrock" in found


def test_a_provider_with_a_base_url_is_one_host_named_by_its_hostname(tmp_path: Path) -> None:
    path = tmp_path / "one.toml"
    path.write_text(
        '[[providers]]\nname = "p"\nkind = "openai"\nbase_url = "https://api.example.com/v1"\n'
        '[[models]]\nname = "m"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "p"\n'
        '[[plans]]\ncode = "free"\n',
        encoding="utf-8",
    )
    config = load_config(path, env={}, chain=chain_plugins())
    upstreams = build_upstreams(config.providers)
    assert list(upstreams) == ["p"]
    [row] = ModelCatalog(config, upstreams).get("m").rows
    assert row.host == "api.example.com" and row.upstream is upstreams["p"]


def test_a_hosts_keys_come_from_the_host_else_the_provider(tmp_path: Path) -> None:
    text = HOSTS.format(row="", extra="").replace('api_key = "us-key"', 'api_keys = ["us-1", "us-2"]')
    path = tmp_path / "keys.toml"
    path.write_text(text, encoding="utf-8")
    [provider] = load_config(path, env={}, chain=chain_plugins()).providers
    assert provider.served_from("us").credentials == ("us-1", "us-2")
    assert provider.served_from("eu").credentials == ("provider-key",)


def test_api_key_and_api_keys_are_not_given_together_and_api_keys_is_not_empty(tmp_path: Path) -> None:
    assert problems(tmp_path, extra='api_keys = ["a", "b"]') == [
        "providers[0].api_keys: give either api_key or api_keys, not both"
    ]
    text = HOSTS.format(row="", extra="").replace('api_key = "us-key"', "api_keys = []")
    path = tmp_path / "empty.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={}, chain=chain_plugins())
    assert any("api_keys: must list at least one key" in p for p in caught.value.problems)
