"""AzureFake: an Azure OpenAI resource and its Entra ID token endpoint on 127.0.0.1, in a daemon thread.

It checks what Azure checks: the deployment path and a dated `api-version` (or the v1 path with the
deployment in `model` and no version), the `api-key` header or an Entra bearer token it issued, the token
request's form. It answers like Azure: OpenAI's chat completion plus the content-filter verdicts, a stream
that opens with the prompt's verdict alone (`"choices": []`), tool calls, usage; and Azure's errors:
the content-filter refusal, DeploymentNotFound, throttling with `retry-after`, bad credentials.

The echo model: a tool-less request is answered `echo: <last user text>`; with tools, the first one is
called with `{"text": <last user text>}` until a tool result comes back (`tool said: <result>`). A user
text with `forbidden` ends in `finish_reason: content_filter`; one with `blocked` is refused by the prompt
filter (400).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web

from .records import RecordedRequest, RequestLog

SCOPE = "https://cognitiveservices.azure.com/.default"
TENANT = "contoso-tenant"
CLIENT_ID = "gateway-app"
CLIENT_SECRET = "gateway-app-secret"
# An application whose tokens come within five minutes of expiry: a client must fetch one per request.
SHORT_LIVED_CLIENT_ID = "short-lived-app"
UNDERLYING_MODEL = "gpt-4o-2024-11-20"
_DATED = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")
_SAFE = {
    name: {"filtered": False, "severity": "safe"} for name in ("hate", "self_harm", "sexual", "violence")
}
START_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class AzureFault:
    """An answer the fake gives instead of the model's: status, body (JSON, or bytes sent as they are
    with the headers' content-type), headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    def answer(self) -> web.Response:
        if isinstance(self.body, bytes):
            return web.Response(status=self.status, body=self.body, headers=self.headers)
        return web.json_response(self.body, status=self.status, headers=self.headers, dumps=_dumps)


def malformed(streamed: bool) -> AzureFault:
    """A 200 whose body cannot be read: JSON cut short, or an event stream whose second event is."""
    if streamed:
        body = b'data: {"choices":[],"prompt_filter_results":[]}\n\ndata: {"id":"x","choices":[{"ind\n\n'
        return AzureFault(200, body, {"content-type": "text/event-stream"})
    return AzureFault(200, b'{"id":"chatcmpl-1","choices":[{"index":0,', {"content-type": "application/json"})


def throttled(retry_after: int = 7) -> AzureFault:
    message = (
        "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have "
        f"exceeded token rate limit of your current tier. Please retry after {retry_after} seconds."
    )
    return AzureFault(429, {"error": {"code": "429", "message": message}}, {"retry-after": str(retry_after)})


def deployment_not_found() -> AzureFault:
    message = "The API deployment for this resource does not exist."
    return AzureFault(404, {"error": {"code": "DeploymentNotFound", "message": message}})


class AzureState:
    """What the fake knows and saw; touched from the server loop and the test thread alike."""

    def __init__(self, api_keys: tuple[str, ...], deployments: tuple[str, ...]) -> None:
        self.api_keys = api_keys
        self.deployments = deployments
        self.log = RequestLog()
        self.token_requests = 0
        self._lock = threading.Lock()
        self._tokens: set[str] = set()
        self._counter = itertools.count(1)
        self._faults: deque[AzureFault] = deque()
        # The chat usage an answer reports instead of its own (plain and streamed), until cleared.
        self.report_usage: dict | None = None

    def issue_token(self) -> str:
        with self._lock:
            self.token_requests += 1
            token = f"entra-token-{next(self._counter)}"
            self._tokens.add(token)
            return token

    def knows_token(self, token: str) -> bool:
        with self._lock:
            return token in self._tokens

    def add_fault(self, fault: AzureFault, times: int = 1) -> None:
        with self._lock:
            self._faults.extend([fault] * times)

    def next_fault(self) -> AzureFault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def clear(self) -> None:
        """Forget requests and queued faults (issued tokens stay valid, and the count of them)."""
        with self._lock:
            self._faults.clear()
        self.log.clear()
        self.report_usage = None

    def revoke_tokens(self) -> None:
        """Refuse every token issued so far (as after a secret rotation)."""
        with self._lock:
            self._tokens.clear()


STATE = web.AppKey("azure_state", AzureState)


def _azure_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status, dumps=_dumps)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


# -- Entra ID -----------------------------------------------------------------------------------------


