"""The shipped price catalogue charges through the real gateway, on both storage backends: models the config
serves WITHOUT prices of their own are charged by the catalogue's entry of their upstream model name, one
case per provider family (OpenAI: a cache read, a cache write, the priority tier; Gemini's long-context
tier; DeepSeek's cache hit and xAI, each on its preset host), plain and streamed; a model that names prices
is charged by them (config wins).

The expected bills are worked out here by hand from the provider's published rates (the figures the
catalogue cites, docs/prices.md), never by calling the gateway's own `cost` or reading the catalogue file: a
wrong figure in the data file fails here.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import openai
import pytest

from tests.fakes import FakeUpstream, Fault
from tests.fakes.gemini_host import MODELS, GeminiFake
from tests.integration.billing.test_price_parity import GEMINI_KEY, Case, _send, bill
from tests.integration.media.conftest import ledger_row
from tests.support.gateway import register_tenant

# The providers' list prices, USD per million tokens (= micro-units per token), as read on their pages.
GPT_4_1 = {"input": 2.0, "cached": 0.5, "output": 8.0}  # developers.openai.com/api/docs/pricing
GPT_5_PRIORITY = {"input": 2.5, "cached": 0.25, "output": 20.0}  # openai.com/api-priority-processing
GPT_6_SOL = {"input": 2.0, "cached": 0.2, "write": 2.5, "output": 10.0}  # cache writes at 1.25x input
GEMINI_25_PRO_LONG = {"input": 2.5, "cached": 0.25, "output": 15.0}  # above 200K prompt tokens
DEEPSEEK_FLASH = {"miss": 0.3, "hit": 0.006, "output": 1.2}  # peak rates, api-docs.deepseek.com
GROK_4_3 = {"input": 1.25, "cached": 0.2, "output": 2.5}  # docs.x.ai/developers/models
OWN = {"input": 7.0, "output": 9.0}  # the config's own sheet for a catalogued upstream model


CASES = [
    Case(
        "openai gpt-4.1, cache read",
        "openai",
        "c-gpt-4.1",
        {"prompt_tokens": 3000, "completion_tokens": 400, "prompt_tokens_details": {"cached_tokens": 1000}},
        bill((2000, GPT_4_1["input"]), (1000, GPT_4_1["cached"]), (400, GPT_4_1["output"])),
    ),
    Case(
        "openai gpt-5, priority tier",
        "openai",
        "c-gpt-5",
        {
            "prompt_tokens": 1000,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 200},
            "completion_tokens_details": {"reasoning_tokens": 200},
        },
        # Reasoning tokens are output tokens, at the tier's output rate too.
        bill(
            (800, GPT_5_PRIORITY["input"]), (200, GPT_5_PRIORITY["cached"]), (300, GPT_5_PRIORITY["output"])
        ),
        service_tier="priority",
    ),
    Case(
        "openai gpt-6-sol, cache read and cache write",
        "openai",
        "c-gpt-6-sol",
        {
            "prompt_tokens": 3000,
            "completion_tokens": 200,
            "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 500},
        },
        bill(
            (1500, GPT_6_SOL["input"]),
            (1000, GPT_6_SOL["cached"]),
            (500, GPT_6_SOL["write"]),
            (200, GPT_6_SOL["output"]),
        ),
    ),
    Case(
        "gemini 2.5 pro, long context (> 200k prompt)",
        "gemini",
        "c-gemini-pro",
        {
            "promptTokenCount": 250_000,
            "cachedContentTokenCount": 50_000,
            "candidatesTokenCount": 100,
            "thoughtsTokenCount": 400,
            "totalTokenCount": 250_500,
        },
        bill(
            (200_000, GEMINI_25_PRO_LONG["input"]),
            (50_000, GEMINI_25_PRO_LONG["cached"]),
            (500, GEMINI_25_PRO_LONG["output"]),
        ),
    ),
    Case(
        "deepseek flash on its preset, cache hit",
        "openai",
        "c-deepseek",
        {
            "prompt_tokens": 5000,
            "completion_tokens": 250,
            "prompt_cache_hit_tokens": 4000,
            "prompt_cache_miss_tokens": 1000,
        },
        bill((1000, DEEPSEEK_FLASH["miss"]), (4000, DEEPSEEK_FLASH["hit"]), (250, DEEPSEEK_FLASH["output"])),
    ),
    Case(
        "xai grok 4.3 on its preset, cache read",
        "openai",
        "c-grok",
        {"prompt_tokens": 2000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 1500}},
        bill((500, GROK_4_3["input"]), (1500, GROK_4_3["cached"]), (100, GROK_4_3["output"])),
    ),
    Case(
        "config wins over the catalogue (gpt-4.1 with its own prices)",
        "openai",
        "c-gpt-4.1-own",
        {"prompt_tokens": 3000, "completion_tokens": 400, "prompt_tokens_details": {"cached_tokens": 1000}},
        # The own sheet names no cached rate: a cache read costs its input rate.
        bill((3000, OWN["input"]), (400, OWN["output"])),
    ),
]


def models_toml(upstream: FakeUpstream, gemini: GeminiFake) -> str:
    def served(name: str, provider: str, upstream_model: str, prices: str = "") -> str:
        return (
            f'\n[[models]]\nname = "{name}"\nkinds = ["chat"]\n[[models.rows]]\nprovider = "{provider}"\n'
            f'upstream_model = "{upstream_model}"\n{prices}'
        )

    own = f"[models.prices]\ninput_per_mtok = {OWN['input']}\noutput_per_mtok = {OWN['output']}\n"
    return (
        f"""
