"""Price parity: through the real gateway, on both storage backends, each dialect's fake provider reports a
usage shaped like that provider's documented answer (plain and streamed), and the ledger charges exactly the
bill worked out by hand from the price sheet below (micro-units, rounded up once per request).

The expected bills are computed here from the documented rates and the usage's meaning in each API (OpenAI's
prompt_tokens include cached and audio tokens; Anthropic's input_tokens exclude cache reads and writes;
Converse's inputTokens exclude its cache reads and writes; Gemini's promptTokenCount includes the cached and
tool-use prompt tokens are beside it), never by calling the gateway's own `cost`. Each case's usage stays
within its reservation (a generous max_tokens). Run with `-s` to see the table (case, billed, charged).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import anthropic
import httpx
import openai
import pytest

from tests.fakes import FakeUpstream, Fault
from tests.fakes.bedrock_routes import FakeBedrock
from tests.fakes.gemini_host import GeminiFake
from tests.integration.media.conftest import ledger_row
from tests.support.gateway import register_tenant

KEY_ID, SECRET = "AKIDPARITYTEST01", "parity-test-secret"
GEMINI_KEY = "gemini-parity-key"
MAX_TOKENS = 100_000  # generous: every case's usage stays within its reservation

# USD per million tokens (= micro-units per token) and USD per call, as the sheets below say.
OPENAI = {"input": 2.5, "cached": 1.25, "output": 10, "audio_in": 40, "audio_out": 80}
OPENAI_PRIORITY = {"input": 5, "cached": 2.5, "output": 20}
CLAUDE = {"input": 3, "cached": 0.3, "write_5m": 3.75, "write_1h": 6, "output": 15, "web_search": 0.01}
CLAUDE_LONG = {"input": 6, "cached": 0.6, "write_5m": 7.5, "write_1h": 12, "output": 22.5}
CONVERSE = {"input": 3, "cached": 0.3, "write_5m": 3.75, "output": 15}
GEMINI = {"input": 1.25, "cached": 0.125, "audio_in": 5, "output": 10}
GEMINI_LONG = {"input": 2.5, "cached": 0.25, "output": 15}


def models_toml(upstream: FakeUpstream, bedrock: FakeBedrock, gemini: GeminiFake) -> str:
    return f"""
[[providers]]
name = "fake-openai"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[providers]]
name = "fake-anthropic"
kind = "anthropic"
base_url = "{upstream.base_url}"
api_key = "upstream-key-0123456789"

[[providers]]
name = "bedrock"
kind = "openai"
[[providers.hosts]]
name = "east"
dialect = "bedrock"
base_url = "{bedrock.base_url}"
region = "us-east-1"
aws_access_key_id = "{KEY_ID}"
aws_secret_access_key = "{SECRET}"

[[providers]]
name = "google"
kind = "openai"
[[providers.hosts]]
name = "gemini"
dialect = "gemini"
base_url = "{gemini.base_url}"
api_key = "{GEMINI_KEY}"

[[models]]
name = "p-openai"
kinds = ["chat"]
max_context_tokens = 1000000
[[models.rows]]
provider = "fake-openai"
[models.prices]
input_per_mtok = {OPENAI["input"]}
cached_input_per_mtok = {OPENAI["cached"]}
output_per_mtok = {OPENAI["output"]}
input_audio_per_mtok = {OPENAI["audio_in"]}
output_audio_per_mtok = {OPENAI["audio_out"]}
[models.prices.service_tiers.priority]
input_per_mtok = {OPENAI_PRIORITY["input"]}
cached_input_per_mtok = {OPENAI_PRIORITY["cached"]}
output_per_mtok = {OPENAI_PRIORITY["output"]}

[[models]]
name = "p-claude"
kinds = ["messages"]
max_context_tokens = 1000000
[[models.rows]]
provider = "fake-anthropic"
upstream_model = "claude-sonnet-4-5"
[models.prices]
input_per_mtok = {CLAUDE["input"]}
cached_input_per_mtok = {CLAUDE["cached"]}
cache_write_5m_per_mtok = {CLAUDE["write_5m"]}
cache_write_1h_per_mtok = {CLAUDE["write_1h"]}
output_per_mtok = {CLAUDE["output"]}
per_web_search_call = {CLAUDE["web_search"]}
[[models.prices.long_context]]
above_input_tokens = 200000
input_per_mtok = {CLAUDE_LONG["input"]}
cached_input_per_mtok = {CLAUDE_LONG["cached"]}
cache_write_5m_per_mtok = {CLAUDE_LONG["write_5m"]}
cache_write_1h_per_mtok = {CLAUDE_LONG["write_1h"]}
output_per_mtok = {CLAUDE_LONG["output"]}

