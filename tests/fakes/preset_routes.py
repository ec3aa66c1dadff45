"""PresetFake: an OpenAI-compatible host behaving like one preset (groq, mistral, ollama, openrouter, ...).

A real aiohttp server on 127.0.0.1 (FakeUpstream's thread and lifecycle) serving `{path}/chat/completions`
and `{path}/models` under the preset's own base path (Groq's /openai/v1, OpenRouter's /api/v1, ...). It
CHECKS what it receives and refuses it the way the real service does:

- Groq: `logprobs`, `top_logprobs`, `logit_bias`, `messages[].name`, `n` other than 1 → 400;
- Mistral: any field outside its API (`stream_options`, `seed`, `user`, `max_completion_tokens`, ...) →
  422 in its own shape `{"object": "error", "message": {"detail": [{"type": "extra_forbidden", ...}]}}`;
- a key when it has one (`authorization: Bearer`), none expected when it has none (Ollama, vLLM).

Streams report usage the preset's way (`stream_usage`): "chunk" (OpenAI's usage chunk when asked),
"last_chunk" (Mistral: on the finish chunk, always), "x_groq" (Groq: `x_groq.usage` on the finish chunk),
"none" (no usage at all). OpenRouter streams open with its `: OPENROUTER PROCESSING` comment. Queued
faults answer the next requests with a status and body (Groq's 498, OpenRouter's 402, ...), OpenRouter's
error inside a 200 answer, or a malformed answer.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from modelgate.config.dialects import PRESET_URLS

from .records import RecordedRequest
from .upstream import SHUTDOWN_GRACE, FakeUpstream

PROMPT_TOKENS = 11
COMPLETION_TOKENS = 7
MISTRAL_FIELDS = frozenset(
    {
        "model",
        "messages",
        "temperature",
        "top_p",
        "max_tokens",
        "stream",
        "stop",
        "random_seed",
        "response_format",
        "tools",
        "tool_choice",
        "presence_penalty",
        "frequency_penalty",
        "n",
        "prediction",
        "parallel_tool_calls",
        "prompt_mode",
        "safe_prompt",
    }
)
GROQ_REFUSED = ("logprobs", "logit_bias", "top_logprobs")
DEFAULT_STREAM_USAGE = {"groq": "x_groq", "mistral": "last_chunk"}


def preset_path(preset: str) -> str:
    """The path of the preset's real base URL (`/openai/v1` for Groq)."""
    return urlsplit(PRESET_URLS[preset]).path


def openai_error(message: str, type_: str = "invalid_request_error", code: Any = None) -> dict:
    return {"error": {"message": message, "type": type_, "code": code}}


