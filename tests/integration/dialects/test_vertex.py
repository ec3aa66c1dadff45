"""The Vertex AI dialect end to end: the real gateway in front of GeminiFake's Vertex paths and token
endpoint, with a service account whose fresh RSA key signs the token requests (the fake verifies the
signature). Claude on Vertex (rawPredict, streamRawPredict, count-tokens) and Gemini on Vertex
(generateContent), each through the official `openai` and `anthropic` SDKs, plain and streamed, with tools;
tokens cached and refreshed ahead of expiry; usage in the ledger; failover; errors in the client's
envelope."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator

import anthropic
import openai
import pydantic
import pytest

from modelgate.config import ProviderConfig
from tests.fakes.gemini_claude import CLAUDE_USAGE
from tests.fakes.gemini_host import PROJECT, REGION, GeminiFake
from tests.fakes.gemini_routes import USAGE
from tests.integration.dialects.google_sdks import anthropic_sdk, openai_sdk
from tests.integration.media.conftest import ledger_row
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

LOCATION = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers"
CLAUDE_PATH = f"{LOCATION}/anthropic/models/claude-sonnet-4-6"
GEMINI_PATH = f"{LOCATION}/google/models/gemini-2.5-flash"
CLAUDE_TOOLS = [
    {"name": "lookup", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}
]
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "lookup", "parameters": CLAUDE_TOOLS[0]["input_schema"]}}
]


def vertex_toml(storage_url: str, fake: GeminiFake, credentials: str) -> str:
    host = f"""dialect = "vertex"
base_url = "{fake.base_url}"
project = "{PROJECT}"
region = "{REGION}"
"""
    return f"""
[storage]
url = "{storage_url}"

[routing]
failure_threshold = 100

[[providers]]
name = "anthropic-on-vertex"
kind = "anthropic"
api_key = "sk-ant-never-sent-to-google"

[[providers.hosts]]
name = "east"
{host}credentials_file = "{credentials}"

[[providers.hosts]]
name = "west"
{host}credentials_file = "{credentials}"

[[providers]]
name = "google-on-vertex"
kind = "openai"

[[providers.hosts]]
name = "gcp"
{host}credentials_file = "{credentials}"

[[providers.hosts]]
name = "adc"
{host}
[[providers.hosts]]
name = "fresh"
{host}credentials_file = "{credentials}"

[[providers.hosts]]
name = "doomed"
{host}credentials_file = "{credentials}"

[[models]]
name = "gem-fresh"
kinds = ["chat"]
[[models.rows]]
provider = "google-on-vertex"
host = "fresh"
upstream_model = "gemini-2.5-flash"

[[models]]
name = "gem-failover"
kinds = ["chat"]
[[models.rows]]
provider = "google-on-vertex"
host = "doomed"
upstream_model = "gemini-2.5-flash"
[[models.rows]]
provider = "google-on-vertex"
host = "gcp"
upstream_model = "gemini-2.5-flash"
priority = 1

[[models]]
name = "gem-doomed"
kinds = ["chat"]
[[models.rows]]
provider = "google-on-vertex"
host = "doomed"
upstream_model = "gemini-2.5-flash"
[[models]]
name = "claude"
kinds = ["chat", "messages", "responses"]
[[models.rows]]
provider = "anthropic-on-vertex"
host = "east"
upstream_model = "claude-sonnet-4-6"
[[models.rows]]
provider = "anthropic-on-vertex"
host = "west"
upstream_model = "claude-sonnet-4-6"
priority = 1

[[models]]
name = "gem"
kinds = ["chat", "messages", "responses"]
[[models.rows]]
provider = "google-on-vertex"
host = "gcp"
upstream_model = "gemini-2.5-flash"

[[models]]
name = "gem-adc"
kinds = ["chat"]
[[models.rows]]
provider = "google-on-vertex"
host = "adc"
upstream_model = "gemini-2.5-flash"

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[GeminiFake]:
    with GeminiFake() as server:
        yield server


@pytest.fixture(scope="module")
def running(tmp_path_factory, fake) -> Iterator[tuple[ThreadedGateway, Tenant]]:
    workdir = tmp_path_factory.mktemp("vertex")
    credentials = fake.service_account_file(workdir)
    storage = f"sqlite:///{workdir / 'gw.db'}"
    config = write_config(workdir / "vertex.toml", vertex_toml(storage, fake, str(credentials)))
    # The "adc" host names no file: Application Default Credentials find the same account through the
    # variable google-auth reads.
    saved = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(credentials)
    try:
        with ThreadedGateway(config) as gateway:
            yield gateway, register_tenant(gateway.base_url)
    finally:
        if saved is None:
            os.environ.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
        else:
            os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = saved


