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

import asyncio
import math
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import anthropic
import httpx
import openai
import orjson
import pytest

from modelgate.storage import open_database
from tests.fakes import FakeUpstream, Fault
from tests.fakes.azure_routes import AzureFake
from tests.fakes.bedrock_routes import FakeBedrock
from tests.fakes.gemini_host import PROJECT, REGION, GeminiFake
from tests.integration.media.conftest import ledger_row
from tests.support.gateway import register_tenant

KEY_ID, SECRET = "AKIDPARITYTEST01", "parity-test-secret"
GEMINI_KEY = "gemini-parity-key"
AZURE_KEY = "azure-parity-key"
CLAUDE_ON_BEDROCK = "anthropic.claude-3-5-sonnet-20241022-v2:0"
MAX_TOKENS = 100_000  # generous: every case's usage stays within its reservation

# USD per million tokens (= micro-units per token) and USD per call, as the sheets below say.
OPENAI = {"input": 2.5, "cached": 1.25, "output": 10, "audio_in": 40, "audio_out": 80}
OPENAI_PRIORITY = {"input": 5, "cached": 2.5, "output": 20}
OPENAI_TOOLS = {"web_search": 0.01, "file_search": 0.0025}
AZURE = {"input": 2.5, "cached": 1.25, "output": 10}
IMAGES = {"per_image": 0.04, "1024x1024/high": 0.167}
CLAUDE = {"input": 3, "cached": 0.3, "write_5m": 3.75, "write_1h": 6, "output": 15, "web_search": 0.01}
CLAUDE_LONG = {"input": 6, "cached": 0.6, "write_5m": 7.5, "write_1h": 12, "output": 22.5}
CONVERSE = {"input": 3, "cached": 0.3, "write_5m": 3.75, "output": 15}
GEMINI = {"input": 1.25, "cached": 0.125, "audio_in": 5, "output": 10}
GEMINI_LONG = {"input": 2.5, "cached": 0.25, "output": 15}


@dataclass(frozen=True)
class Fakes:
    upstream: FakeUpstream
    bedrock: FakeBedrock
    gemini: GeminiFake
    azure: AzureFake
    credentials: str  # a service-account file the Gemini fake knows, for its Vertex routes


_SHEET_KEYS = {
    "input": "input_per_mtok",
    "cached": "cached_input_per_mtok",
    "write_5m": "cache_write_5m_per_mtok",
    "write_1h": "cache_write_1h_per_mtok",
    "output": "output_per_mtok",
    "audio_in": "input_audio_per_mtok",
    "audio_out": "output_audio_per_mtok",
    "web_search": "per_web_search_call",
    "file_search": "per_file_search_call",
}


def sheet(*rates: dict, long_context: tuple[int, dict] | None = None, tiers: dict | None = None) -> str:
    """A [models.prices] table of these rates (USD per million tokens, per call)."""
    lines = ["[models.prices]"]
    lines += [f"{_SHEET_KEYS[kind]} = {rate}" for prices in rates for kind, rate in prices.items()]
    if long_context is not None:
        above, prices = long_context
        lines += ["[[models.prices.long_context]]", f"above_input_tokens = {above}"]
        lines += [f"{_SHEET_KEYS[kind]} = {rate}" for kind, rate in prices.items()]
    for name, prices in (tiers or {}).items():
        lines.append(f"[models.prices.service_tiers.{name}]")
        lines += [f"{_SHEET_KEYS[kind]} = {rate}" for kind, rate in prices.items()]
    return "\n".join(lines) + "\n"


def model(name: str, kinds: str, provider: str, upstream_model: str | None, prices: str) -> str:
    upstream = f'upstream_model = "{upstream_model}"\n' if upstream_model else ""
    return (
        f'\n[[models]]\nname = "{name}"\nkinds = [{kinds}]\nmax_context_tokens = 1000000\n'
        f'[[models.rows]]\nprovider = "{provider}"\n{upstream}{prices}'
    )


