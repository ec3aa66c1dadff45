"""OpenAI-compatible presets end to end: the official SDKs through the gateway to fakes that behave like
Groq, Mistral, Ollama and OpenRouter and refuse what those services refuse.

Chat and /v1/messages, plain and streamed, with tools; usage reaches the ledger (the host's own, Groq's
`x_groq.usage` lifted, or an estimate marked as one when the host streams none); Groq's 498 and
OpenRouter's 402 fail over to the next row; a client error keeps its message; a malformed answer ends in a
clean error.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.fakes.preset_routes import COMPLETION_TOKENS, PROMPT_TOKENS, PresetFake
from tests.integration.media.conftest import ledger_row
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

KEYS = {"groq": "groq-key", "mistral": "mistral-key", "openrouter": "or-key"}
PRESETS = ("groq", "mistral", "ollama", "openrouter")
FAILOVER_MODELS = {
    "groq-then-ollama": ("groq", "ollama"),
    "openrouter-then-mistral": ("openrouter", "mistral"),
}
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}
ANTHROPIC_TOOL = {
    "name": "lookup",
    "description": "Look a word up",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


def presets_toml(storage_url: str, fakes: dict[str, PresetFake]) -> str:
    hosts = ""
    for name, fake in fakes.items():
        key = f'api_key = "{KEYS[name]}"\n' if name in KEYS else ""
        hosts += f'\n[[providers.hosts]]\nname = "{name}"\nbase_url = "{fake.url}"\npreset = "{name}"\n{key}'
    models = ""
    served = {f"{name}-model": (name,) for name in PRESETS} | FAILOVER_MODELS
    for model, rows in served.items():
        models += f'\n[[models]]\nname = "{model}"\nkinds = ["chat", "messages", "responses"]\n'
        for priority, host in enumerate(rows):
            models += f'[[models.rows]]\nprovider = "compat"\nhost = "{host}"\npriority = {priority}\n'
    return f"""
[storage]
url = "{storage_url}"

[routing]
failure_threshold = 100

[[providers]]
name = "compat"
kind = "openai"
{hosts}
{models}
[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, PresetFake]]:
    with (
        PresetFake("groq", api_key=KEYS["groq"]) as groq,
        PresetFake("mistral", api_key=KEYS["mistral"]) as mistral,
        PresetFake("ollama", stream_usage="none") as ollama,  # an Ollama that streams no usage
        PresetFake("openrouter", api_key=KEYS["openrouter"]) as openrouter,
    ):
        yield {"groq": groq, "mistral": mistral, "ollama": ollama, "openrouter": openrouter}


@pytest.fixture(scope="module")
def running(tmp_path_factory, fakes) -> Iterator[tuple[ThreadedGateway, Tenant, str]]:
    workdir = tmp_path_factory.mktemp("presets")
    storage_url = f"sqlite:///{workdir / 'gw.db'}"
    config = write_config(workdir / "presets.toml", presets_toml(storage_url, fakes))
    with ThreadedGateway(config) as gateway:
        yield gateway, register_tenant(gateway.base_url), storage_url


@pytest.fixture
def client(running, fakes) -> Iterator[openai.OpenAI]:
    for fake in fakes.values():
        fake.clear()
        fake.clear_faults()
    gateway, tenant, _ = running
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def claude(running, client) -> Iterator[anthropic.Anthropic]:
    gateway, tenant, _ = running
    with anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


def _sent(fake: PresetFake) -> dict:
    [request] = fake.requests
    return request.json


def _checked_auth(fake: PresetFake, preset: str) -> None:
    [request] = fake.requests
    assert request.path.endswith("/chat/completions")
    assert request.path.startswith({"groq": "/openai/v1", "openrouter": "/api/v1"}.get(preset, "/v1"))
    if preset in KEYS:
        assert request.headers["authorization"] == f"Bearer {KEYS[preset]}"
    else:
        assert "authorization" not in request.headers


