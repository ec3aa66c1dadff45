"""Azure OpenAI hosts (`dialect = "azure_openai"`) end to end: the real gateway, the official SDKs, and
an Azure fake that checks deployment paths, api-version, `api-key` or Entra bearer tokens.

One provider, its hosts: `keyed` (two api-keys, the default dated api-version), `entra`, `shortentra` and
`badentra` (Entra ID tokens from the fake's token endpoint: long-lived, within five minutes of expiry,
refused), `v1` (the v1 path, no api-version) and `spare` (a second resource, another api-version, that a
throttled or deployment-less one fails over to)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from modelgate.config.dialects import AZURE_DEFAULT_API_VERSION
from tests.fakes.azure_routes import (
    CLIENT_ID,
    CLIENT_SECRET,
    SHORT_LIVED_CLIENT_ID,
    TENANT,
    AzureFake,
    deployment_not_found,
    malformed,
    throttled,
)
from tests.integration.media.conftest import ledger_row
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

KEY, KEY2, SPARE_KEY = "azure-key-1", "azure-key-2", "azure-key-spare"
DEPLOYMENT = "gpt4o-prod"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a text up",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "lookup",
        "description": "Look a text up",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    }
]


def _host(name: str, base_url: str, **options: str | tuple[str, ...]) -> str:
    lines = [
        f"{key} = {json.dumps(value) if isinstance(value, str) else json.dumps(list(value))}"
        for key, value in options.items()
    ]
    return "\n".join(
        [
            "[[providers.hosts]]",
            f'name = "{name}"',
            'dialect = "azure_openai"',
            f'base_url = "{base_url}"',
            *lines,
        ]
    )


def _model(name: str, kinds: list[str], *hosts: str, deployment: str = DEPLOYMENT) -> str:
    """A model served by `hosts` in turn (the first one's deployment may be another)."""
    rows = [
        f'[[models.rows]]\nprovider = "azure"\nhost = "{host}"\npriority = {at}\n'
        f'upstream_model = "{deployment if at == 0 else DEPLOYMENT}"'
        for at, host in enumerate(hosts)
    ]
    return "\n".join(["[[models]]", f'name = "{name}"', f"kinds = {json.dumps(kinds)}", *rows])


def azure_toml(storage_url: str, main: AzureFake, spare: AzureFake) -> str:
    entra = {"auth": "entra", "entra_token_url": main.token_url, "entra_client_secret": CLIENT_SECRET}
    hosts = [
        _host("keyed", main.base_url, api_key=KEY),
        _host("entra", f"{main.base_url}/openai", entra_client_id=CLIENT_ID, **entra),
        _host("shortentra", main.base_url, entra_client_id=SHORT_LIVED_CLIENT_ID, **entra),
        _host(
            "badentra",
            main.base_url,
            **{**entra, "entra_client_id": CLIENT_ID, "entra_client_secret": "wrong"},
        ),
        _host("busy", main.base_url, api_keys=(KEY, KEY2)),
        _host("v1", main.base_url, api_version="v1", api_key=KEY),
        _host("spare", spare.base_url, api_version="2025-04-01-preview", api_key=SPARE_KEY),
    ]
    models = [
        _model("gpt", ["chat", "messages", "responses", "audio_transcriptions"], "keyed", "spare"),
        _model("by-token", ["chat", "messages", "audio_transcriptions"], "entra"),
        _model("short-token", ["chat"], "shortentra"),
        _model("bad-token", ["chat"], "badentra"),
        _model("on-v1", ["chat", "messages", "responses"], "v1"),
        _model("missing", ["chat"], "keyed", "spare", deployment="no-such-deployment"),
        _model("busy", ["chat"], "busy", "spare"),
        _model("video", ["videos"], "keyed"),
    ]
    providers = "\n\n".join(['[[providers]]\nname = "azure"\nkind = "openai"', *hosts, *models])
    return f"""
[storage]
url = "{storage_url}"

[routing]
failure_threshold = 100

{providers}

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[AzureFake, AzureFake]]:
    with AzureFake(api_keys=(KEY, KEY2)) as main, AzureFake(api_keys=(SPARE_KEY,)) as spare:
        yield main, spare


@pytest.fixture(scope="module")
def running(tmp_path_factory, fakes) -> Iterator[tuple[ThreadedGateway, Tenant]]:
    workdir = tmp_path_factory.mktemp("azure")
    config = write_config(workdir / "azure.toml", azure_toml(f"sqlite:///{workdir / 'gw.db'}", *fakes))
    with ThreadedGateway(config) as gateway:
        yield gateway, register_tenant(gateway.base_url)


@pytest.fixture
def main(fakes) -> AzureFake:
    for fake in fakes:
        fake.state.clear()
    return fakes[0]


@pytest.fixture
def spare(fakes, main) -> AzureFake:
    return fakes[1]


@pytest.fixture
def client(running, main) -> Iterator[openai.OpenAI]:
    gateway, tenant = running
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def claude(running, main) -> Iterator[anthropic.Anthropic]:
    gateway, tenant = running
    with anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


def _ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _text(client: openai.OpenAI, model: str, text: str) -> str | None:
    return client.chat.completions.create(model=model, messages=_ask(text)).choices[0].message.content


# -- chat through the openai SDK ------------------------------------------------------------------------


def test_chat_reaches_the_deployment_path_with_the_api_key_and_version(client, main, running) -> None:
    raw = client.chat.completions.with_raw_response.create(model="gpt", messages=_ask("hello azure"))
    answer, request_id = raw.parse(), raw.headers["x-request-id"]
    assert answer.choices[0].message.content == "echo: hello azure"
    assert answer.choices[0].finish_reason == "stop"
    [sent] = main.requests
    assert sent.path == f"/openai/deployments/{DEPLOYMENT}/chat/completions"
    assert sent.query == {"api-version": AZURE_DEFAULT_API_VERSION}
    assert sent.headers["api-key"] == KEY and "authorization" not in sent.headers
    row = ledger_row(running[0].storage_url, request_id)
    assert (row["input_tokens"], row["output_tokens"]) == (answer.usage.prompt_tokens, 3)


def test_chat_with_tools_brings_the_tool_call_back(client, main) -> None:
    answer = client.chat.completions.create(model="gpt", messages=_ask("find cats"), tools=TOOLS)
    [call] = answer.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("lookup", {"text": "find cats"})
    assert answer.choices[0].finish_reason == "tool_calls"
    follow_up = [
        *_ask("find cats"),
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "3 cats"},
    ]
    again = client.chat.completions.create(model="gpt", messages=follow_up, tools=TOOLS)
    assert again.choices[0].message.content == "tool said: 3 cats"


def test_streamed_chat_has_no_choiceless_verdict_chunk_and_meters_usage(client, main, running) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt", messages=_ask("stream me please"), stream=True
    )
    request_id, chunks = raw.headers["x-request-id"], list(raw.parse())
    assert all(chunk.choices for chunk in chunks)  # Azure's opening verdict chunk and the usage one are gone
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert text == "echo: stream me please"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert main.requests[0].json["stream_options"] == {"include_usage": True}
    assert ledger_row(running[0].storage_url, request_id)["output_tokens"] == 4


def test_streamed_chat_with_tools_and_usage_asked(client, main) -> None:
    stream = client.chat.completions.create(
        model="gpt",
        messages=_ask("find dogs"),
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    arguments = "".join(
        call.function.arguments or ""
        for chunk in chunks
        for choice in chunk.choices
        for call in choice.delta.tool_calls or ()
    )
    names = [
        call.function.name
        for chunk in chunks
        for c in chunk.choices
        for call in c.delta.tool_calls or ()
        if call.function.name
    ]
    assert names == ["lookup"] and json.loads(arguments) == {"text": "find dogs"}
    assert [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason] == ["tool_calls"]


def test_the_sdk_stream_helper_accumulates_an_azure_stream(client, main) -> None:
    with client.chat.completions.stream(model="gpt", messages=_ask("helper works")) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "echo: helper works"


# -- /v1/messages through the anthropic SDK -------------------------------------------------------------


def test_messages_with_tools_come_back_as_tool_use(claude, main) -> None:
    message = claude.messages.create(
        model="gpt", max_tokens=50, system="be brief", messages=_ask("find owls"), tools=ANTHROPIC_TOOLS
    )
    [block] = message.content
    assert (block.type, block.name, block.input) == ("tool_use", "lookup", {"text": "find owls"})
    assert message.stop_reason == "tool_use" and message.usage.output_tokens == 5
    sent = main.requests[0]
    assert sent.path.endswith("/chat/completions") and sent.json["messages"][0] == {
        "role": "system",
        "content": "be brief",
    }


def test_messages_plain_text(claude, main) -> None:
    message = claude.messages.create(model="gpt", max_tokens=50, messages=_ask("hi there"))
    assert message.content[0].text == "echo: hi there" and message.stop_reason == "end_turn"


def test_streamed_messages_with_tools(claude, main) -> None:
    with claude.messages.stream(
        model="gpt", max_tokens=50, messages=_ask("find bats"), tools=ANTHROPIC_TOOLS
    ) as stream:
        message = stream.get_final_message()
    [block] = message.content
    assert (block.type, block.input) == ("tool_use", {"text": "find bats"})
    assert message.stop_reason == "tool_use" and message.usage.output_tokens == 5


def test_streamed_messages_text(claude, main) -> None:
    with claude.messages.stream(model="gpt", max_tokens=50, messages=_ask("say it slowly")) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text == "echo: say it slowly" and message.usage.output_tokens == 4


def test_a_filtered_completion_is_a_refusal_to_a_messages_client(claude, client, main) -> None:
    message = claude.messages.create(model="gpt", max_tokens=50, messages=_ask("something forbidden"))
    assert message.stop_reason == "refusal"
    with claude.messages.stream(model="gpt", max_tokens=50, messages=_ask("forbidden again")) as stream:
        assert stream.get_final_message().stop_reason == "refusal"
    answer = client.chat.completions.create(model="gpt", messages=_ask("forbidden too"))
    assert answer.choices[0].finish_reason == "content_filter"


# -- errors and failover ---------------------------------------------------------------------------------


def test_a_content_filter_refusal_is_a_400_naming_what_was_filtered(client, claude, main, spare) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt", messages=_ask("this is blocked"))
    assert caught.value.code == "content_filter"
    assert "content management policy" in caught.value.message and "violence (high)" in caught.value.message
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="gpt", max_tokens=20, messages=_ask("blocked again"))
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "violence (high)" in refused.value.body["error"]["message"]
    assert spare.requests == []  # the client's fault: no failover


def test_a_throttled_key_rests_and_a_throttled_resource_fails_over(client, main, spare) -> None:
    main.state.add_fault(throttled(retry_after=30))
    assert _text(client, "busy", "one") == "echo: one"  # the sibling key took it, on the same resource
    throttled_key, sibling = (sent.headers["api-key"] for sent in main.requests)
    assert {throttled_key, sibling} == {KEY, KEY2} and spare.requests == []
    assert _text(client, "busy", "two") == "echo: two"
    assert main.requests[-1].headers["api-key"] == sibling  # the throttled key still rests
    main.state.add_fault(throttled(retry_after=30))
    assert _text(client, "busy", "three") == "echo: three"  # both keys rest: the next resource serves it
    assert len(main.requests) == 4 and main.requests[-1].headers["api-key"] == sibling
    [sent] = spare.requests
    assert sent.query == {"api-version": "2025-04-01-preview"} and sent.headers["api-key"] == SPARE_KEY


def test_a_missing_deployment_fails_over(client, main, spare) -> None:
    answer = client.chat.completions.create(model="missing", messages=_ask("where"))
    assert answer.choices[0].message.content == "echo: where"
    assert main.requests[0].path == "/openai/deployments/no-such-deployment/chat/completions"
    assert len(spare.requests) == 1


def test_every_row_refusing_is_an_outage_not_a_500(client, main, spare) -> None:
    main.state.add_fault(deployment_not_found())
    spare.state.add_fault(throttled())
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="gpt", messages=_ask("anyone"))
    assert caught.value.status_code in (502, 503)


def test_a_malformed_plain_answer_ends_cleanly(client, claude, main) -> None:
    main.state.add_fault(malformed(streamed=False), times=2)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="on-v1", messages=_ask("garbled"))
    assert caught.value.status_code in (502, 503)
    with pytest.raises(anthropic.APIStatusError) as refused:
        claude.messages.create(model="on-v1", max_tokens=20, messages=_ask("garbled"))
    assert refused.value.status_code in (502, 503)


def test_a_malformed_stream_ends_cleanly(client, claude, main) -> None:
    main.state.add_fault(malformed(streamed=True), times=2)
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="on-v1", messages=_ask("garbled"), stream=True))
    with pytest.raises(anthropic.APIError):
        with claude.messages.stream(model="on-v1", max_tokens=20, messages=_ask("garbled")) as stream:
            stream.get_final_message()


# -- Entra ID --------------------------------------------------------------------------------------------


def test_entra_token_is_fetched_once_and_reused(client, main) -> None:
    assert _text(client, "by-token", "first") == "echo: first"
    fetched = main.state.token_requests
    for text in ("second", "third"):
        assert _text(client, "by-token", text) == f"echo: {text}"
    assert main.state.token_requests == fetched  # the first request's token serves the others
    tokens = {sent.headers["authorization"] for sent in main.requests}
    assert len(tokens) == 1 and tokens.pop().startswith("Bearer entra-token-")
    assert all("api-key" not in sent.headers for sent in main.requests)
    assert (
        main.requests[0].path == f"/openai/deployments/{DEPLOYMENT}/chat/completions"
    )  # /openai not doubled
    assert {r.path for r in main.state.log.snapshot() if "/oauth2/" in r.path} <= {
        f"/{TENANT}/oauth2/v2.0/token"
    }


def test_an_entra_token_about_to_expire_is_refreshed(client, main) -> None:
    before = main.state.token_requests
    assert _text(client, "short-token", "a") == "echo: a"
    assert _text(client, "short-token", "b") == "echo: b"
    assert main.state.token_requests == before + 2  # each token came within five minutes of expiry
    first, second = (sent.headers["authorization"] for sent in main.requests)
    assert first != second


def test_a_token_the_host_refuses_is_replaced_on_the_next_request(client, main) -> None:
    assert _text(client, "by-token", "before") == "echo: before"
    main.state.revoke_tokens()
    with pytest.raises(openai.APIStatusError) as caught:
        _text(client, "by-token", "refused")  # the one row answers 401: failed over, nothing left
    assert caught.value.status_code in (502, 503)
    before = main.state.token_requests
    assert _text(client, "by-token", "after") == "echo: after"
    assert main.state.token_requests == before + 1


def test_messages_streamed_over_entra(claude, main) -> None:
    with claude.messages.stream(model="by-token", max_tokens=50, messages=_ask("via token")) as stream:
        assert "".join(stream.text_stream) == "echo: via token"
    assert main.requests[0].headers["authorization"].startswith("Bearer entra-token-")


def test_refused_entra_credentials_are_an_outage_not_a_500(client, main) -> None:
    issued = main.state.token_requests
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="bad-token", messages=_ask("no"))
    assert caught.value.status_code in (502, 503)
    assert main.requests == [] and main.state.token_requests == issued
    assert [r.path for r in main.state.log.snapshot()] == [f"/{TENANT}/oauth2/v2.0/token"]


# -- v1 path, responses, uploads -------------------------------------------------------------------------


def test_v1_path_names_the_deployment_in_the_body(client, main) -> None:
    answer = client.chat.completions.create(model="on-v1", messages=_ask("on v1"))
    assert answer.choices[0].message.content == "echo: on v1"
    [sent] = main.requests
    assert (sent.path, sent.query, sent.json["model"]) == ("/openai/v1/chat/completions", {}, DEPLOYMENT)


@pytest.mark.parametrize("model", ["gpt", "on-v1"])
def test_responses_go_to_the_v1_path(client, main, model: str) -> None:
    response = client.responses.create(model=model, input="respond")
    assert response.output_text == "echo: respond"
    [sent] = main.requests
    assert (sent.path, sent.query, sent.json["model"]) == ("/openai/v1/responses", {}, DEPLOYMENT)


@pytest.mark.parametrize("model", ["gpt", "by-token"])
def test_an_audio_upload_reaches_the_deployment_path(client, main, model: str) -> None:
    audio = b"RIFF" + bytes(range(256)) * 40
    transcript = client.audio.transcriptions.create(model=model, file=("clip.wav", audio, "audio/wav"))
    assert transcript.text == f"heard {len(audio)} bytes on {DEPLOYMENT}"
    [sent] = main.requests
    assert sent.path == f"/openai/deployments/{DEPLOYMENT}/audio/transcriptions"
    assert sent.query == {"api-version": AZURE_DEFAULT_API_VERSION}
    assert ("api-key" in sent.headers) == (model == "gpt")


def test_a_route_azure_has_no_call_for_is_a_400_naming_it(running, main) -> None:
    gateway, tenant = running
    reply = httpx.post(
        f"{gateway.base_url}/v1/videos",
        json={"model": "video", "prompt": "a cat"},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=30,
    )
    assert reply.status_code == 400, reply.text
    assert "/v1/videos is not served by Azure OpenAI host" in reply.json()["error"]["message"]
    assert main.requests == []