@pytest.fixture
def client(running, fake) -> Iterator[openai.OpenAI]:
    with openai_sdk(running, fake) as sdk:
        yield sdk


@pytest.fixture
def claude(running, fake) -> Iterator[anthropic.Anthropic]:
    with anthropic_sdk(running, fake) as sdk:
        yield sdk


def _bearer_is_issued(fake: GeminiFake) -> None:
    for request in fake.requests:
        assert request.headers["authorization"].removeprefix("Bearer ") in fake.state.tokens_issued
        assert "x-api-key" not in request.headers and "x-goog-api-key" not in request.headers


# -- Claude on Vertex --------------------------------------------------------------------------------


def test_messages_go_to_raw_predict_without_model_and_with_vertex_version(running, claude, fake) -> None:
    raw = claude.messages.with_raw_response.create(
        model="claude", max_tokens=20, messages=[{"role": "user", "content": "hello"}]
    )
    message = raw.parse()
    assert message.content[0].text == "echo: hello"
    [sent] = fake.requests
    assert sent.path == f"{CLAUDE_PATH}:rawPredict"
    assert sent.json["anthropic_version"] == "vertex-2023-10-16" and "model" not in sent.json
    _bearer_is_issued(fake)
    row = ledger_row(running[0].storage_url, raw.headers["x-request-id"])
    assert (row["input_tokens"], row["output_tokens"]) == (
        CLAUDE_USAGE["input_tokens"],
        CLAUDE_USAGE["output_tokens"],
    )


def test_messages_streamed_with_tools_go_to_stream_raw_predict(claude, fake) -> None:
    asked = [{"role": "user", "content": "find owls"}]
    with claude.messages.stream(model="claude", max_tokens=20, messages=asked, tools=CLAUDE_TOOLS) as stream:
        called = stream.get_final_message()
    [use] = [b for b in called.content if b.type == "tool_use"]
    assert called.stop_reason == "tool_use" and use.input == {"text": "find owls"}
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "two owls"}
    asked += [{"role": "assistant", "content": called.content}, {"role": "user", "content": [result]}]
    with claude.messages.stream(model="claude", max_tokens=20, messages=asked, tools=CLAUDE_TOOLS) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "tool said: two owls" and final.usage.output_tokens == CLAUDE_USAGE["output_tokens"]
    assert [r.path for r in fake.requests] == [f"{CLAUDE_PATH}:streamRawPredict"] * 2


