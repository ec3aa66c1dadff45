"""AWS Bedrock hosts (`dialect = "bedrock"`) end to end: the real gateway, the official SDKs, and a Bedrock
fake that checks every SigV4 signature, path and body shape and answers in JSON or event-stream frames.

Two providers, each on two Bedrock regions (`east` and `west`, two fakes): `claude` (Anthropic family:
InvokeModel) and `llama` (OpenAI family: Converse). Extra hosts: `badkey` (a secret Bedrock refuses) and
`noprofile` (an AWS profile that does not exist), each failing over to `east`. A gateway process takes its
credentials from the AWS environment variables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pydantic
import pytest

from tests.fakes.bedrock_routes import INPUT_TOKENS, OUTPUT_TOKENS, TOOL_ID, FakeBedrock
from tests.integration.media.conftest import ledger_row
from tests.support.gateway import GatewayProcess, Tenant, ThreadedGateway, register_tenant, write_config

KEY_ID, SECRET = "AKIDBEDROCKTEST1", "bedrock-test-secret"
TEMP_KEY_ID, TEMP_SECRET, TOKEN = "ASIABEDROCKTEMP1", "bedrock-temp-secret", "session-token-1"
ENV_KEY_ID, ENV_SECRET, ENV_TOKEN = "AKIDFROMENVIRON1", "secret-from-environ", "token-from-environ"
KEYS = {KEY_ID: (SECRET, None), TEMP_KEY_ID: (TEMP_SECRET, TOKEN), ENV_KEY_ID: (ENV_SECRET, ENV_TOKEN)}
CLAUDE = "anthropic.claude-3-5-sonnet-20241022-v2:0"
LLAMA = "meta.llama3-1-70b-instruct-v1:0"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


def _host(name: str, fake: FakeBedrock, region: str, credentials: str) -> str:
    return f"""
[[providers.hosts]]
name = "{name}"
dialect = "bedrock"
base_url = "{fake.base_url}"
region = "{region}"
{credentials}
"""


def _rows(model: str, provider: str, upstream: str, *hosts: str) -> str:
    rows = "".join(
        f'[[models.rows]]\nprovider = "{provider}"\nhost = "{host}"\n'
        f'upstream_model = "{upstream}"\npriority = {n}\n'
        for n, host in enumerate(hosts)
    )
    return f'[[models]]\nname = "{model}"\nkinds = ["chat", "messages", "responses"]\n{rows}'


STATIC = f'aws_access_key_id = "{KEY_ID}"\naws_secret_access_key = "{SECRET}"'
TEMPORARY = (
    f'aws_access_key_id = "{TEMP_KEY_ID}"\naws_secret_access_key = "{TEMP_SECRET}"\n'
    f'aws_session_token = "{TOKEN}"'
)


def bedrock_toml(storage_url: str, east: FakeBedrock, west: FakeBedrock) -> str:
    hosts = _host("east", east, "us-east-1", STATIC) + _host("west", west, "us-west-2", TEMPORARY)
    claude_hosts = hosts + _host(
        "badkey",
        east,
        "us-east-1",
        f'aws_access_key_id = "{KEY_ID}"\naws_secret_access_key = "not-the-secret"',
    )
    claude_hosts += _host("noprofile", east, "us-east-1", 'aws_profile = "no-such-profile-anywhere"')
    return f"""
[storage]
url = "{storage_url}"

[routing]
failure_threshold = 100

[[providers]]
name = "claude"
kind = "anthropic"
{claude_hosts}

[[providers]]
name = "llama"
kind = "openai"
{hosts}

{_rows("claude", "claude", CLAUDE, "east", "west")}
{_rows("llama", "llama", LLAMA, "east", "west")}
{_rows("claude-badkey", "claude", CLAUDE, "badkey", "east")}
{_rows("claude-noprofile", "claude", CLAUDE, "noprofile", "east")}
[[models]]
name = "mixed"
kinds = ["chat", "messages"]
[[models.rows]]
provider = "llama"
host = "east"
upstream_model = "{LLAMA}"
[[models.rows]]
provider = "claude"
host = "west"
upstream_model = "{CLAUDE}"
priority = 1

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeBedrock, FakeBedrock]]:
    with FakeBedrock(keys=KEYS) as east, FakeBedrock(region="us-west-2", keys=KEYS) as west:
        yield east, west


