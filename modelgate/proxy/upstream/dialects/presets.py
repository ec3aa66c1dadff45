"""The client of an OpenAI-compatible cloud or local server named by `preset` on an `openai` host.

Each preset (groq, mistral, deepseek, together, fireworks, openrouter, xai, vllm, ollama) speaks OpenAI's
wire format at its own base URL (config.dialects.PRESET_URLS) with a few documented differences, kept in
one table (`QUIRKS`):

- request fields it refuses: renamed to its own (Mistral's `random_seed`), dropped when they ask for
  nothing (`logprobs: false`, `n: 1`), or the request is refused for this host (`InvalidRequest`: another
  row may serve it) when they ask for something the host cannot give (`logprobs: true` on Groq);
- `stream_options` refused (Mistral answers 422): dropped; its usage then comes as the host sends it;
- usage in a place of its own (Groq's `x_groq.usage` on the last chunk): lifted into the usage chunk an
  OpenAI stream ends with;
- a stream that ends (`data: [DONE]`) without any usage when the client's request asked for it: a usage
  chunk is added before `[DONE]`, ESTIMATED the way the gateway estimates an answer that reports none
  (modelgate/domain/usage.py: the prompt at BYTES_PER_TOKEN bytes a token of the request body, the answer by
  its generated text) and marked `"estimated": true` inside `usage`, and a warning is logged;
- answers that mean "this host cannot serve now" but are not 429 (Groq's 498 capacity_exceeded, a 402 out
  of credits or balance, OpenRouter's error inside a 200 answer) become 429/503 so the forwarder fails over
  to another row; error bodies in other shapes (`{"object": "error", "message": ...}` of Mistral and
  vLLM, `{"detail": ...}`) are rewritten into OpenAI's `{"error": {...}}`. A client's own error (a 400/422
  naming a parameter) keeps its status.

Chat completions and legacy completions go through the quirks; every other route (models, embeddings,
audio uploads) is relayed as an `openai` host relays it, with only its error answers rewritten.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from modelgate.config import ProviderConfig
from modelgate.domain.errors import InvalidRequest
from modelgate.domain.usage import BYTES_PER_TOKEN, complete_events_end, generated_tokens, tokens_of
from modelgate.proxy.translation.sse import data_frame
from modelgate.proxy.upstream.dialects.base import (
    Call,
    DialectUpstream,
    LocalAnswer,
    TranslatedAnswer,
    first_bytes,
    json_error,
    json_payload,
    raw_events,
)
from modelgate.proxy.upstream.providers import StreamedBody, UpstreamResponse

log = logging.getLogger("modelgate.upstream")

_QUIRKED_PATHS = ("/v1/chat/completions", "/v1/completions")
_MAX_ERROR_BODY = 64 * 1024
_USAGE_OBJECT = re.compile(rb'"usage"\s*:\s*\{')
_DONE = b"data: [DONE]"


def _absent_or(*neutral: Any) -> Callable[[Any], bool]:
    """A field's value that asks for nothing: None or one of `neutral`."""
    return lambda value: value is None or any(value == n and type(value) is type(n) for n in neutral)


@dataclass(frozen=True, slots=True)
class Quirks:
    """How one preset differs from OpenAI's chat API (each entry from the service's documentation or its
    observed answers; docs/providers/openai_compatible.md says which is which)."""

    stream_options: bool = True  # accepts `stream_options` (else it is dropped)
    renames: Mapping[str, str] = field(default_factory=dict)  # OpenAI field → the host's name for it
    dropped: frozenset[str] = frozenset()  # fields with no effect on the answer, refused by the host
    # field → "asks for nothing" test: such a value is dropped, any other refuses the request for this host
    refused: Mapping[str, Callable[[Any], bool]] = field(default_factory=dict)
    message_fields: frozenset[str] = frozenset()  # fields of each message the host refuses (dropped)
    usage_holder: str | None = None  # a chunk field holding the usage the host reports instead of `usage`
    # the host's status → (the gateway's status, error code): "cannot serve now", failed over
    unavailable: Mapping[int, tuple[int, str]] = field(default_factory=dict)
    errors_in_ok_answers: bool = False  # an error may come as a 200 answer whose body is `{"error": ...}`
    # serves OpenAI's Responses API at /v1/responses; else a Responses request reaches it as chat completions
    # (modelgate/proxy/translation/responses_on_chat.py), as on Gemini or Converse
    responses_api: bool = True