def models_toml(fakes: Fakes) -> str:
    vertex = (
        f'dialect = "vertex"\nbase_url = "{fakes.gemini.base_url}"\nproject = "{PROJECT}"\n'
        f'region = "{REGION}"\ncredentials_file = "{fakes.credentials}"'
    )
    bedrock = (
        f'dialect = "bedrock"\nbase_url = "{fakes.bedrock.base_url}"\nregion = "us-east-1"\n'
        f'aws_access_key_id = "{KEY_ID}"\naws_secret_access_key = "{SECRET}"'
    )
    providers = f"""
[[providers]]
name = "fake-openai"
kind = "openai"
base_url = "{fakes.upstream.base_url}/v1"

[[providers]]
name = "fake-anthropic"
kind = "anthropic"
base_url = "{fakes.upstream.base_url}"
api_key = "upstream-key-0123456789"

[[providers]]
name = "azure"
kind = "openai"
[[providers.hosts]]
name = "azure"
dialect = "azure_openai"
base_url = "{fakes.azure.base_url}"
api_key = "{AZURE_KEY}"

[[providers]]
name = "bedrock"
kind = "openai"
[[providers.hosts]]
name = "east"
{bedrock}

[[providers]]
name = "bedrock-claude"
kind = "anthropic"
[[providers.hosts]]
name = "east"
{bedrock}

[[providers]]
name = "google"
kind = "openai"
[[providers.hosts]]
name = "gemini"
dialect = "gemini"
base_url = "{fakes.gemini.base_url}"
api_key = "{GEMINI_KEY}"

[[providers]]
name = "vertex-google"
kind = "openai"
[[providers.hosts]]
name = "gcp"
{vertex}

[[providers]]
name = "vertex-claude"
kind = "anthropic"
api_key = "never-sent-to-google"
[[providers.hosts]]
name = "gcp"
{vertex}
"""
    claude = sheet(CLAUDE, long_context=(200_000, CLAUDE_LONG))
    gemini = sheet(GEMINI, long_context=(200_000, GEMINI_LONG))
    return (
        providers
        + model("p-openai", '"chat", "responses"', "fake-openai", None,
                sheet(OPENAI, OPENAI_TOOLS, tiers={"priority": OPENAI_PRIORITY}))
        + model("p-claude", '"messages", "chat", "responses"', "fake-anthropic", "claude-sonnet-4-5", claude)
        + model("p-converse", '"chat", "responses"', "bedrock", "meta.llama3-1-70b-instruct-v1:0",
                sheet(CONVERSE))
        + model("p-gemini", '"chat", "responses"', "google", "gemini-2.5-flash", gemini)
        + model("p-azure", '"chat"', "azure", "gpt4o-prod", sheet(AZURE))
        + model("p-invoke", '"messages"', "bedrock-claude", CLAUDE_ON_BEDROCK, claude)
        + model("p-vertex-claude", '"messages"', "vertex-claude", "claude-sonnet-4-6", claude)
        + model("p-vertex-gemini", '"chat"', "vertex-google", "gemini-2.5-flash", gemini)
        + f"""
[[models]]
name = "p-image"
kinds = ["images"]
[[models.rows]]
provider = "fake-openai"
[models.prices]
per_image = {IMAGES["per_image"]}
[models.prices.per_image_by]
"1024x1024/high" = {IMAGES["1024x1024/high"]}
"""
    )  # fmt: skip


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
    output_items: tuple[dict, ...] = ()  # Responses tool-call items the answer lists


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
    Case(
        "openai responses: web and file search calls, reasoning",
        "responses",
        "p-openai",
        {
            "input_tokens": 2000,
            "input_tokens_details": {"cached_tokens": 500, "cache_write_tokens": 0},
            "output_tokens": 300,
            "output_tokens_details": {"reasoning_tokens": 100},
            "total_tokens": 2300,
        },
        bill(
            (1500, OPENAI["input"]),
            (500, OPENAI["cached"]),
            (300, OPENAI["output"]),
            (2 * 1_000_000, OPENAI_TOOLS["web_search"]),
            (1 * 1_000_000, OPENAI_TOOLS["file_search"]),
        ),
        output_items=(
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "web_search_call", "id": "ws_2", "status": "completed"},
            {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": []},
        ),
    ),
    Case(
        "chat translated to anthropic messages: cache 5m/1h",
        "chat-on-anthropic",
        "p-claude",
        {
            "input_tokens": 40,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 600,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 400},
            "output_tokens": 60,
        },
        bill(
            (40, CLAUDE["input"]),
            (1000, CLAUDE["cached"]),
            (200, CLAUDE["write_5m"]),
            (400, CLAUDE["write_1h"]),
            (60, CLAUDE["output"]),
        ),
    ),
    Case(
        "responses translated to anthropic messages: cache 5m/1h",
        "responses-on-anthropic",
        "p-claude",
        {
            "input_tokens": 50,
            "cache_read_input_tokens": 900,
            "cache_creation_input_tokens": 300,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
            "output_tokens": 70,
        },
        bill(
            (50, CLAUDE["input"]),
            (900, CLAUDE["cached"]),
            (100, CLAUDE["write_5m"]),
            (200, CLAUDE["write_1h"]),
            (70, CLAUDE["output"]),
        ),
    ),
    Case(
        "responses translated to bedrock converse: cache read / write",
        "responses-on-converse",
        "p-converse",
        {
            "inputTokens": 30,
            "outputTokens": 8,
            "totalTokens": 57,
            "cacheReadInputTokens": 12,
            "cacheWriteInputTokens": 7,
        },
        bill(
            (30, CONVERSE["input"]),
            (12, CONVERSE["cached"]),
            (7, CONVERSE["write_5m"]),
            (8, CONVERSE["output"]),
        ),
    ),
    Case(
        "responses translated to gemini: cached, thoughts",
        "responses-on-gemini",
        "p-gemini",
        {
            "promptTokenCount": 800,
            "cachedContentTokenCount": 300,
            "candidatesTokenCount": 120,
            "thoughtsTokenCount": 80,
            "totalTokenCount": 1000,
        },
        bill((500, GEMINI["input"]), (300, GEMINI["cached"]), (200, GEMINI["output"])),
    ),
    Case(
        "azure cached + reasoning",
        "azure",
        "p-azure",
        {
            "prompt_tokens": 1200,
            "completion_tokens": 400,
            "total_tokens": 1600,
            "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 300, "audio_tokens": 0},
        },
        bill((176, AZURE["input"]), (1024, AZURE["cached"]), (400, AZURE["output"])),
    ),
    Case(
        "bedrock invoke: cache reads, writes 5m/1h",
        "invoke",
        "p-invoke",
        {
            "input_tokens": 30,
            "cache_read_input_tokens": 500,
            "cache_creation_input_tokens": 150,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 50},
            "output_tokens": 40,
        },
        bill(
            (30, CLAUDE["input"]),
            (500, CLAUDE["cached"]),
            (100, CLAUDE["write_5m"]),
            (50, CLAUDE["write_1h"]),
            (40, CLAUDE["output"]),
        ),
    ),
    Case(
        "vertex claude: plain cache write, web search",
        "vertex-claude",
        "p-vertex-claude",
        {
            "input_tokens": 10,
            "cache_creation_input_tokens": 200,
            "output_tokens": 20,
            "server_tool_use": {"web_search_requests": 1},
        },
        bill(
            (10, CLAUDE["input"]),
            (200, CLAUDE["write_5m"]),
            (20, CLAUDE["output"]),
            (1_000_000, CLAUDE["web_search"]),
        ),
    ),
    Case(
        "vertex gemini cached + thoughts",
        "vertex-gemini",
        "p-vertex-gemini",
        {
            "promptTokenCount": 3000,
            "cachedContentTokenCount": 1000,
            "candidatesTokenCount": 100,
            "thoughtsTokenCount": 50,
            "totalTokenCount": 3150,
        },
        bill((2000, GEMINI["input"]), (1000, GEMINI["cached"]), (150, GEMINI["output"])),
    ),
    Case(
        "images by size and quality (n=2, 1024x1024 high)",
        "images",
        "p-image",
        {},
        bill((2 * 1_000_000, IMAGES["1024x1024/high"])),
    ),
]