@pytest.fixture(scope="module")
def running(tmp_path_factory, fakes) -> Iterator[tuple[ThreadedGateway, Tenant]]:
    workdir = tmp_path_factory.mktemp("bedrock")
    config = write_config(workdir / "bedrock.toml", bedrock_toml(f"sqlite:///{workdir / 'gw.db'}", *fakes))
    with ThreadedGateway(config) as gateway:
        yield gateway, register_tenant(gateway.base_url)


@pytest.fixture
def east(fakes) -> FakeBedrock:
    for fake in fakes:
        fake.clear()
    return fakes[0]


@pytest.fixture
def west(fakes, east) -> FakeBedrock:
    return fakes[1]


@pytest.fixture
def client(running, east) -> Iterator[openai.OpenAI]:
    gateway, tenant = running
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def claude(running, east) -> Iterator[anthropic.Anthropic]:
    gateway, tenant = running
    with anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


def _ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _paths(fake: FakeBedrock) -> list[str]:
    return [record.path for record in fake.requests]


# -- Claude on Bedrock: InvokeModel -------------------------------------------------------------------------


def test_chat_on_claude_is_a_signed_invoke_without_model_and_is_metered(client, east, running) -> None:
    raw = client.chat.completions.with_raw_response.create(model="claude", messages=_ask("hello bedrock"))
    answer, request_id = raw.parse(), raw.headers["x-request-id"]
    assert answer.choices[0].message.content == "echo: hello bedrock"
    assert answer.usage.prompt_tokens == INPUT_TOKENS
    [sent] = east.requests
    assert sent.path == "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/invoke"
    assert sent.headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/")
    assert "/us-east-1/bedrock/aws4_request" in sent.headers["authorization"]
    assert sent.json["anthropic_version"] == "bedrock-2023-05-31" and "model" not in sent.json
    row = ledger_row(running[0].storage_url, request_id)
    assert (row["input_tokens"], row["output_tokens"]) == (INPUT_TOKENS, OUTPUT_TOKENS)


def test_messages_on_claude_carry_the_beta_header_as_anthropic_beta_and_name_the_model(claude, east) -> None:
    message = claude.messages.create(
        model="claude",
        max_tokens=50,
        messages=_ask("hi"),
        extra_headers={"anthropic-beta": "token-efficient-tools-2025-02-19, output-128k-2025-02-19"},
    )
    assert message.content[0].text == "echo: hi" and message.model == "claude"  # the client's name for it
    assert east.requests[0].json["anthropic_beta"] == [
        "token-efficient-tools-2025-02-19",
        "output-128k-2025-02-19",
    ]


def test_messages_with_tools_on_claude_come_back_as_tool_use(claude, east) -> None:
    message = claude.messages.create(
        model="claude", max_tokens=50, messages=_ask("weather in Paris?"), tools=ANTHROPIC_TOOLS
    )
    [block] = message.content
    assert (block.type, block.name, block.input, message.stop_reason) == (
        "tool_use",
        "get_weather",
        {"city": "Paris"},
        "tool_use",
    )


def test_streamed_messages_on_claude_are_messages_sse_with_usage(claude, east, running) -> None:
    with claude.messages.stream(model="claude", max_tokens=50, messages=_ask("stream me")) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo: stream me"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (INPUT_TOKENS, OUTPUT_TOKENS)
    assert _paths(east) == ["/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/invoke-with-response-stream"]
    assert "stream" not in east.requests[0].json