[[providers]]
name = "openai"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[providers]]
name = "google"
kind = "openai"
[[providers.hosts]]
name = "gemini"
dialect = "gemini"
base_url = "{gemini.base_url}"
api_key = "{GEMINI_KEY}"

[[providers]]
name = "compat"
kind = "openai"
[[providers.hosts]]
name = "deepseek"
preset = "deepseek"
base_url = "{upstream.base_url}/v1"
api_key = "deepseek-key"
[[providers.hosts]]
name = "xai"
preset = "xai"
base_url = "{upstream.base_url}/v1"
api_key = "xai-key"
"""
        + served("c-gpt-4.1", "openai", "gpt-4.1")
        + served("c-gpt-5", "openai", "gpt-5")
        + served("c-gpt-6-sol", "openai", "gpt-6-sol")
        + served("c-gpt-4.1-own", "openai", "gpt-4.1", own)
        + served("c-gemini-pro", "google", "gemini-2.5-pro")
        + served("c-deepseek", "compat", "deepseek-flash").replace(
            'provider = "compat"\n', 'provider = "compat"\nhost = "deepseek"\n'
        )
        + served("c-grok", "compat", "grok-4.3").replace(
            'provider = "compat"\n', 'provider = "compat"\nhost = "xai"\n'
        )
    )


@pytest.fixture
def fakes() -> Iterator[tuple[FakeUpstream, GeminiFake]]:
    with (
        FakeUpstream("catalogue") as upstream,
        GeminiFake(api_keys=(GEMINI_KEY,), models=(*MODELS, "gemini-2.5-pro")) as gemini,
    ):
        yield upstream, gemini


def test_models_without_prices_are_charged_by_the_catalogue_and_config_prices_win(
    start_gateway, fakes: tuple[FakeUpstream, GeminiFake]
) -> None:
    upstream, gemini = fakes
    gateway = start_gateway(extra=models_toml(upstream, gemini))
    tenant = register_tenant(gateway.base_url)
    charged = []
    for case in CASES:
        for stream in (False, True):
            request_id = f"catalogue-{secrets.token_hex(8)}"
            if case.dialect == "gemini":
                gemini.state.report_usage = case.reported
            else:
                reported: dict = {"usage": case.reported}
                if case.service_tier:
                    reported["service_tier"] = case.service_tier
                upstream.add_fault("/v1/chat/completions", Fault(report_usage=reported))
            _send(case, stream, gateway.base_url, tenant.api_key, request_id)
            row = ledger_row(gateway.storage_url, request_id)
            charged.append((f"{case.name}, {'streamed' if stream else 'plain'}", row["cost_micros"]))
    expected = [(f"{case.name}, {kind}", case.billed) for case in CASES for kind in ("plain", "streamed")]
    assert charged == expected
    # The preset hosts were really used: DeepSeek's and xAI's keys reached the fake.
    keys = {r.headers.get("authorization") for r in upstream.requests_to("/v1/chat/completions")}
    assert {"Bearer deepseek-key", "Bearer xai-key"} <= keys


def test_a_service_tier_the_catalogue_sheet_does_not_price_is_refused_before_anything_is_sent(
    start_gateway, fakes: tuple[FakeUpstream, GeminiFake]
) -> None:
    upstream, gemini = fakes
    gateway = start_gateway(extra=models_toml(upstream, gemini))
    tenant = register_tenant(gateway.base_url)
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        # gpt-4.1's catalogue sheet prices the priority tier, not flex.
        client.chat.completions.create(
            model="c-gpt-4.1", messages=[{"role": "user", "content": "hi"}], service_tier="flex"
        )
    assert "'flex' is not priced for model 'c-gpt-4.1'" in str(refused.value)
    assert upstream.requests_to("/v1/chat/completions") == []