@pytest.fixture
def fakes(tmp_path) -> Iterator[Fakes]:
    with (
        FakeUpstream("parity") as upstream,
        FakeBedrock(keys={KEY_ID: (SECRET, None)}) as bedrock,
        GeminiFake(api_keys=(GEMINI_KEY,)) as gemini,
        AzureFake(api_keys=(AZURE_KEY,)) as azure,
    ):
        yield Fakes(upstream, bedrock, gemini, azure, str(gemini.service_account_file(tmp_path)))


_ANTHROPIC_SDK = ("anthropic", "invoke", "vertex-claude")


def _report(case: Case, fakes: Fakes) -> None:
    """Have the case's fake provider report the case's usage on its next answers."""
    if case.dialect in ("openai", "anthropic", "chat-on-anthropic", "responses", "responses-on-anthropic"):
        path = {
            "openai": "/v1/chat/completions",
            "anthropic": "/v1/messages",
            "chat-on-anthropic": "/v1/messages",
            "responses-on-anthropic": "/v1/messages",
            "responses": "/v1/responses",
        }
        reported: dict = {"usage": case.reported}
        if case.service_tier:
            reported["service_tier"] = case.service_tier
        if case.output_items:
            reported["output_items"] = list(case.output_items)
        fakes.upstream.add_fault(path[case.dialect], Fault(report_usage=reported))
    elif case.dialect in ("converse", "responses-on-converse"):
        fakes.bedrock.state.report_usage = case.reported
    elif case.dialect == "invoke":
        fakes.bedrock.state.report_claude_usage = case.reported
    elif case.dialect in ("gemini", "vertex-gemini", "responses-on-gemini"):
        fakes.gemini.state.report_usage = case.reported
    elif case.dialect == "vertex-claude":
        fakes.gemini.state.report_claude_usage = case.reported
    elif case.dialect == "azure":
        fakes.azure.state.report_usage = case.reported