[[models]]
name = "p-converse"
kinds = ["chat"]
max_context_tokens = 1000000
[[models.rows]]
provider = "bedrock"
upstream_model = "meta.llama3-1-70b-instruct-v1:0"
[models.prices]
input_per_mtok = {CONVERSE["input"]}
cached_input_per_mtok = {CONVERSE["cached"]}
cache_write_5m_per_mtok = {CONVERSE["write_5m"]}
output_per_mtok = {CONVERSE["output"]}

[[models]]
name = "p-gemini"
kinds = ["chat"]
max_context_tokens = 1000000
[[models.rows]]
provider = "google"
upstream_model = "gemini-2.5-flash"
[models.prices]
input_per_mtok = {GEMINI["input"]}
cached_input_per_mtok = {GEMINI["cached"]}
input_audio_per_mtok = {GEMINI["audio_in"]}
output_per_mtok = {GEMINI["output"]}
[[models.prices.long_context]]
above_input_tokens = 200000
input_per_mtok = {GEMINI_LONG["input"]}
cached_input_per_mtok = {GEMINI_LONG["cached"]}
output_per_mtok = {GEMINI_LONG["output"]}
"""


def bill(*parts: tuple[int, float]) -> int:
    """(count, USD per million or per call in micro-units) summed exactly, rounded up once."""
    return math.ceil(sum(Fraction(count) * Fraction(str(rate)) for count, rate in parts))


@dataclass(frozen=True)
class Case:
    name: str
    dialect: str  # openai, anthropic, converse, gemini
    model: str
    reported: dict  # the usage in the provider's own shape
    billed: int  # by hand, from the rates above
    service_tier: str | None = None


CASES = [
    Case(
        "openai cached + reasoning",
        "openai",
        "p-openai",
        {
            "prompt_tokens": 1000,
            "completion_tokens": 600,
            "total_tokens": 1600,
            "prompt_tokens_details": {"cached_tokens": 400},
            "completion_tokens_details": {"reasoning_tokens": 200},
        },
        bill((600, OPENAI["input"]), (400, OPENAI["cached"]), (600, OPENAI["output"])),
    ),
    Case(
        "openai audio in / out",
        "openai",
        "p-openai",
        {
            "prompt_tokens": 1000,
            "completion_tokens": 500,
            "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 300},
            "completion_tokens_details": {"audio_tokens": 100, "reasoning_tokens": 0},
        },
        bill(
            (700, OPENAI["input"]),
            (300, OPENAI["audio_in"]),
            (400, OPENAI["output"]),
            (100, OPENAI["audio_out"]),
        ),
    ),
    Case(
        "openai service tier priority",
        "openai",
        "p-openai",
        {
            "prompt_tokens": 1000,
            "completion_tokens": 100,
            "total_tokens": 1100,
            "prompt_tokens_details": {"cached_tokens": 200},
        },
        bill(
            (800, OPENAI_PRIORITY["input"]),
            (200, OPENAI_PRIORITY["cached"]),
            (100, OPENAI_PRIORITY["output"]),
        ),
        service_tier="priority",
    ),
    Case(
        "anthropic cache reads, writes 5m/1h, web search",
        "anthropic",
        "p-claude",
        {
            "input_tokens": 100,
            "cache_read_input_tokens": 2000,
            "cache_creation_input_tokens": 700,
            "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 400},
            "output_tokens": 500,
            "server_tool_use": {"web_search_requests": 2},
        },
        bill(
            (100, CLAUDE["input"]),
            (2000, CLAUDE["cached"]),
            (300, CLAUDE["write_5m"]),
            (400, CLAUDE["write_1h"]),
            (500, CLAUDE["output"]),
            (2 * 1_000_000, CLAUDE["web_search"]),
        ),
    ),
    Case(
        "anthropic long context (> 200k prompt)",
        "anthropic",
        "p-claude",
        {"input_tokens": 150_000, "cache_read_input_tokens": 60_000, "output_tokens": 1000},
        bill((150_000, CLAUDE_LONG["input"]), (60_000, CLAUDE_LONG["cached"]), (1000, CLAUDE_LONG["output"])),
    ),
    Case(
        "bedrock converse cache read / write",
        "converse",
        "p-converse",
        {
            "inputTokens": 20,
            "outputTokens": 5,
            "totalTokens": 39,
            "cacheReadInputTokens": 11,
            "cacheWriteInputTokens": 3,
        },
        bill(
            (20, CONVERSE["input"]),
            (11, CONVERSE["cached"]),
            (3, CONVERSE["write_5m"]),
            (5, CONVERSE["output"]),
        ),
    ),
    Case(
        "gemini cached, thoughts, tool-use prompt",
        "gemini",
        "p-gemini",
        {
            "promptTokenCount": 1000,
            "cachedContentTokenCount": 400,
            "toolUsePromptTokenCount": 100,
            "candidatesTokenCount": 200,
            "thoughtsTokenCount": 300,
            "totalTokenCount": 1600,
        },
        bill((700, GEMINI["input"]), (400, GEMINI["cached"]), (500, GEMINI["output"])),
    ),
    Case(
        "gemini audio prompt",
        "gemini",
        "p-gemini",
        {
            "promptTokenCount": 1000,
            "candidatesTokenCount": 100,
            "totalTokenCount": 1100,
            "promptTokensDetails": [
                {"modality": "TEXT", "tokenCount": 400},
                {"modality": "AUDIO", "tokenCount": 600},
            ],
        },
        bill((400, GEMINI["input"]), (600, GEMINI["audio_in"]), (100, GEMINI["output"])),
    ),
    Case(
        "gemini long context (> 200k prompt)",
        "gemini",
        "p-gemini",
        {"promptTokenCount": 250_000, "candidatesTokenCount": 100, "totalTokenCount": 250_100},
        bill((250_000, GEMINI_LONG["input"]), (100, GEMINI_LONG["output"])),
    ),
]


@pytest.fixture
def fakes() -> Iterator[tuple[FakeUpstream, FakeBedrock, GeminiFake]]:
    with (
        FakeUpstream("parity") as upstream,
        FakeBedrock(keys={KEY_ID: (SECRET, None)}) as bedrock,
        GeminiFake(api_keys=(GEMINI_KEY,)) as gemini,
    ):
        yield upstream, bedrock, gemini


def _send(case: Case, stream: bool, base_url: str, api_key: str, request_id: str) -> None:
    headers = {"x-request-id": request_id}
    if case.dialect == "anthropic":
        client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0)
        args = {
            "model": case.model,
            "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": "hi"}],
        }
        if stream:
            with client.messages.stream(**args, extra_headers=headers) as events:
                events.until_done()
        else:
            client.messages.create(**args, extra_headers=headers, timeout=60)
        return
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0)
    args = {"model": case.model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": "hi"}]}
    if case.service_tier:
        args["service_tier"] = case.service_tier
    if stream:
        for _ in client.chat.completions.create(**args, stream=True, extra_headers=headers):
            pass
    else:
        client.chat.completions.create(**args, extra_headers=headers)


def test_the_ledger_charges_each_dialects_reported_usage_exactly_as_the_price_sheet_bills_it(
    start_gateway, fakes, capsys
) -> None:
    upstream, bedrock, gemini = fakes
    gateway = start_gateway(extra=models_toml(upstream, bedrock, gemini))
    tenant = register_tenant(gateway.base_url)
    table = []
    for case in CASES:
        for stream in (False, True):
            request_id = f"parity-{secrets.token_hex(8)}"
            if case.dialect in ("openai", "anthropic"):
                path = "/v1/chat/completions" if case.dialect == "openai" else "/v1/messages"
                reported = {"usage": case.reported}
                if case.service_tier:
                    reported["service_tier"] = case.service_tier
                upstream.add_fault(path, Fault(report_usage=reported))
            elif case.dialect == "converse":
                bedrock.state.report_usage = case.reported
            else:
                gemini.state.report_usage = case.reported
            _send(case, stream, gateway.base_url, tenant.api_key, request_id)
            charged = ledger_row(gateway.storage_url, request_id)["cost_micros"]
            table.append((f"{case.name}, {'streamed' if stream else 'plain'}", case.billed, charged))
    with capsys.disabled():
        print(f"\n{'case':<58} {'billed µ':>10} {'charged µ':>10}")
        for name, billed, charged in table:
            print(f"{name:<58} {billed:>10} {charged:>10}")
    assert [(name, charged) for name, _, charged in table] == [(name, billed) for name, billed, _ in table]


def test_a_service_tier_the_sheet_does_not_price_is_refused_before_anything_is_sent(
    start_gateway, fakes
) -> None:
    upstream, bedrock, gemini = fakes
    gateway = start_gateway(extra=models_toml(upstream, bedrock, gemini))
    tenant = register_tenant(gateway.base_url)
    reply = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {tenant.api_key}"},
        json={"model": "p-openai", "messages": [{"role": "user", "content": "hi"}], "service_tier": "flex"},
        timeout=30,
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["message"] == (
        "Invalid 'service_tier': 'flex' is not priced for model 'p-openai';"
        " ask for one it prices or leave it out."
    )
    assert upstream.requests_to("/v1/chat/completions") == []
