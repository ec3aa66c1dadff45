"""The clients of hosts that speak a dialect of their own (`[[providers.hosts]] dialect = ...`).

One module per dialect, one registry: `dialect_upstream` builds the client a host's dialect names. Each
module is imported only when a host uses it, so its libraries (botocore, google-auth) are needed only then.
"""

from __future__ import annotations

import importlib

from modelgate.config import ProviderConfig
from modelgate.proxy.upstream.dialects.base import DialectUpstream

# dialect → "module:class" under this package
_REGISTRY = {
    "azure_openai": "azure:AzureUpstream",
    "bedrock": "bedrock:BedrockUpstream",
    "vertex": "vertex:VertexUpstream",
    "gemini": "gemini:GeminiUpstream",
    "openai": "presets:PresetUpstream",  # an OpenAI-compatible cloud or local server (`preset = ...`)
}


def dialect_upstream(config: ProviderConfig) -> DialectUpstream:
    """The client for one host of a dialect of its own (`config` is the provider as that host serves it)."""
    module_name, _, class_name = _REGISTRY[config.dialect or config.kind].partition(":")
    module = importlib.import_module(f"{__name__}.{module_name}")
    return getattr(module, class_name)(config)