def _send(case: Case, stream: bool, base_url: str, api_key: str, request_id: str) -> None:
    headers = {"x-request-id": request_id}
    prompt = [{"role": "user", "content": "hi"}]
    if case.dialect in _ANTHROPIC_SDK:
        claude = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0)
        args = {"model": case.model, "max_tokens": MAX_TOKENS, "messages": prompt, "extra_headers": headers}
        if stream:
            with claude.messages.stream(**args) as events:
                events.until_done()
        else:
            claude.messages.create(**args, timeout=60)
        return
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0)
    if case.dialect == "images":
        client.images.generate(model=case.model, prompt="a cat", n=2, size="1024x1024", quality="high",
                               extra_headers=headers)  # fmt: skip
        return
    if case.dialect.startswith("responses"):
        answer = client.responses.create(
            model=case.model, input="hi", max_output_tokens=MAX_TOKENS, stream=stream, extra_headers=headers
        )
        for _ in answer if stream else ():
            pass
        return
    args = {"model": case.model, "max_tokens": MAX_TOKENS, "messages": prompt, "extra_headers": headers}
    if case.service_tier:
        args["service_tier"] = case.service_tier
    if stream:
        for _ in client.chat.completions.create(**args, stream=True):
            pass
    else:
        client.chat.completions.create(**args)


def test_the_ledger_charges_each_dialects_reported_usage_exactly_as_the_price_sheet_bills_it(
    start_gateway, fakes: Fakes, capsys
) -> None:
    gateway = start_gateway(extra=models_toml(fakes))
    tenant = register_tenant(gateway.base_url)
    table = []
    for case in CASES:
        for stream in (False, True) if case.dialect != "images" else (False,):
            request_id = f"parity-{secrets.token_hex(8)}"
            _report(case, fakes)
            _send(case, stream, gateway.base_url, tenant.api_key, request_id)
            charged = ledger_row(gateway.storage_url, request_id)["cost_micros"]
            table.append((f"{case.name}, {'streamed' if stream else 'plain'}", case.billed, charged))
    with capsys.disabled():
        print(f"\n{'case':<62} {'billed µ':>10} {'charged µ':>10}")
        for name, billed, charged in table:
            print(f"{name:<62} {billed:>10} {charged:>10}")
    assert [(name, charged) for name, _, charged in table] == [(name, billed) for name, billed, _ in table]


def test_the_ledger_row_keeps_the_usage_kinds_beyond_its_token_columns(start_gateway, fakes: Fakes) -> None:
    gateway = start_gateway(extra=models_toml(fakes))
    tenant = register_tenant(gateway.base_url)
    case = next(case for case in CASES if case.dialect == "anthropic")
    _report(case, fakes)
    request_id = f"parity-{secrets.token_hex(8)}"
    _send(case, True, gateway.base_url, tenant.api_key, request_id)
    ledger_row(gateway.storage_url, request_id)  # flushed
    plain = f"parity-{secrets.token_hex(8)}"
    _report(CASES[0], fakes)
    _send(CASES[0], False, gateway.base_url, tenant.api_key, plain)  # OpenAI: reasoning only
    ledger_row(gateway.storage_url, plain)

    async def details() -> dict[str, str | None]:
        db = await open_database(gateway.storage_url)
        try:
            rows = await db.fetch(
                "SELECT request_id, usage_detail FROM usage_ledger WHERE request_id IN ($1, $2)",
                request_id,
                plain,
            )
        finally:
            await db.close()
        return {row["request_id"]: row["usage_detail"] for row in rows}

    found = asyncio.run(details())
    assert orjson.loads(found[request_id]) == {
        "cache_write_5m_tokens": 300,
        "cache_write_1h_tokens": 400,
        "web_search_calls": 2,
    }
    assert orjson.loads(found[plain]) == {"reasoning_tokens": 200}


def test_a_service_tier_the_sheet_does_not_price_is_refused_before_anything_is_sent(
    start_gateway, fakes: Fakes
) -> None:
    gateway = start_gateway(extra=models_toml(fakes))
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
    assert fakes.upstream.requests_to("/v1/chat/completions") == []
