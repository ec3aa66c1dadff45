"""A host's dialect and its options (modelgate/config/dialects.py): each dialect takes only its own options,
checked with precise messages; the dialects that know their URL need no base_url; the wire family follows the
dialect (Bedrock and Vertex follow the provider's kind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.config import ConfigError, load_config
from modelgate.config.schema import dialect_family
from modelgate.plugins import chain_plugins

TEMPLATE = """
[[providers]]
name = "p"
kind = "{kind}"

[[providers.hosts]]
name = "h"
{host}

[[models]]
name = "m"
kinds = ["chat"]
[[models.rows]]
provider = "p"

[[plans]]
code = "free"
"""


def served(tmp_path: Path, host: str, kind: str = "anthropic"):
    path = tmp_path / "dialect.toml"
    path.write_text(TEMPLATE.format(kind=kind, host=host), encoding="utf-8")
    config = load_config(path, env={}, chain=chain_plugins())
    return config.provider("p").served_from("h")


def problems(tmp_path: Path, host: str, kind: str = "anthropic") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        served(tmp_path, host, kind)
    return [p.split(": ", 1)[1].removeprefix("providers[0].hosts[0].") for p in caught.value.problems]


def test_bedrock_takes_its_url_from_the_region_and_the_family_from_the_providers_kind(tmp_path: Path) -> None:
    claude = served(tmp_path, 'dialect = "bedrock"\nregion = "eu-west-1"')
    assert (claude.kind, claude.dialect) == ("anthropic", "bedrock")
    assert claude.base_url == "https://bedrock-runtime.eu-west-1.amazonaws.com"
    assert claude.option("region") == "eu-west-1"
    assert claude.native_messages is True
    llama = served(tmp_path, 'dialect = "bedrock"\nregion = "eu-west-1"', kind="openai")
    assert (llama.kind, llama.native_messages) == ("openai", False)


def test_vertex_global_region_and_a_regional_one(tmp_path: Path) -> None:
    glob = served(tmp_path, 'dialect = "vertex"\nproject = "pr"\nregion = "global"')
    assert glob.base_url == "https://aiplatform.googleapis.com"
    regional = served(tmp_path, 'dialect = "vertex"\nproject = "pr"\nregion = "us-east5"')
    assert regional.base_url == "https://us-east5-aiplatform.googleapis.com"


def test_gemini_and_a_preset_need_no_base_url(tmp_path: Path) -> None:
    gemini = served(tmp_path, 'dialect = "gemini"')
    assert (gemini.kind, gemini.base_url) == ("openai", "https://generativelanguage.googleapis.com")
    groq = served(tmp_path, 'dialect = "openai"\npreset = "groq"', kind="openai")
    assert groq.base_url == "https://api.groq.com/openai/v1"
    local = served(tmp_path, 'preset = "ollama"\nbase_url = "http://10.0.0.5:11434/v1"', kind="openai")
    assert local.base_url == "http://10.0.0.5:11434/v1"  # a given URL wins over the preset's


def test_an_option_of_another_dialect_is_refused_by_name(tmp_path: Path) -> None:
    found = problems(tmp_path, 'dialect = "gemini"\nregion = "us-east-1"\nproject = "x"')
    assert found == [
        "project: is not an option of dialect 'gemini'",
        "region: is not an option of dialect 'gemini'",
    ]
    assert problems(tmp_path, 'base_url = "https://x.example"\npreset = "groq"') == [
        "preset: is not an option of dialect 'anthropic'"
    ]


def test_missing_and_malformed_options_are_named(tmp_path: Path) -> None:
    assert problems(tmp_path, 'dialect = "bedrock"') == [
        "region: missing required key for dialect 'bedrock' (e.g. 'us-east-1')",
    ]
    assert problems(tmp_path, 'dialect = "vertex"\nregion = "us east"\nproject = "p"') == [
        "region: expected a region name like 'us-east-1', got 'us east'",
    ]
    assert problems(tmp_path, 'dialect = "openai"\npreset = "groqq"', kind="openai")[0].startswith(
        "preset: unknown preset 'groqq'"
    )
    assert problems(tmp_path, 'dialect = "bedrock"\nregion = "us-east-1"\naws_access_key_id = "AKIA"') == [
        "aws_access_key_id: give aws_access_key_id and aws_secret_access_key together"
    ]
    assert problems(
        tmp_path, 'dialect = "vertex"\nproject = "p"\nregion = "global"\ncredentials_file = "/nope"'
    ) == ["credentials_file: no such file: '/nope'"]


def test_azure_entra_needs_its_client_and_tenant(tmp_path: Path) -> None:
    azure = 'dialect = "azure_openai"\nbase_url = "https://r.openai.azure.com"\nauth = "entra"'
    assert problems(tmp_path, azure) == [
        "auth: 'entra' needs entra_client_id and entra_client_secret",
        "auth: 'entra' needs entra_tenant_id (or entra_token_url)",
    ]
    ok = served(tmp_path, azure + '\nentra_client_id = "c"\nentra_client_secret = "s"\nentra_tenant_id = "t"')
    assert (ok.kind, ok.dialect, ok.option("auth"), ok.option("api_version")) == (
        "openai",
        "azure_openai",
        "entra",
        None,
    )
    assert "entra_client_secret" not in repr(ok)  # options may carry credentials: never in a repr


@pytest.mark.parametrize(
    ("dialect", "kind", "family"),
    [
        ("openai", "anthropic", "openai"),
        ("anthropic", "openai", "anthropic"),
        ("azure_openai", "anthropic", "openai"),
        ("gemini", "anthropic", "openai"),
        ("bedrock", "anthropic", "anthropic"),
        ("bedrock", "openai", "openai"),
        ("vertex", "anthropic", "anthropic"),
        ("vertex", "openai", "openai"),
    ],
)
def test_the_wire_family_of_each_dialect(dialect: str, kind: str, family: str) -> None:
    assert dialect_family(dialect, kind) == family
