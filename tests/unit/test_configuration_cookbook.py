"""The provider cookbook (docs/configuration.md) is copied by users as it stands: each of its TOML examples
loads, and builds the client its hosts' dialects name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelgate.config import load_config
from modelgate.plugins import chain_plugins
from modelgate.proxy.upstream.providers import build_upstreams

CONFIGURATION = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
ENV = {"ANTHROPIC_API_KEY": "a", "OPENAI_KEY_1": "b", "OPENAI_KEY_2": "c", "AZURE_OPENAI_KEY": "d"}


def cookbook_examples() -> list[str]:
    text = CONFIGURATION.read_text(encoding="utf-8")
    section = text[text.index("**Provider cookbook") :]
    end = section.find("\n## ")
    section = section if end < 0 else section[:end]
    return re.findall(r"```toml\n(.*?)```", section, re.DOTALL)


def test_the_cookbook_has_its_two_examples() -> None:
    assert len(cookbook_examples()) == 2  # Anthropic + Bedrock + Vertex; OpenAI + Azure with local servers


@pytest.mark.parametrize("example", cookbook_examples(), ids=["claude-three-clouds", "gpt-azure-and-local"])
def test_each_cookbook_example_loads_and_builds_its_hosts_clients(tmp_path: Path, example: str) -> None:
    path = tmp_path / "cookbook.toml"
    path.write_text(example + '\n[[plans]]\ncode = "free"\n', encoding="utf-8")
    config = load_config(path, env=ENV, chain=chain_plugins())
    clients = {
        name: (type(client).__name__, client.kind)
        for name, client in build_upstreams(config.providers).items()
    }
    expected = {
        "claude@anthropic": ("HttpUpstream", "anthropic"),
        "claude@bedrock": ("BedrockUpstream", "anthropic"),
        "claude@vertex": ("VertexUpstream", "anthropic"),
        "gpt@openai": ("HttpUpstream", "openai"),
        "gpt@azure": ("AzureUpstream", "openai"),
        "local@ollama": ("PresetUpstream", "openai"),
        "local@vllm": ("PresetUpstream", "openai"),
    }
    by_example = {"claude": {"claude@anthropic", "claude@bedrock", "claude@vertex"}}
    names = by_example["claude"] if "claude@anthropic" in clients else set(expected) - by_example["claude"]
    assert clients == {name: expected[name] for name in names}
    assert all(row.host for model in config.models for row in model.rows)