def test_streamed_messages_with_tools_on_claude(claude, east) -> None:
    with claude.messages.stream(
        model="claude", max_tokens=50, messages=_ask("weather?"), tools=ANTHROPIC_TOOLS
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {"city": "Paris"}


def test_chat_with_tools_on_claude_comes_back_as_tool_calls(client, east) -> None:
    answer = client.chat.completions.create(model="claude", messages=_ask("weather in Paris?"), tools=TOOLS)
    [call] = answer.choices[0].message.tool_calls
    assert (call.id, call.function.name, answer.choices[0].finish_reason) == (
        TOOL_ID,
        "get_weather",
        "tool_calls",
    )
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert east.requests[0].json["tools"][0]["input_schema"]["required"] == ["city"]


def test_streamed_chat_with_tools_on_claude_brings_tool_calls(client, east) -> None:
    chunks = list(
        client.chat.completions.create(
            model="claude",
            messages=_ask("weather?"),
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert calls[0].function.name == "get_weather"
    assert json.loads("".join(call.function.arguments or "" for call in calls)) == {"city": "Paris"}
    assert chunks[-1].usage.completion_tokens == OUTPUT_TOKENS


def test_invocation_metrics_fill_usage_and_never_reach_the_client(running, east) -> None:
    east.then("no-delta-usage")
    gateway, tenant = running
    events = httpx.post(
        f"{gateway.base_url}/v1/messages",
        headers={"x-api-key": tenant.api_key, "anthropic-version": "2023-06-01"},
        json={"model": "claude", "max_tokens": 20, "stream": True, "messages": _ask("metrics")},
        timeout=10,
    )
    assert events.status_code == 200 and events.headers["content-type"].startswith("text/event-stream")
    assert "invocationMetrics" not in events.text
    delta = next(
        line for line in events.text.splitlines() if line.startswith("data: ") and "message_delta" in line
    )
    assert json.loads(delta[6:])["usage"]["output_tokens"] == OUTPUT_TOKENS
    row = ledger_row(gateway.storage_url, events.headers["x-request-id"])
    assert row["output_tokens"] == OUTPUT_TOKENS


def test_count_tokens_on_claude_is_bedrocks_count_tokens(claude, east) -> None:
    counted = claude.messages.count_tokens(model="claude", messages=_ask("count me"))
    assert counted.input_tokens == INPUT_TOKENS
    assert _paths(east) == ["/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/count-tokens"]


# -- other models: Converse ---------------------------------------------------------------------------------


def test_chat_on_llama_is_converse_and_metered(client, east, running) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="llama",
        messages=[{"role": "system", "content": "be brief"}, *_ask("hello llama")],
        max_tokens=30,
        temperature=0.2,
        stop=["END"],
    )
    answer = raw.parse()
    assert answer.choices[0].message.content == "echo: hello llama"
    assert answer.choices[0].finish_reason == "stop" and answer.model == "llama"
    [sent] = east.requests
    assert sent.path == "/model/meta.llama3-1-70b-instruct-v1%3A0/converse"
    assert sent.json["system"] == [{"text": "be brief"}]
    assert sent.json["inferenceConfig"] == {"maxTokens": 30, "temperature": 0.2, "stopSequences": ["END"]}
    row = ledger_row(running[0].storage_url, raw.headers["x-request-id"])
    assert (row["input_tokens"], row["output_tokens"]) == (INPUT_TOKENS, OUTPUT_TOKENS)


def test_chat_with_tools_on_llama_and_the_tool_result_turn(client, east) -> None:
    first = client.chat.completions.create(model="llama", messages=_ask("weather in Paris?"), tools=TOOLS)
    [call] = first.choices[0].message.tool_calls
    assert (call.id, call.function.name, first.choices[0].finish_reason) == (
        TOOL_ID,
        "get_weather",
        "tool_calls",
    )
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    second = client.chat.completions.create(
        model="llama",
        tools=TOOLS,
        messages=[
            *_ask("weather in Paris?"),
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ],
    )
    assert second.choices[0].message.content == "the tool said: sunny"
    tool_turn = east.requests[1].json["messages"]
    assert tool_turn[1]["content"][0]["toolUse"]["input"] == {"city": "Paris"}
    assert tool_turn[2]["content"] == [{"toolResult": {"toolUseId": TOOL_ID, "content": [{"text": "sunny"}]}}]


def test_an_inline_image_reaches_converse_as_bytes(client, east) -> None:
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    content = [
        {"type": "text", "text": "what is it?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
    ]
    answer = client.chat.completions.create(model="llama", messages=[{"role": "user", "content": content}])
    assert answer.choices[0].message.content == "echo: what is it? [png image]"


def test_streamed_chat_with_tools_on_llama_has_tool_call_deltas_and_usage(client, east, running) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="llama",
        messages=_ask("weather?"),
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(raw.parse())
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert (calls[0].id, calls[0].function.name) == (TOOL_ID, "get_weather")
    assert json.loads("".join(call.function.arguments for call in calls)) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "tool_calls"
    ]
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == INPUT_TOKENS + OUTPUT_TOKENS
    assert _paths(east) == ["/model/meta.llama3-1-70b-instruct-v1%3A0/converse-stream"]
    assert ledger_row(running[0].storage_url, raw.headers["x-request-id"])["output_tokens"] == OUTPUT_TOKENS


def test_streamed_chat_text_on_llama_without_usage_asked(client, east) -> None:
    chunks = list(client.chat.completions.create(model="llama", messages=_ask("flow"), stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: flow"
    assert all(chunk.usage is None for chunk in chunks)


def test_messages_with_tools_on_llama_are_translated_to_converse(claude, east) -> None:
    message = claude.messages.create(
        model="llama", max_tokens=50, messages=_ask("weather?"), tools=ANTHROPIC_TOOLS
    )
    assert message.content[-1].type == "tool_use" and message.content[-1].input == {"city": "Paris"}
    assert _paths(east) == ["/model/meta.llama3-1-70b-instruct-v1%3A0/converse"]


def test_streamed_messages_with_tools_on_llama(claude, east) -> None:
    with claude.messages.stream(
        model="llama", max_tokens=50, messages=_ask("weather?"), tools=ANTHROPIC_TOOLS
    ) as stream:
        final = stream.get_final_message()
    [block] = [b for b in final.content if b.type == "tool_use"]
    assert (block.id, block.name, block.input, final.stop_reason) == (
        TOOL_ID,
        "get_weather",
        {"city": "Paris"},
        "tool_use",
    )
    assert _paths(east) == ["/model/meta.llama3-1-70b-instruct-v1%3A0/converse-stream"]


def test_streamed_messages_on_llama(claude, east) -> None:
    with claude.messages.stream(model="llama", max_tokens=50, messages=_ask("stream llama")) as stream:
        assert "".join(stream.text_stream) == "echo: stream llama"
        assert stream.get_final_message().usage.output_tokens == OUTPUT_TOKENS


# -- errors and failover ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["claude", "llama"])
def test_a_throttled_region_fails_over_to_the_other_signed_for_its_region(
    client, east, west, model: str
) -> None:
    east.then("throttle")
    answer = client.chat.completions.create(model=model, messages=_ask("again"))
    assert answer.choices[0].message.content == "echo: again"
    assert len(east.requests) == 1 and len(west.requests) == 1
    authorization = west.requests[0].headers["authorization"]
    assert f"Credential={TEMP_KEY_ID}/" in authorization and "/us-west-2/bedrock/" in authorization
    assert west.requests[0].headers["x-amz-security-token"] == TOKEN


@pytest.mark.parametrize("model", ["claude", "llama"])
def test_a_throttling_exception_opening_a_stream_fails_over(client, east, west, model: str) -> None:
    east.then("exception-first")
    chunks = list(client.chat.completions.create(model=model, messages=_ask("streamy"), stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: streamy"
    assert len(west.requests) == 1


def _is_an_outage(client: openai.OpenAI, model: str) -> bool:
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=model, messages=_ask("anybody?"))
    return caught.value.status_code in (502, 503)


def test_every_region_throttled_is_an_outage_not_a_500(client, east, west) -> None:
    east.then("throttle")
    west.then("unavailable")
    assert _is_an_outage(client, "llama")


@pytest.mark.parametrize("mode", ["exception-mid", "bad-crc"])
@pytest.mark.parametrize("model", ["claude", "llama"])
def test_a_stream_breaking_off_midway_ends_with_an_error_event(running, east, mode: str, model: str) -> None:
    east.then(mode)
    gateway, tenant = running
    lines: list[str] = []
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {tenant.api_key}"},
        json={"model": model, "stream": True, "messages": _ask("break please")},
        timeout=10,
    ) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            lines.append(line)
            if '"content":"echo' in line:
                east.release("mid")  # the first words reached the client: now the host breaks off
    text = "\n".join(lines)
    assert '"content":"echo' in text and "[DONE]" not in text and "Traceback" not in text
    last_event = [line for line in lines if line.startswith("data: ")][-1]
    assert json.loads(last_event[6:])["error"]["code"] == "upstream_unavailable"


def test_a_validation_error_reaches_each_client_in_its_envelope(client, claude, east, west) -> None:
    east.then("validation")
    with pytest.raises(openai.BadRequestError) as chat_error:
        client.chat.completions.create(model="llama", messages=_ask("bad"))
    assert (
        "ValidationException" in chat_error.value.message
        and "temperature out of range" in chat_error.value.message
    )
    east.then("validation")
    with pytest.raises(anthropic.BadRequestError) as messages_error:
        claude.messages.create(model="claude", max_tokens=10, messages=_ask("bad"))
    assert messages_error.value.body["error"]["type"] == "invalid_request_error"
    assert "temperature out of range" in messages_error.value.body["error"]["message"]
    assert not west.requests  # the client's fault: no failover


def test_a_malformed_answer_fails_over_before_the_first_byte(client, east, west) -> None:
    east.then("garbage")
    west.then("garbage")
    assert _is_an_outage(client, "llama")
    east.then("garbage")
    assert (
        client.chat.completions.create(model="claude", messages=_ask("ok")).choices[0].message.content
        == "echo: ok"
    )


def test_a_secret_bedrock_refuses_fails_over(client, east) -> None:
    answer = client.chat.completions.create(model="claude-badkey", messages=_ask("signed?"))
    assert answer.choices[0].message.content == "echo: signed?"
    assert len(east.requests) == 2  # the badly signed one refused (403), then the good one


def test_credentials_not_found_fail_over_at_the_request(client, east) -> None:
    answer = client.chat.completions.create(model="claude-noprofile", messages=_ask("profile?"))
    assert answer.choices[0].message.content == "echo: profile?"
    assert len(east.requests) == 1  # the host without credentials sent nothing


def test_a_route_bedrock_has_no_call_for_is_a_400(running) -> None:
    gateway, tenant = running
    answer = httpx.post(
        f"{gateway.base_url}/v1/completions",
        headers={"authorization": f"Bearer {tenant.api_key}"},
        json={"model": "llama", "prompt": "x"},
        timeout=10,
    )
    assert 400 <= answer.status_code < 500 and "Traceback" not in answer.text


# -- credentials from the environment -----------------------------------------------------------------------


def test_a_gateway_process_signs_with_the_aws_environment(tmp_path, fakes) -> None:
    east = fakes[0]
    east.clear()
    hosts = _host("env", east, "us-east-1", "")
    toml = f"""
[storage]
url = "sqlite:///{tmp_path / "gw.db"}"

[[providers]]
name = "claude"
kind = "anthropic"
{hosts}

{_rows("claude", "claude", CLAUDE, "env")}

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""
    (tmp_path / "env.toml").write_text(toml, encoding="utf-8")
    env = {
        "AWS_ACCESS_KEY_ID": ENV_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": ENV_SECRET,
        "AWS_SESSION_TOKEN": ENV_TOKEN,
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with GatewayProcess(tmp_path / "env.toml", env=env, cwd=tmp_path) as gateway:
        tenant = register_tenant(gateway.base_url)
        with anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0) as sdk:
            message = sdk.messages.create(model="claude", max_tokens=20, messages=_ask("from env"))
        assert message.content[0].text == "echo: from env"
        assert ENV_SECRET not in gateway.output()
    [sent] = east.requests
    assert f"Credential={ENV_KEY_ID}/" in sent.headers["authorization"]
    assert sent.headers["x-amz-security-token"] == ENV_TOKEN


def test_extended_thinking_and_caching_go_to_a_bedrock_claude_row_as_to_a_native_messages_host(
    claude, east, west
) -> None:
    # "mixed" prefers a Converse row (Llama); thinking and prompt caching need a native /v1/messages host,
    # which Claude on Bedrock is: the request skips the Converse row and reaches InvokeModel as it was sent.
    message = claude.messages.create(
        model="mixed",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        messages=_ask("think"),
    )
    assert message.model == "mixed"
    assert east.requests == []
    [sent] = west.requests
    assert sent.path.endswith("/invoke")
    assert sent.json["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent.json["system"][0]["cache_control"] == {"type": "ephemeral"}
    plain = claude.messages.create(model="mixed", max_tokens=50, messages=_ask("no thinking"))
    assert plain.content[0].text and east.requests[0].path.endswith("/converse")  # the preferred row again


# -- structured output and stop sequences across the families ----------------------------------------------


class Person(pydantic.BaseModel):
    name: str
    words: int


PERSON = Person(name="Ada wrote programs", words=3)


@pytest.mark.parametrize("model", ["claude", "llama"])
def test_chat_parse_on_bedrock_gets_the_schema_through_a_forced_tool(client, east, model: str) -> None:
    reply = client.chat.completions.parse(
        model=model, messages=_ask("Ada wrote programs"), response_format=Person
    )
    assert reply.choices[0].message.parsed == PERSON
    assert reply.choices[0].finish_reason == "stop"
    sent = east.requests[-1].json
    if model == "claude":  # InvokeModel: the Messages body
        assert sent["tool_choice"] == {"type": "tool", "name": "json_answer"}
        assert sent["tools"][0]["input_schema"]["properties"].keys() == {"name", "words"}
    else:  # Converse
        assert sent["toolConfig"]["toolChoice"] == {"tool": {"name": "json_answer"}}
        spec = sent["toolConfig"]["tools"][0]["toolSpec"]
        assert spec["inputSchema"]["json"]["properties"].keys() == {"name", "words"}


@pytest.mark.parametrize("model", ["claude", "llama"])
def test_chat_parse_streamed_on_bedrock(client, east, model: str) -> None:
    with client.chat.completions.stream(
        model=model, messages=_ask("Ada wrote programs"), response_format=Person
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()
    # The fake sends the tool input in two halves: each a content delta (after the opening role delta).
    assert [delta for delta in deltas if delta] == ['{"name":"Ada wrote ', 'programs","words":3}']
    assert final.choices[0].message.parsed == PERSON
    assert final.choices[0].finish_reason == "stop"


def test_json_object_on_converse_answers_a_json_object(client, east) -> None:
    reply = client.chat.completions.create(
        model="llama", messages=_ask("Ada wrote programs"), response_format={"type": "json_object"}
    )
    assert json.loads(reply.choices[0].message.content) == {"city": "Paris"}  # the fake's open-object answer
    assert east.requests[-1].json["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] == {
        "json": {"type": "object"}
    }


def test_a_converse_stop_sequence_is_a_messages_stop_sequence(claude, east) -> None:
    message = claude.messages.create(
        model="llama", max_tokens=50, messages=_ask("one two STOP three"), stop_sequences=["STOP"]
    )
    assert east.requests[-1].json["inferenceConfig"]["stopSequences"] == ["STOP"]
    assert message.content[0].text == "echo: one two "
    assert message.stop_reason == "stop_sequence"


def test_a_streamed_converse_stop_sequence_is_a_messages_stop_sequence(claude, east) -> None:
    with claude.messages.stream(
        model="llama", max_tokens=50, messages=_ask("one two STOP three"), stop_sequences=["STOP"]
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence"


def test_a_converse_stop_sequence_is_chat_stop(client, east) -> None:
    reply = client.chat.completions.create(model="llama", messages=_ask("one two STOP three"), stop="STOP")
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content == "echo: one two "


@pytest.mark.parametrize(
    ("field", "value"),
    [("n", 2), ("seed", 3), ("logprobs", True), ("parallel_tool_calls", False), ("reasoning_effort", "low")],
)
def test_a_field_converse_cannot_carry_is_refused_naming_the_provider(client, east, field, value) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="llama", messages=_ask("hi"), extra_body={field: value})
    assert refused.value.body["message"].startswith(f"'{field}' cannot be sent to provider 'llama'")
    assert east.requests == []


def test_user_and_metadata_become_converse_request_metadata(client, east) -> None:
    client.chat.completions.create(
        model="llama", messages=_ask("hi"), user="u-1", safety_identifier="s-1", metadata={"team": "a"}
    )
    assert east.requests[-1].json["requestMetadata"] == {
        "team": "a",
        "user": "u-1",
        "safety_identifier": "s-1",
    }


def test_an_image_url_to_converse_is_refused_and_never_fetched(client, east) -> None:
    part = {"type": "image_url", "image_url": {"url": f"{east.base_url}/cat.png"}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="llama", messages=[{"role": "user", "content": [part]}])
    assert "inline" in refused.value.body["message"]
    assert east.requests == []  # the URL points at the fake itself: nothing fetched it


# -- the Responses API, translated to chat, then to Converse or InvokeModel ---------------------------------


@pytest.mark.parametrize("model", ["claude", "llama"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_responses_parse_on_bedrock(client, east, model: str, stream: bool) -> None:
    if stream:
        with client.responses.stream(model=model, input="Ada wrote programs", text_format=Person) as events:
            kinds = [event.type for event in events]
            response = events.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert kinds.count("response.output_text.delta") == 2  # the fake's two halves of the tool input
    else:
        response = client.responses.parse(model=model, input="Ada wrote programs", text_format=Person)
    assert response.output_parsed == PERSON
    assert response.usage is not None and response.usage.input_tokens > 0
    sent = east.requests[-1].json
    if model == "claude":  # InvokeModel: the Messages body
        assert sent["tool_choice"] == {"type": "tool", "name": "json_answer"}
    else:  # Converse
        assert sent["toolConfig"]["toolChoice"] == {"tool": {"name": "json_answer"}}


def test_responses_with_a_function_tool_on_converse(client, east) -> None:
    tool = {"type": "function", **TOOLS[0]["function"]}
    response = client.responses.create(model="llama", input="weather in Paris?", tools=[tool])
    [call] = [item for item in response.output if item.type == "function_call"]
    assert (call.name, call.arguments) == ("get_weather", '{"city":"Paris"}')
    assert east.requests[-1].json["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"


def test_a_responses_field_converse_cannot_carry_is_refused_naming_the_provider(client, east) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="llama", input="hi", parallel_tool_calls=False)
    assert refused.value.body["message"].startswith(
        "'parallel_tool_calls' cannot be sent to provider 'llama'"
    )
    assert east.requests == []


def test_a_responses_image_url_to_converse_is_refused_and_never_fetched(client, east) -> None:
    part = {"type": "input_image", "image_url": f"{east.base_url}/cat.png", "detail": "auto"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="llama", input=[{"role": "user", "content": [part]}])
    assert "inline" in refused.value.body["message"]
    assert east.requests == []  # the URL points at the fake itself: nothing fetched it


def test_an_image_url_to_claude_on_bedrock_is_refused_and_never_fetched(claude, client, east) -> None:
    image = {"type": "image", "source": {"type": "url", "url": f"{east.base_url}/cat.png"}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="claude", max_tokens=20, messages=[{"role": "user", "content": [image]}])
    assert "inline bytes only" in refused.value.message
    part = {"type": "input_image", "image_url": f"{east.base_url}/cat.png", "detail": "auto"}
    with pytest.raises(openai.BadRequestError) as also:
        client.responses.create(model="claude", input=[{"role": "user", "content": [part]}])
    assert "'messages' cannot be sent to provider 'claude'" in str(also.value)
    assert east.requests == []  # the URL points at the fake itself: nothing fetched it


def test_responses_sampling_and_end_user_fields_reach_converse(client, east) -> None:
    client.responses.create(
        model="llama",
        input="hi",
        instructions="Be brief.",
        temperature=0.2,
        top_p=0.9,
        max_output_tokens=40,
        user="u-1",
        safety_identifier="s-1",
        metadata={"team": "a"},
    )
    sent = east.requests[-1].json
    assert sent["system"] == [{"text": "Be brief."}]
    assert sent["inferenceConfig"] == {"temperature": 0.2, "topP": 0.9, "maxTokens": 40}
    assert sent["requestMetadata"] == {"team": "a", "user": "u-1", "safety_identifier": "s-1"}