async def entra_token(request: web.Request) -> web.Response:
    state = request.app[STATE]
    form = await request.post()
    state.log.append(
        RecordedRequest.capture("POST", request.path, dict(request.query), dict(request.headers), b"")
    )
    if request.match_info["tenant"] != TENANT:
        return web.json_response(
            {"error": "invalid_request", "error_description": "AADSTS90002: tenant"}, status=400
        )
    if form.get("grant_type") != "client_credentials" or form.get("scope") != SCOPE:
        return web.json_response({"error": "invalid_request", "error_description": "bad grant"}, status=400)
    if (
        form.get("client_id") not in (CLIENT_ID, SHORT_LIVED_CLIENT_ID)
        or form.get("client_secret") != CLIENT_SECRET
    ):
        description = "AADSTS7000215: Invalid client secret provided.\r\nTrace ID: 0000\r\nCorrelation ID: 1"
        return web.json_response({"error": "invalid_client", "error_description": description}, status=401)
    token = state.issue_token()
    lifetime = 300 if form.get("client_id") == SHORT_LIVED_CLIENT_ID else 3599
    return web.json_response(
        {
            "token_type": "Bearer",
            "expires_in": lifetime,
            "ext_expires_in": lifetime,
            "access_token": token,
        }
    )


# -- Azure OpenAI -------------------------------------------------------------------------------------


def _authorised(request: web.Request, state: AzureState) -> bool:
    key = request.headers.get("api-key")
    if key is not None:
        return key in state.api_keys
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme == "Bearer" and state.knows_token(token)


async def _admit(request: web.Request, v1: bool) -> tuple[str, web.Response | None]:
    """Record and check one model request: its auth, version and deployment; the deployment, or the answer
    that refuses it."""
    state = request.app[STATE]
    body = await request.read()
    state.log.append(
        RecordedRequest.capture(
            request.method, request.path, dict(request.query), dict(request.headers), body
        )
    )
    if not _authorised(request, state):
        message = "Access denied due to invalid subscription key or wrong API endpoint."
        return "", _azure_error(401, "401", message)
    version = request.query.get("api-version")
    if v1:
        if version is not None:
            return "", _azure_error(400, "BadRequest", "api-version is not accepted on the v1 path")
        payload = orjson.loads(body) if body and request.content_type == "application/json" else {}
        deployment = payload.get("model", "")
    else:
        if version is None or not _DATED.match(version):
            return "", _azure_error(404, "404", "Resource not found")
        deployment = request.match_info["deployment"]
    if deployment not in state.deployments:
        return deployment, deployment_not_found().answer()
    fault = state.next_fault()
    if fault is not None:
        return deployment, fault.answer()
    return deployment, None


async def chat_on_deployment(request: web.Request) -> web.StreamResponse:
    return await _chat(request, v1=False)


async def chat_on_v1(request: web.Request) -> web.StreamResponse:
    return await _chat(request, v1=True)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _content_filter_refusal() -> web.Response:
    message = (
        "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
        "Please modify your prompt and retry."
    )
    verdicts = {
        **_SAFE,
        "violence": {"filtered": True, "severity": "high"},
        "jailbreak": {"filtered": False, "detected": False},
    }
    body = {
        "error": {
            "message": message,
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": verdicts},
        }
    }
    return web.json_response(body, status=400, dumps=_dumps)


async def _chat(request: web.Request, v1: bool) -> web.StreamResponse:
    _, refusal = await _admit(request, v1)
    if refusal is not None:
        return refusal
    payload = orjson.loads(await request.read())
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        return _azure_error(400, "BadRequest", "'messages' is a required property")
    last = messages[-1]
    user_text = next((_text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    if "blocked" in user_text:
        return _content_filter_refusal()
    tools = payload.get("tools") or []
    prompt_tokens = sum(len(_text_of(m.get("content")).split()) for m in messages) + 3
    call: dict[str, Any] | None = None
    if last.get("role") == "tool":
        text, finish = f"tool said: {_text_of(last.get('content'))}", "stop"
    elif tools and last.get("role") == "user":
        name = tools[0]["function"]["name"]
        call = {
            "id": f"call_{len(request.app[STATE].log.snapshot())}",
            "type": "function",
            "function": {"name": name, "arguments": orjson.dumps({"text": user_text}).decode()},
        }
        text, finish = "", "tool_calls"
    elif "forbidden" in user_text:
        text, finish = "", "content_filter"
    else:
        text, finish = f"echo: {user_text}", "stop"
    completion_tokens = len(text.split()) + (5 if call else 0)
    usage = request.app[STATE].report_usage or {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    verdict = (
        {**_SAFE, "violence": {"filtered": True, "severity": "medium"}}
        if finish == "content_filter"
        else _SAFE
    )
    prompt_verdict = [{"prompt_index": 0, "content_filter_results": _SAFE}]
    if payload.get("stream") is True:
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return await _stream(
            request, text, call, finish, verdict, prompt_verdict, usage if include_usage else None
        )
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if call:
        message["tool_calls"] = [call]
    return web.json_response(
        {
            "id": "chatcmpl-azure1",
            "object": "chat.completion",
            "created": 1732406400,
            "model": UNDERLYING_MODEL,
            "system_fingerprint": "fp_azure",
            "prompt_filter_results": prompt_verdict,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish,
                    "logprobs": None,
                    "content_filter_results": verdict,
                }
            ],
            "usage": usage,
        },
        dumps=_dumps,
    )


def _frame(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def _stream(
    request: web.Request,
    text: str,
    call: dict[str, Any] | None,
    finish: str,
    verdict: dict[str, Any],
    prompt_verdict: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> web.StreamResponse:
    answer = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
    await answer.prepare(request)
    base = {
        "id": "chatcmpl-azure2",
        "object": "chat.completion.chunk",
        "created": 1732406400,
        "model": UNDERLYING_MODEL,
        "system_fingerprint": "fp_azure",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None, **extra}
        return _frame({**base, "choices": [choice], **({"usage": None} if usage else {})})

    # Azure opens with the prompt's verdict alone: no choice, empty id and model.
    frames = [
        _frame(
            {
                "choices": [],
                "created": 0,
                "id": "",
                "model": "",
                "object": "",
                "prompt_filter_results": prompt_verdict,
            }
        )
    ]
    frames.append(chunk({"role": "assistant", "content": "", "refusal": None}))
    for index, word in enumerate(text.split(" ") if text else ()):
        frames.append(chunk({"content": word if index == 0 else " " + word}, content_filter_results=_SAFE))
    if call:
        head = {
            "index": 0,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        frames.append(chunk({"tool_calls": [head]}))
        arguments = call["function"]["arguments"]
        for at in range(0, len(arguments), 7):
            frames.append(
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[at : at + 7]}}]})
            )
    frames.append(chunk({}, finish, content_filter_results=verdict))
    if usage:
        frames.append(_frame({**base, "choices": [], "usage": usage}))
    frames.append(b"data: [DONE]\n\n")
    for frame in frames:
        await answer.write(frame)
    await answer.write_eof()
    return answer


