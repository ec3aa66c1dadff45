"""The wire dialects a provider's host may speak, and the options each one takes in `[[providers.hosts]]`.

A dialect decides how a request leaves the gateway (paths, headers, signing, body format) and how the
answer comes back. Whatever the dialect, the rest of the gateway sees the host as one of two wire
families — OpenAI or Anthropic (`dialect_family`) — and the host's client (modelgate/proxy/upstream/dialects/)
rewrites each call into the host's own format and its answers back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .reader import ABSENT, Table, http_url, membership, non_empty, secret

# OpenAI-compatible clouds and local servers: `preset = "<name>"` on an `openai` host fills in its URL.
# What each one cannot do (e.g. no stream_options) is known to its client
# (modelgate/proxy/upstream/dialects/presets.py).
PRESET_URLS = {
    "groq": "https://api.groq.com/openai/v1",
    "mistral": "https://api.mistral.ai/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "together": "https://api.together.xyz/v1",
    "fireworks": "https://api.fireworks.ai/inference/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "xai": "https://api.x.ai/v1",
    "vllm": "http://127.0.0.1:8000/v1",
    "ollama": "http://127.0.0.1:11434/v1",
}

AZURE_DEFAULT_API_VERSION = "2024-10-21"
AZURE_AUTH = ("api_key", "entra")
GEMINI_DEFAULT_API_VERSION = "v1beta"


def default_base_url(dialect: str, options: dict[str, str]) -> str | None:
    """The URL a host of this dialect is reached at when it names none, else None (base_url required)."""
    if dialect == "bedrock" and options.get("region"):
        return f"https://bedrock-runtime.{options['region']}.amazonaws.com"
    if dialect == "vertex" and options.get("region"):
        region = options["region"]
        return (
            "https://aiplatform.googleapis.com"
            if region == "global"
            else f"https://{region}-aiplatform.googleapis.com"
        )
    if dialect == "gemini":
        return "https://generativelanguage.googleapis.com"
    if dialect == "openai" and options.get("preset"):
        return PRESET_URLS.get(options["preset"])
    return None


def _existing_file(value: str) -> str | None:
    return None if Path(value).is_file() else f"no such file: {value!r}"


def _region(value: str) -> str | None:
    if not value or not all(c.isalnum() or c == "-" for c in value):
        return f"expected a region name like 'us-east-1', got {value!r}"
    return None


# Per dialect: option name → its check. Every option is a string.
_OPTIONS: dict[str, dict[str, Callable[[str], str | None] | None]] = {
    "openai": {"preset": lambda v: membership("preset", v, tuple(PRESET_URLS))},
    "anthropic": {},
    "azure_openai": {
        "api_version": non_empty,
        "auth": lambda v: membership("azure auth", v, AZURE_AUTH),
        "entra_tenant_id": non_empty,
        "entra_client_id": non_empty,
        "entra_client_secret": secret,
        "entra_token_url": http_url,
        "entra_scope": non_empty,
    },
    "bedrock": {
        "region": _region,
        "aws_access_key_id": non_empty,
        "aws_secret_access_key": secret,
        "aws_session_token": secret,
        "aws_profile": non_empty,
    },
    "vertex": {"project": non_empty, "region": _region, "credentials_file": _existing_file},
    "gemini": {"api_version": non_empty},
}
ALL_OPTIONS = frozenset(name for options in _OPTIONS.values() for name in options)


def read_options(t: Table, dialect: str) -> dict[str, str]:
    """The dialect options of one host table, checked: an option of another dialect is reported, and so is
    a required one that is missing or a combination that cannot work."""
    known = _OPTIONS.get(dialect, {})
    options: dict[str, str] = {}
    for name in sorted(ALL_OPTIONS):
        if not t.has(name):
            continue
        if name not in known:
            t.string(name)  # read, so it is not reported again as an unknown key
            t.report(name, f"is not an option of dialect {dialect!r}")
            continue
        value = t.string(name, check=known[name])
        if value is not ABSENT:
            options[name] = value
    if dialect == "azure_openai" and options.get("auth") == "entra":
        if "entra_client_id" not in options or "entra_client_secret" not in options:
            t.report("auth", "'entra' needs entra_client_id and entra_client_secret")
        if "entra_tenant_id" not in options and "entra_token_url" not in options:
            t.report("auth", "'entra' needs entra_tenant_id (or entra_token_url)")
    if dialect == "bedrock":
        if "region" not in options and not t.has("region"):
            t.report("region", "missing required key for dialect 'bedrock' (e.g. 'us-east-1')")
        if ("aws_access_key_id" in options) != ("aws_secret_access_key" in options):
            t.report("aws_access_key_id", "give aws_access_key_id and aws_secret_access_key together")
        if "aws_profile" in options and "aws_access_key_id" in options:
            t.report("aws_profile", "give either aws_profile or aws_access_key_id, not both")
    if dialect == "vertex":
        for name in ("project", "region"):
            if name not in options and not t.has(name):
                t.report(name, "missing required key for dialect 'vertex'")
    return options
