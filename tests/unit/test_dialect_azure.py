"""The Azure OpenAI dialect's pieces (modelgate/proxy/upstream/dialects/azure.py, azure_entra.py): request
targets for every route and api-version, Azure's errors in OpenAI's shape, the stream without its choiceless
prompt-verdict chunk (split at every byte), and the Entra ID token cache against a loopback token endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web
from openai.lib.azure import _deployments_endpoints

from modelgate.config import ProviderConfig
from modelgate.config.dialects import AZURE_DEFAULT_API_VERSION
from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.chat_stream_to_messages import MessagesEventStream
from modelgate.proxy.upstream.dialects import dialect_upstream
from modelgate.proxy.upstream.dialects.azure import (
    DEPLOYMENT_CALLS,
    AzureChatStream,
    AzureUpstream,
    azure_error,
    checked_json,
)
from modelgate.proxy.upstream.dialects.azure_entra import EntraRefused, EntraToken, token_url
from modelgate.proxy.upstream.http_client import UpstreamBrokeOff
from modelgate.proxy.upstream.providers import UpstreamFailure

SAFE = {"hate": {"filtered": False, "severity": "safe"}}


def azure(base_url: str = "https://res.openai.azure.com", **options: str) -> AzureUpstream:
    config = ProviderConfig(
        name="azure",
        kind="openai",
        base_url=base_url,
        api_key="k",
        dialect="azure_openai",
        options=tuple(options.items()),
    )
    upstream = dialect_upstream(config)
    assert isinstance(upstream, AzureUpstream)
    return upstream


# -- targets ---------------------------------------------------------------------------------------------


def test_the_deployment_calls_are_those_the_openai_sdks_azure_client_sends_there() -> None:
    assert {"/" + call for call in DEPLOYMENT_CALLS} == set(_deployments_endpoints)


@pytest.mark.parametrize("call", sorted(DEPLOYMENT_CALLS))
def test_deployment_calls_go_to_the_deployment_path_with_the_api_version(call: str) -> None:
    target, route = azure().target(f"/v1/{call}", "prod-4o")
    assert target == f"/openai/deployments/prod-4o/{call}?api-version={AZURE_DEFAULT_API_VERSION}"
    assert route == call


def test_the_configured_api_version_and_base_path_are_used() -> None:
    upstream = azure("https://gw.example.com/azure", api_version="2025-04-01-preview")
    target, _ = upstream.target("/v1/chat/completions", "a b")
    assert target == "/azure/openai/deployments/a%20b/chat/completions?api-version=2025-04-01-preview"


@pytest.mark.parametrize("suffix", ["/openai", "/openai/v1", "/openai/"])
def test_a_base_url_written_as_the_sdks_endpoint_is_not_doubled(suffix: str) -> None:
    target, _ = azure("https://res.openai.azure.com" + suffix).target("/v1/embeddings", "e")
    assert target.startswith("/openai/deployments/e/embeddings?")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/responses", "/openai/v1/responses"),
        ("/v1/responses/resp_1", "/openai/v1/responses/resp_1"),
        ("/v1/responses/resp_1?include=x", "/openai/v1/responses/resp_1?include=x"),
    ],
)
def test_responses_live_on_the_v1_path_whatever_the_version(path: str, expected: str) -> None:
    assert azure().target(path, "d")[0] == expected


@pytest.mark.parametrize("call", ["chat/completions", "responses", "models", "images/variations", "videos"])
def test_with_api_version_v1_every_call_goes_to_the_v1_path(call: str) -> None:
    assert azure(api_version="v1").target(f"/v1/{call}", "")[0] == f"/openai/v1/{call}"


@pytest.mark.parametrize("path", ["/v1/videos", "/v1/models", "/v1/images/variations", "/v1/decisions"])
def test_a_route_without_an_azure_call_is_refused_naming_route_and_host(path: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        azure().target(path, "d")
    assert f"{path} is not served by Azure OpenAI host res.openai.azure.com" in str(refused.value)


@pytest.mark.parametrize("version", [AZURE_DEFAULT_API_VERSION, "v1"])
def test_messages_are_never_sent_to_azure(version: str) -> None:
    with pytest.raises(InvalidRequest):
        azure(api_version=version).target("/v1/messages", "d")


def test_keys_go_in_api_key_and_entra_hosts_send_none() -> None:
    assert azure().http._keys.pick().header == "api-key"
    entra = azure(auth="entra", entra_tenant_id="t", entra_client_id="c", entra_client_secret="s")
    assert entra.http._keys.pick() is None  # the configured key is dropped: the token is the credential


# -- errors ----------------------------------------------------------------------------------------------


def _error(status: int, body: object) -> tuple[int, dict]:
    status, raw = azure_error(status, orjson.dumps(body) if not isinstance(body, bytes) else body)
    return status, orjson.loads(raw)["error"]


def test_a_content_filter_refusal_is_a_400_naming_the_filtered_categories() -> None:
    verdicts = {
        **SAFE,
        "violence": {"filtered": True, "severity": "high"},
        "sexual": {"filtered": True, "severity": "medium"},
    }
    body = {
        "error": {
            "code": "content_filter",
            "message": "The response was filtered.",
            "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": verdicts},
        }
    }
    status, error = _error(400, body)
    assert status == 400 and error["code"] == "content_filter" and error["type"] == "invalid_request_error"
    assert error["message"] == "The response was filtered. (filtered: violence (high), sexual (medium))"


def test_an_inner_policy_violation_is_a_content_filter_refusal_too() -> None:
    body = {
        "error": {
            "code": "400",
            "message": "Filtered",
            "innererror": {"code": "ResponsibleAIPolicyViolation"},
        }
    }
    assert _error(400, body) == (
        400,
        {"message": "Filtered", "type": "invalid_request_error", "code": "content_filter"},
    )


def test_deployment_not_found_keeps_its_status_and_name() -> None:
    status, error = _error(404, {"error": {"code": "DeploymentNotFound", "message": "no deployment"}})
    assert (status, error["code"], error["type"]) == (404, "DeploymentNotFound", "not_found_error")


def test_a_numeric_code_is_not_relayed() -> None:
    assert _error(429, {"error": {"code": "429", "message": "slow down"}}) == (
        429,
        {"message": "slow down", "type": "rate_limit_error"},
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"statusCode": 401, "message": "Access denied due to invalid subscription key."}, "Access denied"),
        (b"<html>bad gateway</html>", "Azure OpenAI answered HTTP 401"),
    ],
)
def test_other_error_shapes_become_openai_errors(body: object, message: str) -> None:
    status, error = _error(401, body)
    assert status == 401 and error["message"].startswith(message) and error["type"] == "authentication_error"


# -- streams ---------------------------------------------------------------------------------------------


def frame(payload: object) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


VERDICT = frame(
    {
        "choices": [],
        "created": 0,
        "id": "",
        "model": "",
        "object": "",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": SAFE}],
    }
)
ROLE = frame(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
    }
)
TEXT = frame(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [
            {"index": 0, "delta": {"content": "hi"}, "finish_reason": None, "content_filter_results": SAFE}
        ],
    }
)
FILTERED = frame(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {},
                "finish_reason": "content_filter",
                "content_filter_results": {"violence": {"filtered": True, "severity": "medium"}},
            }
        ],
    }
)
USAGE = frame(
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
)
DONE = b"data: [DONE]\n\n"
STREAM = VERDICT + ROLE + TEXT + FILTERED + USAGE + DONE
EXPECTED = ROLE + TEXT + FILTERED + USAGE + DONE


def run(transform: AzureChatStream, pieces: list[bytes]) -> bytes:
    return b"".join(transform.feed(piece) for piece in pieces) + transform.finish()


def test_the_choiceless_verdict_chunk_is_dropped_and_the_usage_chunk_kept() -> None:
    assert run(AzureChatStream(), [STREAM]) == EXPECTED


def test_a_stream_split_at_every_byte_boundary_comes_out_the_same() -> None:
    for at in range(1, len(STREAM)):
        assert run(AzureChatStream(), [STREAM[:at], STREAM[at:]]) == EXPECTED, at
    assert run(AzureChatStream(), [STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_events_ending_in_crlf_are_read_too() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    assert run(AzureChatStream(), [crlf]) == EXPECTED.replace(b"\n", b"\r\n")


def test_a_verdict_after_the_first_choice_is_left_alone() -> None:
    assert run(AzureChatStream(), [ROLE + VERDICT + DONE]) == ROLE + VERDICT + DONE


def test_an_unreadable_event_breaks_the_stream() -> None:
    with pytest.raises(UpstreamBrokeOff):
        run(AzureChatStream(), [ROLE + b'data: {"choices": [\n\n'])


def test_a_stream_ending_inside_an_event_breaks() -> None:
    with pytest.raises(UpstreamBrokeOff):
        run(AzureChatStream(), [ROLE + b'data: {"choi'])


def test_a_last_event_without_its_blank_line_is_kept() -> None:
    assert run(AzureChatStream(), [VERDICT + ROLE + b"data: [DONE]"]) == ROLE + b"data: [DONE]"


def test_a_filtered_stream_reaches_a_messages_client_as_a_refusal() -> None:
    translated = MessagesEventStream("gpt")
    out = translated.feed(run(AzureChatStream(), [STREAM])) + translated.finish()
    events = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: ")]
    [delta] = [event for event in events if event["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "refusal" and delta["usage"]["output_tokens"] == 1
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"


def test_a_plain_answer_must_be_json() -> None:
    assert checked_json(b'{"id": "x"}') == b'{"id": "x"}'
    with pytest.raises(UpstreamBrokeOff):
        checked_json(b'{"id": ')


# -- Entra ID tokens -------------------------------------------------------------------------------------


class TokenEndpoint:
    """A loopback token endpoint: answers each POST with the next of `answers` (status, JSON)."""

    def __init__(self, *answers: tuple[int, dict]) -> None:
        self.answers = list(answers)
        self.forms: list[dict[str, str]] = []
        self.url = ""

    async def token(self, request: web.Request) -> web.Response:
        self.forms.append(dict(await request.post()))
        status, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return web.json_response(body, status=status)


@pytest.fixture
async def endpoint() -> AsyncIterator[TokenEndpoint]:
    served = TokenEndpoint((200, {"access_token": "t1", "expires_in": 3599}))
    app = web.Application()
    app.router.add_post("/tenant/oauth2/v2.0/token", served.token)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    served.url = f"http://127.0.0.1:{runner.addresses[0][1]}/tenant/oauth2/v2.0/token"
    yield served
    await runner.cleanup()


def source(url: str) -> EntraToken:
    return EntraToken(
        url, "app", "secret", "https://cognitiveservices.azure.com/.default", aiohttp.ClientTimeout(total=5)
    )


def test_the_token_url_is_the_tenants_unless_one_is_configured() -> None:
    assert token_url("contoso", None) == "https://login.microsoftonline.com/contoso/oauth2/v2.0/token"
    assert token_url("contoso", "https://login.example/t") == "https://login.example/t"


async def test_concurrent_requests_share_one_token_fetch(endpoint: TokenEndpoint) -> None:
    tokens = source(endpoint.url)
    try:
        assert await asyncio.gather(*(tokens.bearer() for _ in range(20))) == ["t1"] * 20
        assert await tokens.bearer() == "t1"
    finally:
        await tokens.close()
    assert endpoint.forms == [
        {
            "grant_type": "client_credentials",
            "client_id": "app",
            "client_secret": "secret",
            "scope": "https://cognitiveservices.azure.com/.default",
        }
    ]


async def test_a_token_within_five_minutes_of_expiry_is_refreshed(endpoint: TokenEndpoint) -> None:
    endpoint.answers = [
        (200, {"access_token": "t1", "expires_in": "300"}),
        (200, {"access_token": "t2", "expires_in": 3599}),
    ]
    tokens = source(endpoint.url)
    try:
        assert [await tokens.bearer() for _ in range(3)] == ["t1", "t2", "t2"]
    finally:
        await tokens.close()
    assert len(endpoint.forms) == 2


async def test_refused_credentials_raise_with_entras_first_line(endpoint: TokenEndpoint) -> None:
    endpoint.answers = [
        (401, {"error": "invalid_client", "error_description": "AADSTS7000215: bad secret.\r\nTrace ID: 1"})
    ]
    tokens = source(endpoint.url)
    try:
        with pytest.raises(EntraRefused) as refused:
            await tokens.bearer()
    finally:
        await tokens.close()
    assert str(refused.value) == "Entra ID refused the client credentials: AADSTS7000215: bad secret."


async def test_a_token_not_yet_expired_serves_while_the_endpoint_fails(endpoint: TokenEndpoint) -> None:
    endpoint.answers = [
        (200, {"access_token": "t1", "expires_in": 300}),
        (503, {"error": "temporarily_unavailable"}),
    ]
    tokens = source(endpoint.url)
    try:
        assert await tokens.bearer() == "t1"
        assert await tokens.bearer() == "t1"  # due for refresh, the refresh failed, t1 still works
        tokens.forget("t1")  # the host refused it: no falling back on it any more
        with pytest.raises(EntraRefused):
            await tokens.bearer()
    finally:
        await tokens.close()


async def test_an_unreadable_token_answer_or_no_endpoint_is_an_upstream_failure(
    endpoint: TokenEndpoint,
) -> None:
    endpoint.answers = [(200, {"token_type": "Bearer"})]
    tokens = source(endpoint.url)
    unreachable = source("http://127.0.0.1:9/token")
    try:
        with pytest.raises(UpstreamFailure):
            await tokens.bearer()
        with pytest.raises(UpstreamFailure):
            await unreachable.bearer()
    finally:
        await tokens.close()
        await unreachable.close()