async def responses_on_v1(request: web.Request) -> web.Response:
    _, refusal = await _admit(request, v1=True)
    if refusal is not None:
        return refusal
    payload = orjson.loads(await request.read())
    prompt = payload.get("input")
    text = f"echo: {prompt if isinstance(prompt, str) else _text_of(prompt)}"
    return web.json_response(
        {
            "id": "resp_azure1",
            "object": "response",
            "created_at": 1732406400,
            "status": "completed",
            "model": UNDERLYING_MODEL,
            "output": [
                {
                    "id": "msg_azure1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "usage": {
                "input_tokens": 4,
                "output_tokens": len(text.split()),
                "total_tokens": 4 + len(text.split()),
            },
        },
        dumps=_dumps,
    )


def _parts(body: bytes, content_type: str) -> dict[str, bytes]:
    """A multipart body's parts by field name."""
    boundary = content_type.partition("boundary=")[2].strip('"').encode()
    parts: dict[str, bytes] = {}
    for part in body.split(b"--" + boundary)[1:-1]:
        head, _, content = part.strip(b"\r\n").partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]*)"', head)
        if name:
            parts[name.group(1).decode()] = content
    return parts


async def transcription_on_deployment(request: web.Request) -> web.Response:
    deployment, refusal = await _admit(request, v1=False)
    if refusal is not None:
        return refusal
    if not request.content_type.startswith("multipart/form-data"):
        return _azure_error(400, "BadRequest", "multipart/form-data expected")
    parts = _parts(await request.read(), request.headers["content-type"])
    if "file" not in parts:
        return _azure_error(400, "BadRequest", "'file' is a required property")
    return web.json_response({"text": f"heard {len(parts['file'])} bytes on {deployment}"}, dumps=_dumps)


def build_app(state: AzureState) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE] = state
    app.router.add_routes(
        [
            web.post("/{tenant}/oauth2/v2.0/token", entra_token),
            web.post("/openai/deployments/{deployment}/chat/completions", chat_on_deployment),
            web.post("/openai/deployments/{deployment}/audio/transcriptions", transcription_on_deployment),
            web.post("/openai/v1/chat/completions", chat_on_v1),
            web.post("/openai/v1/responses", responses_on_v1),
        ]
    )
    return app


class AzureFake:
    """`with AzureFake(api_keys=(...), deployments=(...)) as fake:` serves on 127.0.0.1:`fake.port`."""

    def __init__(
        self, *, api_keys: tuple[str, ...] = (), deployments: tuple[str, ...] = ("gpt4o-prod",)
    ) -> None:
        self.state = AzureState(api_keys, deployments)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="azure-fake", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/{TENANT}/oauth2/v2.0/token"

    @property
    def requests(self) -> list[RecordedRequest]:
        return [record for record in self.state.log.snapshot() if "/oauth2/" not in record.path]

    async def _start(self) -> None:
        self._runner = web.AppRunner(
            build_app(self.state), handle_signals=False, access_log=None, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def __enter__(self) -> AzureFake:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=START_TIMEOUT)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(
                    timeout=START_TIMEOUT
                )
            except concurrent.futures.TimeoutError:
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=START_TIMEOUT)
        self._loop.close()