class PresetFake(FakeUpstream):
    """One preset's host (see the module). `fail_next` queues faulty answers; `requests` records all."""

    def __init__(self, preset: str, *, api_key: str | None = None, stream_usage: str | None = None) -> None:
        super().__init__(f"preset-{preset}", api_key=api_key)
        self.preset = preset
        self.stream_usage = stream_usage or DEFAULT_STREAM_USAGE.get(preset, "chunk")
        self._faults: list[tuple[int, Any]] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The base URL a host of this preset is configured with."""
        return self.base_url + preset_path(self.preset)

    def fail_next(self, status: int, body: Any, times: int = 1) -> None:
        """Answer the next `times` chat requests with `status` and `body` (JSON, or bytes as they are: a
        stream when they start with `data:` or an SSE comment)."""
        with self._lock:
            self._faults.extend([(status, body)] * times)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _next_fault(self) -> tuple[int, Any] | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    async def _listen(self) -> None:
        app = web.Application()
        base = preset_path(self.preset)
        app.router.add_post(f"{base}/chat/completions", self._chat)
        app.router.add_get(f"{base}/models", self._models)
        app.router.add_post(f"{base}/responses", self._no_responses_api)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self.port = runner.addresses[0][1]

    # -- checks ------------------------------------------------------------------------------------

    def _auth_refusal(self, request: web.Request) -> web.Response | None:
        sent = request.headers.get("authorization")
        if self.api_key is None:
            if sent is not None:
                return web.json_response(openai_error(f"unexpected authorization: {sent}"), status=400)
            return None
        if sent != f"Bearer {self.api_key}":
            return web.json_response(openai_error("Invalid API Key", code="invalid_api_key"), status=401)
        return None

    def _refusal(self, body: dict) -> web.Response | None:
        if self.preset == "mistral":
            extra = sorted(set(body) - MISTRAL_FIELDS)
            if extra:
                detail = [
                    {
                        "type": "extra_forbidden",
                        "loc": ["body", name],
                        "msg": "Extra inputs are not permitted",
                        "input": body[name],
                    }
                    for name in extra
                ]
                error = {
                    "object": "error",
                    "message": {"detail": detail},
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
                return web.json_response(error, status=422)
        if self.preset == "groq":
            for name in GROQ_REFUSED:
                if name in body:
                    return web.json_response(
                        openai_error(f"'{name}' : property '{name}' is unsupported"), 400
                    )
            if body.get("n", 1) != 1:
                return web.json_response(openai_error("'n' : number must be at most 1"), status=400)
            if any("name" in m for m in body.get("messages", ())):
                return web.json_response(
                    openai_error("'messages.0' : property 'name' is unsupported"), status=400
                )
        return None

    # -- routes ------------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        self._record(request, b"")
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def _no_responses_api(self, request: web.Request) -> web.Response:
        """Recorded, then 404 as a host without the Responses API answers: a test sees what reached it."""
        self._record(request, await request.read())
        return web.json_response(openai_error("Not found", "not_found_error"), status=404)

    def _record(self, request: web.Request, raw: bytes) -> None:
        self._ctx.log.append(
            RecordedRequest.capture(
                request.method, request.path, dict(request.query), dict(request.headers), raw
            )
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self._record(request, raw)
        refused = self._auth_refusal(request)
        if refused is not None:
            return refused
        fault = self._next_fault()
        if fault is not None:
            status, body = fault
            data = body if isinstance(body, bytes) else orjson.dumps(body)
            streamed = data.startswith((b"data:", b":"))
            content_type = "text/event-stream" if streamed else "application/json"
            return web.Response(status=status, body=data, content_type=content_type)
        body = orjson.loads(raw)
        refused = self._refusal(body)
        if refused is not None:
            return refused
        message, finish = answer_for(body)
        if body.get("stream") is True:
            return await self._stream(request, body, message, finish)
        answer = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _usage(),
        }
        if self.preset == "groq":
            answer["x_groq"] = {"id": "req_fake"}
        return web.json_response(answer)

    async def _stream(
        self, request: web.Request, body: dict, message: dict, finish: str
    ) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(request)
        head = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": body["model"],
        }

        def chunk(delta: dict, finish_reason: str | None = None, **extra: Any) -> bytes:
            event = {
                **head,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                **extra,
            }
            return b"data: " + orjson.dumps(event) + b"\n\n"

        if self.preset == "openrouter":
            await reply.write(b": OPENROUTER PROCESSING\n\n")
        await reply.write(chunk({"role": "assistant", "content": ""}))
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            arguments = call["function"]["arguments"]
            opening = {"index": 0, "id": call["id"], "type": "function"}
            opening["function"] = {"name": call["function"]["name"], "arguments": arguments[:5]}
            await reply.write(chunk({"tool_calls": [opening]}))
            await reply.write(chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[5:]}}]}))
        else:
            text = message["content"]
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                await reply.write(chunk({"content": piece}))
        extra: dict[str, Any] = {}
        if self.stream_usage == "last_chunk":
            extra["usage"] = _usage()
        elif self.stream_usage == "x_groq":
            extra["x_groq"] = {"id": "req_fake", "usage": {**_usage(), "queue_time": 0.01}}
        await reply.write(chunk({}, finish, **extra))
        options = body.get("stream_options")
        if self.stream_usage == "chunk" and isinstance(options, dict) and options.get("include_usage"):
            await reply.write(b"data: " + orjson.dumps({**head, "choices": [], "usage": _usage()}) + b"\n\n")
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        return reply


def _usage() -> dict:
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
    }


def answer_for(body: dict) -> tuple[dict, str]:
    """The assistant message for a chat request: a call of its first tool when it has tools and the last
    message is the user's; else `echo: <the last message's text>`."""
    last = body["messages"][-1]
    content = last.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    if body.get("tools") and last.get("role") == "user":
        name = body["tools"][0]["function"]["name"]
        arguments = orjson.dumps({"q": content}).decode()
        call = {"id": "call_fake1", "type": "function", "function": {"name": name, "arguments": arguments}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {"role": "assistant", "content": f"echo: {content}"}, "stop"