_OUT_OF_CREDITS = {402: (429, "insufficient_quota")}
_LOGPROBS_REFUSED = {
    "logprobs": _absent_or(False),
    "top_logprobs": _absent_or(0),
    "logit_bias": _absent_or({}),
}

QUIRKS: dict[str, Quirks] = {
    "groq": Quirks(
        refused={**_LOGPROBS_REFUSED, "n": _absent_or(1)},
        message_fields=frozenset({"name"}),
        usage_holder="x_groq",
        unavailable={**_OUT_OF_CREDITS, 498: (503, "capacity_exceeded")},
    ),
    "mistral": Quirks(
        responses_api=False,
        stream_options=False,
        renames={"seed": "random_seed", "max_completion_tokens": "max_tokens"},
        dropped=frozenset({"user", "store", "metadata", "service_tier"}),
        refused=_LOGPROBS_REFUSED,
        unavailable=_OUT_OF_CREDITS,
    ),
    "deepseek": Quirks(unavailable=_OUT_OF_CREDITS, responses_api=False),
    "together": Quirks(unavailable=_OUT_OF_CREDITS, responses_api=False),
    "fireworks": Quirks(unavailable=_OUT_OF_CREDITS),
    "openrouter": Quirks(unavailable=_OUT_OF_CREDITS, errors_in_ok_answers=True),
    "xai": Quirks(unavailable=_OUT_OF_CREDITS),
    "vllm": Quirks(),
    "ollama": Quirks(responses_api=False),
}