def test_chat_on_claude_on_vertex_plain_streamed_and_with_tools(client, fake) -> None:
    answer = client.chat.completions.create(model="claude", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "echo: hi"
    assert answer.usage.prompt_tokens == CLAUDE_USAGE["input_tokens"]
    stream = client.chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "hi"}], tools=CHAT_TOOLS, stream=True
    )
    calls = [t for c in stream if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert calls[0].function.name == "lookup"
    assert [r.path.rsplit(":", 1)[1] for r in fake.requests] == ["rawPredict", "streamRawPredict"]


def test_count_tokens_goes_to_the_count_tokens_model(claude, fake) -> None:
    counted = claude.messages.count_tokens(
        model="claude", messages=[{"role": "user", "content": "one two three"}]
    )
    assert counted.input_tokens == 3
    [sent] = fake.requests
    assert sent.path == f"{LOCATION}/anthropic/models/count-tokens:rawPredict"
    assert sent.json["model"] == "claude-sonnet-4-6" and sent.json["anthropic_version"] == "vertex-2023-10-16"


def test_a_throttled_region_fails_over_to_the_other_host(claude, fake) -> None:
    quota = {
        "error": {"code": 429, "message": "Quota exceeded for aiplatform", "status": "RESOURCE_EXHAUSTED"}
    }
    fake.add_fault(429, quota)
    message = claude.messages.create(
        model="claude", max_tokens=20, messages=[{"role": "user", "content": "x"}]
    )
    assert message.content[0].text == "echo: x"
    assert len(fake.requests) == 2


def test_googles_error_on_claude_reaches_the_client_in_anthropics_envelope(claude, fake) -> None:
    bad = {
        "error": {
            "code": 400,
            "message": "Request contains an invalid argument.",
            "status": "INVALID_ARGUMENT",
        }
    }
    fake.add_fault(400, bad)
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="claude", max_tokens=20, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["type"] == "error"
    assert "invalid argument" in caught.value.message


# -- Gemini on Vertex --------------------------------------------------------------------------------


def test_chat_on_gemini_on_vertex_plain_and_streamed(running, client, fake) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gem", messages=[{"role": "user", "content": "hello"}]
    )
    assert raw.parse().choices[0].message.content == "echo: hello"
    stream = client.chat.completions.create(
        model="gem",
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: hello"
    assert chunks[-1].usage.prompt_tokens == USAGE["promptTokenCount"]
    assert [(r.path, r.query) for r in fake.requests] == [
        (f"{GEMINI_PATH}:generateContent", {}),
        (f"{GEMINI_PATH}:streamGenerateContent", {"alt": "sse"}),
    ]
    assert all(c["role"] in ("user", "model") for r in fake.requests for c in r.json["contents"])
    _bearer_is_issued(fake)
    row = ledger_row(running[0].storage_url, raw.headers["x-request-id"])
    assert row["input_tokens"] == USAGE["promptTokenCount"]


def test_tools_on_gemini_on_vertex_through_both_sdks(client, claude) -> None:
    first = client.chat.completions.create(
        model="gem", messages=[{"role": "user", "content": "find cats"}], tools=CHAT_TOOLS
    )
    [call] = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "lookup"
    with claude.messages.stream(
        model="gem", max_tokens=20, messages=[{"role": "user", "content": "cats"}], tools=CLAUDE_TOOLS
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == {"text": "cats"}
    message = claude.messages.create(
        model="gem", max_tokens=20, messages=[{"role": "user", "content": "hey"}]
    )
    assert message.content[0].text == "echo: hey"


def test_a_blocked_prompt_on_gemini_on_vertex_is_a_clear_400(client) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gem", messages=[{"role": "user", "content": "blocked"}])
    assert "content filter" in caught.value.message


def test_application_default_credentials_serve_a_host_without_a_file(client, fake) -> None:
    answer = client.chat.completions.create(model="gem-adc", messages=[{"role": "user", "content": "adc"}])
    assert answer.choices[0].message.content == "echo: adc"
    _bearer_is_issued(fake)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("model", ["claude", "gem"])
def test_both_sdks_get_tool_calls_from_both_families(client, claude, model: str, stream: bool) -> None:
    asked = [{"role": "user", "content": "find moles"}]
    chat = client.chat.completions.create(model=model, messages=asked, tools=CHAT_TOOLS, stream=stream)
    if stream:
        calls = [t for c in chat if c.choices for t in c.choices[0].delta.tool_calls or ()]
        name, arguments = calls[0].function.name, "".join(t.function.arguments or "" for t in calls)
    else:
        [call] = chat.choices[0].message.tool_calls
        name, arguments = call.function.name, call.function.arguments
    assert name == "lookup" and json.loads(arguments) == {"text": "find moles"}
    if stream:
        with claude.messages.stream(model=model, max_tokens=20, messages=asked, tools=CLAUDE_TOOLS) as events:
            message = events.get_final_message()
    else:
        message = claude.messages.create(model=model, max_tokens=20, messages=asked, tools=CLAUDE_TOOLS)
    [use] = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and (use.name, use.input) == ("lookup", {"text": "find moles"})


# -- tokens ------------------------------------------------------------------------------------------


def test_a_token_is_refreshed_within_five_minutes_of_expiry_and_kept_otherwise(client, fake) -> None:
    fake.state.expires_in = 60  # within the refresh margin as soon as it is issued
    bearers = []
    try:
        for n in range(4):
            if n == 2:
                fake.state.expires_in = 3600
            client.chat.completions.create(model="gem-fresh", messages=[{"role": "user", "content": "t"}])
            bearers.append(fake.requests[-1].headers["authorization"])
    finally:
        fake.state.expires_in = 3600
    assert len(set(bearers[:3])) == 3  # the short-lived ones were refreshed on the next request
    assert bearers[3] == bearers[2]  # the long-lived one is kept
    _bearer_is_issued(fake)


def test_a_token_failure_fails_the_request_over_to_the_next_row(client, fake) -> None:
    fake.state.refuse_tokens = True
    try:
        answer = client.chat.completions.create(
            model="gem-failover", messages=[{"role": "user", "content": "still"}]
        )
    finally:
        fake.state.refuse_tokens = False
    assert answer.choices[0].message.content == "echo: still"  # served by the host holding a token


def test_a_token_failure_with_no_other_row_is_a_clean_503(client, fake) -> None:
    fake.state.refuse_tokens = True
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="gem-doomed", messages=[{"role": "user", "content": "x"}])
    finally:
        fake.state.refuse_tokens = False
    assert caught.value.status_code in (502, 503)
    assert fake.requests == []  # nothing went to a model without a token


def test_requests_waiting_for_a_token_share_one_refresh(tmp_path, fake) -> None:
    from modelgate.proxy.upstream.dialects.vertex_auth import GoogleToken

    token = GoogleToken(str(fake.service_account_file(tmp_path)), "vertex")
    before = fake.state.token_requests

    async def many() -> list[str]:
        return await asyncio.gather(*(token.bearer() for _ in range(8)))

    bearers = asyncio.run(many())
    assert len(set(bearers)) == 1 and bearers[0].startswith("Bearer ya29.")
    assert fake.state.token_requests == before + 1


def test_a_token_signed_by_a_key_google_does_not_know_is_an_upstream_failure(tmp_path, fake) -> None:
    from modelgate.proxy.upstream.dialects.vertex_auth import GoogleToken
    from modelgate.proxy.upstream.providers import UpstreamFailure

    credentials = fake.service_account_file(tmp_path)
    fake.state.public_keys.pop()  # the key was revoked: its signature no longer verifies
    with pytest.raises(UpstreamFailure, match="could not get a Google access token"):
        asyncio.run(GoogleToken(str(credentials), "vertex").bearer())


def test_missing_google_auth_is_a_clear_error(monkeypatch) -> None:
    from modelgate.proxy.upstream.dialects.vertex import VertexUpstream

    monkeypatch.setitem(sys.modules, "google.auth", None)
    config = ProviderConfig(
        name="v",
        kind="openai",
        base_url="https://x",
        dialect="vertex",
        options=(("project", "p"), ("region", "r")),
    )
    with pytest.raises(RuntimeError, match=r"pip install modelgate\[vertex\]"):
        VertexUpstream(config)


# -- structured output ---------------------------------------------------------------------------------------


class Person(pydantic.BaseModel):
    name: str
    words: int


@pytest.mark.parametrize("model", ["claude", "gem"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_chat_parse_on_both_families_on_vertex(client, fake, model: str, stream: bool) -> None:
    asked = [{"role": "user", "content": "Ada wrote programs"}]
    if stream:
        with client.chat.completions.stream(model=model, messages=asked, response_format=Person) as events:
            reply = events.get_final_completion()
    else:
        reply = client.chat.completions.parse(model=model, messages=asked, response_format=Person)
    assert reply.choices[0].message.parsed == Person(name="Ada wrote programs", words=3)
    assert reply.choices[0].finish_reason == "stop"
    sent = fake.requests[-1].json
    if model == "claude":  # rawPredict: the Messages body with the answer tool forced
        assert sent["tool_choice"] == {"type": "tool", "name": "json_answer"}
    else:
        assert sent["generationConfig"]["responseMimeType"] == "application/json"


@pytest.mark.parametrize("model", ["claude", "gem"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_responses_parse_on_both_families_on_vertex(client, fake, model: str, stream: bool) -> None:
    if stream:
        with client.responses.stream(model=model, input="Ada wrote programs", text_format=Person) as events:
            response = events.get_final_response()
    else:
        response = client.responses.parse(model=model, input="Ada wrote programs", text_format=Person)
    assert response.output_parsed == Person(name="Ada wrote programs", words=3)
    assert response.status == "completed"
    sent = fake.requests[-1].json
    if model == "claude":  # rawPredict: the Messages body with the answer tool forced
        assert sent["tool_choice"] == {"type": "tool", "name": "json_answer"}
    else:
        assert sent["generationConfig"]["responseMimeType"] == "application/json"


def test_an_image_url_to_claude_on_vertex_is_refused_and_never_fetched(claude, fake) -> None:
    image = {"type": "image", "source": {"type": "url", "url": f"{fake.base_url}/cat.png"}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="claude", max_tokens=20, messages=[{"role": "user", "content": [image]}])
    assert "inline bytes only" in refused.value.message
    assert fake.requests == []  # the URL points at the fake itself: nothing fetched it