@pytest.mark.parametrize("preset", PRESETS)
def test_plain_chat_with_refused_fields_dropped(client, fakes, running, preset) -> None:
    reply = client.chat.completions.with_raw_response.create(
        model=f"{preset}-model",
        messages=[{"role": "user", "content": "hello", "name": "ann"}],
        logprobs=False,
        n=1,
        seed=7,
        user="u-1",
        max_completion_tokens=50,
    )
    answer = reply.parse()
    assert answer.choices[0].message.content == "echo: hello"
    _checked_auth(fakes[preset], preset)
    sent = _sent(fakes[preset])
    if preset == "groq":
        assert "logprobs" not in sent and "n" not in sent and "name" not in sent["messages"][0]
    if preset == "mistral":
        assert sent["random_seed"] == 7 and "seed" not in sent and "user" not in sent
        assert sent["max_tokens"] == 50 and "max_completion_tokens" not in sent
    row = ledger_row(running[2], reply.headers["x-request-id"])
    assert (row["input_tokens"], row["output_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)


@pytest.mark.parametrize("preset", PRESETS)
def test_streamed_chat_with_tools_and_usage(client, fakes, running, preset) -> None:
    with client.chat.completions.with_streaming_response.create(
        model=f"{preset}-model",
        messages=[{"role": "user", "content": "find cats"}],
        tools=[TOOL],
        stream=True,
        stream_options={"include_usage": True},
    ) as reply:
        request_id = reply.headers["x-request-id"]
        chunks = [orjson.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
    arguments = "".join(
        call["function"].get("arguments") or ""
        for chunk in chunks
        for choice in chunk["choices"]
        for call in choice["delta"].get("tool_calls") or ()
    )
    assert orjson.loads(arguments) == {"q": "find cats"}
    usages = [chunk["usage"] for chunk in chunks if chunk.get("usage")]
    assert usages, "the client asked for usage"
    sent = _sent(fakes[preset])
    assert ("stream_options" in sent) == (preset != "mistral")
    row = ledger_row(running[2], request_id)
    if preset == "ollama":  # streamed no usage: estimated, and marked so
        assert usages[-1]["estimated"] is True
        assert usages[-1]["prompt_tokens"] == row["input_tokens"] > 0
        assert usages[-1]["completion_tokens"] == row["output_tokens"] > 0
        assert row["usage_estimated"]
    else:
        assert "estimated" not in usages[-1]
        assert (row["input_tokens"], row["output_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)
        assert not row["usage_estimated"]


def test_groq_usage_in_x_groq_is_lifted_into_a_usage_chunk(client, fakes) -> None:
    with client.chat.completions.with_streaming_response.create(
        model="groq-model",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as reply:
        chunks = [orjson.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
    [usage_chunk] = [chunk for chunk in chunks if chunk.get("usage")]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
    }


@pytest.mark.parametrize("preset", ("groq", "mistral", "ollama"))
def test_messages_plain_and_streamed_with_tools(claude, fakes, running, preset) -> None:
    message = claude.messages.create(
        model=f"{preset}-model",
        max_tokens=40,
        system="be brief",
        messages=[{"role": "user", "content": "find dogs"}],
        tools=[ANTHROPIC_TOOL],
    )
    [use] = [block for block in message.content if block.type == "tool_use"]
    assert use.name == "lookup" and use.input == {"q": "find dogs"}
    assert message.stop_reason == "tool_use"
    fakes[preset].clear()
    with claude.messages.stream(
        model=f"{preset}-model", max_tokens=40, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo: hi"
    assert final.usage.output_tokens > 0
    sent = _sent(fakes[preset])
    assert sent["stream"] is True and ("stream_options" in sent) == (preset != "mistral")


@pytest.mark.parametrize("preset", ("mistral", "ollama"))
def test_a_responses_request_reaches_a_host_without_the_responses_api_as_chat(client, fakes, preset) -> None:
    answer = client.responses.create(model=f"{preset}-model", input="hi", instructions="be brief")
    sent = _sent(fakes[preset])
    assert fakes[preset].requests[0].path.endswith("/chat/completions")
    assert sent["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert answer.object == "response" and answer.output_text == "echo: hi"
    assert answer.usage is not None and answer.usage.input_tokens == PROMPT_TOKENS
    fakes[preset].clear()
    with client.responses.stream(model=f"{preset}-model", input="hi") as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == "echo: hi" and final.status == "completed"
    assert _sent(fakes[preset])["stream"] is True


@pytest.mark.parametrize("preset", ("groq", "openrouter"))
def test_a_responses_request_to_a_host_with_the_responses_api_is_forwarded_as_written(
    client, fakes, preset
) -> None:
    with pytest.raises(openai.APIStatusError):  # the fake serves chat only: the request reached /responses
        client.responses.create(model=f"{preset}-model", input="hi")
    [request] = fakes[preset].requests
    assert request.path.endswith("/responses") and request.json["input"] == "hi"


OPENROUTER_STREAM_ERROR = (
    b": OPENROUTER PROCESSING\n\n"
    b'data: {"id": "x", "object": "chat.completion.chunk",'
    b' "error": {"code": 503, "message": "no provider"}}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize(
    ("model", "status", "body"),
    [
        # Groq's flex tier at capacity
        ("groq-then-ollama", 498, {"error": {"message": "capacity exceeded", "type": "capacity_exceeded"}}),
        # OpenRouter out of credits
        ("openrouter-then-mistral", 402, {"error": {"code": 402, "message": "Insufficient credits"}}),
        # OpenRouter's error inside a 200 answer, whole or as the stream's first event
        ("openrouter-then-mistral", 200, {"error": {"code": 502, "message": "upstream model is down"}}),
        ("openrouter-then-mistral", 200, OPENROUTER_STREAM_ERROR),
    ],
)
def test_a_host_that_cannot_serve_now_fails_over_to_the_next_row(client, fakes, model, status, body) -> None:
    first, second = FAILOVER_MODELS[model]
    fakes[first].fail_next(status, body)
    messages = [{"role": "user", "content": "x"}]
    if isinstance(body, bytes):  # a stream
        with client.chat.completions.create(model=model, messages=messages, stream=True) as stream:
            text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    else:
        text = client.chat.completions.create(model=model, messages=messages).choices[0].message.content
    assert text == "echo: x"
    assert len(fakes[first].requests) == 1 and len(fakes[second].requests) == 1


def test_every_row_out_of_credits_is_an_error_not_a_402_to_the_client(client, fakes) -> None:
    fakes["openrouter"].fail_next(402, {"error": {"code": 402, "message": "Insufficient credits"}})
    fakes["mistral"].fail_next(402, {"object": "error", "message": "Payment required", "type": "payment"})
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="openrouter-then-mistral", messages=[{"role": "user", "content": "w"}]
        )
    assert caught.value.status_code in (429, 502, 503)


def test_a_client_error_keeps_its_message_in_the_openai_envelope(client, fakes) -> None:
    fakes["mistral"].fail_next(
        422,
        {
            "object": "error",
            "message": {
                "detail": [{"type": "less_than_equal", "loc": ["body", "temperature"], "msg": "bad"}]
            },
            "type": "invalid_request_error",
        },
    )
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(model="mistral-model", messages=[{"role": "user", "content": "v"}])
    assert "temperature: bad" in caught.value.message


def test_a_refused_field_asking_for_something_is_a_clear_400(client, fakes) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="groq-model", messages=[{"role": "user", "content": "u"}], logprobs=True
        )
    assert "'logprobs' is not supported" in caught.value.message
    assert fakes["groq"].requests == []  # never sent to a host that would refuse it


def test_a_malformed_answer_ends_in_a_clean_error(client, fakes, running) -> None:
    fakes["openrouter"].fail_next(200, b"{not json")
    gateway, tenant, _ = running
    reply = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {tenant.api_key}"},
        json={"model": "openrouter-model", "messages": [{"role": "user", "content": "t"}]},
    )
    assert reply.status_code in (502, 503)  # the only row's answer could not be read: no 500
    assert "error" in reply.json() and "Traceback" not in reply.text