class PresetUpstream(DialectUpstream):
    """An OpenAI-compatible host with its preset's quirks (see the module)."""

    key_header = "authorization"

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        self.preset = str(config.option("preset", "") or "")
        self.quirks = QUIRKS.get(self.preset, Quirks())
        self.native_responses = self.quirks.responses_api

    async def send(
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> UpstreamResponse:
        if method != "POST" or not isinstance(body, bytes) or path.split("?", 1)[0] not in _QUIRKED_PATHS:
            answer = await self.http.send(method, path, body, request_id, client_headers)
            return await self._error_answer(answer) if answer.status >= 400 else answer
        call = await self.prepare(method, path, body, client_headers)
        answer = await self.http.exchange(call.method, call.target, call.headers, call.body, request_id)
        return await self._adapt(call, answer, request_id)

    async def prepare(self, method: str, path: str, body: bytes | None, client_headers: Any) -> Call:
        target = self.http.base_path + path[3:]  # the preset's base URL ends where OpenAI's /v1 does
        payload = json_payload(body)
        options = payload.get("stream_options")
        want_usage = isinstance(options, dict) and options.get("include_usage") is True
        self._apply(payload)
        return Call(
            method,
            target,
            orjson.dumps(payload),
            stream=payload.get("stream") is True,
            model=str(payload.get("model", "")),
            route=path,
            want_usage=want_usage,
        )

    def _apply(self, payload: dict[str, Any]) -> None:
        """Rewrite `payload` in place into what this preset accepts."""
        quirks = self.quirks
        if not quirks.stream_options:
            payload.pop("stream_options", None)
        for ours, theirs in quirks.renames.items():
            if ours in payload:
                value = payload.pop(ours)
                kept = payload.get(theirs)
                if isinstance(kept, int) and isinstance(value, int):
                    value = min(kept, value)  # both caps given: the host honours the tighter one
                payload[theirs] = value
        for name in quirks.dropped:
            payload.pop(name, None)
        for name, asks_nothing in quirks.refused.items():
            if name not in payload:
                continue
            if not asks_nothing(payload[name]):
                raise InvalidRequest(
                    f"'{name}' is not supported by host {self.host} of provider {self.name}"
                    f" (an OpenAI-compatible {self.preset} host)"
                )
            del payload[name]
        if quirks.message_fields and isinstance(payload.get("messages"), list):
            for message in payload["messages"]:
                if isinstance(message, dict):
                    for name in quirks.message_fields:
                        message.pop(name, None)

    async def adapt(self, call: Call, answer: UpstreamResponse) -> UpstreamResponse:
        return await self._adapt(call, answer, "")

    async def _adapt(self, call: Call, answer: UpstreamResponse, request_id: str) -> UpstreamResponse:
        if answer.status >= 400:
            return await self._error_answer(answer)
        content_type = str(answer.headers.get("content-type", ""))
        if call.stream and content_type.startswith("text/event-stream"):
            headers = {"content-type": "text/event-stream"}
            prompt_tokens = len(call.body or b"") // BYTES_PER_TOKEN
            chunk_object = (
                "chat.completion.chunk" if call.route.endswith("chat/completions") else "text_completion"
            )
            transform = PresetStream(self.quirks.usage_holder, call.want_usage, prompt_tokens, chunk_object)
            transform.on_estimate = lambda usage: log.warning(
                "host %s of provider %s (preset %s) streamed no usage: charged an estimate of %d prompt"
                " and %d completion tokens",
                self.host,
                self.name,
                self.preset,
                usage["prompt_tokens"],
                usage["completion_tokens"],
                extra={"request_id": request_id},
            )
            pending = b""
            if self.quirks.errors_in_ok_answers:  # an error before the first token comes as the first event
                pending = await first_bytes(answer, _first_data_event)
                error = self._stream_error(pending)
                if error is not None:
                    answer.close()
                    return error
            return TranslatedAnswer(answer, headers=headers, stream=transform, pending=pending)
        if not self.quirks.errors_in_ok_answers:
            return answer
        body = await answer.read()
        answer.close()
        return self._ok_or_error(body)

    def _stream_error(self, opening: bytes) -> LocalAnswer | None:
        """The error a stream opens with (OpenRouter's `data: {"error": {...}}` before any choice), if so."""
        line = next((line for line in opening.splitlines() if line.startswith(b"data:")), b"")
        if b'"error"' not in line:
            return None
        answer = self._ok_or_error(line[5:].strip())
        return answer if answer.status != 200 else None

    def _ok_or_error(self, body: bytes) -> LocalAnswer:
        """A 200 answer as it is, or the error it carries (OpenRouter's `{"error": {"code": 502, ...}}`)."""
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            message = f"malformed answer from host {self.host} of provider {self.name}: not JSON"
            return LocalAnswer(502, json_error(502, message, "openai", code="malformed_answer"))
        error = document.get("error") if isinstance(document, dict) else None
        if error is None or "choices" in document:
            return LocalAnswer(200, body)
        status = error.get("code") if isinstance(error, dict) else None
        status = status if isinstance(status, int) and 400 <= status < 600 else 502
        return LocalAnswer(status, self._error_body(status, document))

    async def _error_answer(self, answer: UpstreamResponse) -> UpstreamResponse:
        """An error answer in OpenAI's shape, its status made one the forwarder fails over on when it means
        "this host cannot serve now"."""
        try:
            body = await answer.content.read(_MAX_ERROR_BODY)
        finally:
            answer.close()
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            document = body.decode("utf-8", "replace").strip()
        status = answer.status
        mapped = self.quirks.unavailable.get(status)
        if mapped is not None:
            status, code = mapped
            message = f"host {self.host} of provider {self.name} cannot serve now: {_message_of(document)}"
            error = json_error(status, message, "openai", code=code)
        else:
            error = self._error_body(status, document)
        local = LocalAnswer(status, error)
        retry_after = answer.headers.get("retry-after")
        if retry_after:
            local.headers["retry-after"] = str(retry_after)
        local.credential = answer.credential
        return local

    def _error_body(self, status: int, document: Any) -> bytes:
        """`{"error": {"message", "type", "code"}}` from any of the shapes OpenAI-compatible hosts use."""
        error = document.get("error") if isinstance(document, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = error.get("code")
            return json_error(
                status,
                error["message"],
                "openai",
                type_=error["type"] if isinstance(error.get("type"), str) else None,
                code=str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None,
            )
        type_ = document.get("type") if isinstance(document, dict) else None
        return json_error(
            status, _message_of(document), "openai", type_=type_ if isinstance(type_, str) else None
        )


def _first_data_event(read: bytes) -> bool:
    """Whether `read` holds a complete `data:` event (comments before it are keep-alives)."""
    end = complete_events_end(read)
    return any(line.startswith(b"data:") for line in read[:end].splitlines())


def _message_of(document: Any) -> str:
    """The readable message of an error body of any shape: `error.message`, `message` (a string or
    pydantic's list of details), `detail`, `error` as a string, or the text itself."""
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, dict):
            return _message_of(error)
        for key in ("message", "detail", "error", "msg"):
            value = document.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, dict | list) and value:
                return _message_of(value)
    if isinstance(document, list):
        parts = []
        for item in document:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                text = _message_of(item)
                parts.append(f"{where}: {text}" if where else text)
            else:
                parts.append(str(item))
        return "; ".join(parts)
    text = str(document) if document not in (None, "") else "no message"
    return text[:1000]


class PresetStream:
    """An OpenAI chat stream relayed event by event as it came; at its `[DONE]`, when the request asked
    for usage and none came, a usage chunk first: the host's own from `usage_holder` (Groq's `x_groq`),
    else an estimate marked `"estimated": true`. Only events mentioning a usage object are decoded."""

    __slots__ = (
        "_carry",
        "_done",
        "_head",
        "_held_usage",
        "_holder",
        "_object",
        "_pieces",
        "_prompt_tokens",
        "_saw_usage",
        "_size",
        "_want_usage",
        "on_estimate",
    )

    def __init__(
        self, usage_holder: str | None, want_usage: bool, prompt_tokens: int, chunk_object: str
    ) -> None:
        self._holder = usage_holder
        self._object = chunk_object
        self._want_usage = want_usage
        self._prompt_tokens = prompt_tokens
        self._carry = b""
        self._done = False
        self._head: dict[str, Any] | None = None  # id, created, model of the stream's first chunk
        self._held_usage: dict[str, Any] | None = None
        self._saw_usage = False
        self._pieces = self._size = 0
        self.on_estimate: Callable[[dict[str, Any]], None] | None = None

    def feed(self, chunk: bytes) -> bytes:
        data = self._carry + chunk if self._carry else chunk
        end = complete_events_end(data)
        self._carry = data[end:]
        if not end:
            return b""
        return self._events(data[:end])

    def finish(self) -> bytes:
        carry, self._carry = self._carry, b""
        if carry and _DONE in carry and not self._done:
            return self._events(carry)  # a last event without its blank line
        return carry

    def _events(self, data: bytes) -> bytes:
        return b"".join([self._event(event) for event in raw_events(data)])

    def _event(self, event: bytes) -> bytes:
        if event.lstrip().startswith(_DONE):
            self._done = True
            return self._closing_usage() + event
        pieces, size = generated_tokens(event)
        self._pieces += pieces
        self._size += size
        if self._head is None or _USAGE_OBJECT.search(event) is not None:
            self._read(event)
        return event

    def _read(self, event: bytes) -> None:
        """Note the stream's head (first chunk) and any usage this event reports."""
        line = next((line for line in event.splitlines() if line.startswith(b"data:")), None)
        if line is None:
            return
        try:
            document = orjson.loads(line[5:])
        except orjson.JSONDecodeError:
            return  # relayed as it came; metering and the client judge it
        if not isinstance(document, dict):
            return
        if self._head is None:
            self._head = {k: document[k] for k in ("id", "created", "model") if k in document}
        if isinstance(document.get("usage"), dict):
            self._saw_usage = True
        holder = document.get(self._holder) if self._holder else None
        if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
            self._held_usage = holder["usage"]

    def _closing_usage(self) -> bytes:
        if not self._want_usage or self._saw_usage:
            return b""
        if self._held_usage is not None:
            held = self._held_usage
            usage: dict[str, Any] = {
                k: held[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens") if k in held
            }
        else:
            completion = tokens_of(self._pieces, self._size)
            usage = {
                "prompt_tokens": self._prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": self._prompt_tokens + completion,
                "estimated": True,
            }
            if self.on_estimate is not None:
                self.on_estimate(usage)
        self._saw_usage = True
        head = self._head or {}
        chunk = {
            "id": head.get("id", "chatcmpl-usage"),
            "object": self._object,
            "created": head.get("created", 0),
            "model": head.get("model", ""),
            "choices": [],
            "usage": usage,
        }
        return data_frame(chunk)
