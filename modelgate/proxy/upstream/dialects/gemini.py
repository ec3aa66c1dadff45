"""Google's Gemini API (`dialect = "gemini"`): OpenAI chat served by `generateContent`.

`/v1/chat/completions` goes to `{base}/{api_version}/models/{model}:generateContent` (or
`:streamGenerateContent?alt=sse`), written by gemini_format.py and answered back by gemini_answers.py;
`/v1/embeddings` to `:batchEmbedContents`. The key goes in `x-goog-api-key` (the key ring applies). Gemini on
Vertex (vertex.py) shares the chat call and its answers: `GeminiChat`.
"""

from __future__ import annotations

import base64
import struct
from typing import Any
from urllib.parse import quote

import orjson

from modelgate.config import ProviderConfig
from modelgate.config.dialects import GEMINI_DEFAULT_API_VERSION
from modelgate.domain.errors import InvalidRequest
from modelgate.domain.usage import BYTES_PER_TOKEN
from modelgate.proxy.upstream.dialects.base import (
    Call,
    DialectUpstream,
    LocalAnswer,
    TranslatedAnswer,
    broken,
    first_bytes,
    json_payload,
)
from modelgate.proxy.upstream.dialects.gemini_answers import (
    ChatChunks,
    blocked_error,
    blocked_prompt,
    chat_completion,
    error_answer,
)
from modelgate.proxy.upstream.dialects.gemini_format import gemini_request
from modelgate.proxy.upstream.http_client import UpstreamBrokeOff
from modelgate.proxy.upstream.providers import UpstreamFailure, UpstreamResponse

_JSON = {"content-type": "application/json"}
_SSE = {"content-type": "text/event-stream", "cache-control": "no-cache"}


def model_segment(model: Any) -> str:
    """A model name as one path segment (a name holding '/' or '?' cannot smuggle a path)."""
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' must be a non-empty string")
    return quote(model, safe="-._@")


async def read_whole(answer: UpstreamResponse, host: str) -> bytes:
    """A plain answer's whole body; a connection broken meanwhile is the host's failure (failover)."""
    try:
        return await answer.read()
    except (UpstreamBrokeOff, OSError, TimeoutError) as exc:
        answer.close()
        raise UpstreamFailure(f"{host}: the answer broke off: {exc}") from exc


def _encoded(vector: list[float], route: str) -> list[float] | str:
    """An embedding as the client asked: floats, or base64 of little-endian float32 (OpenAI's)."""
    if route != "embed_base64":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def _event_complete(read: bytes) -> bool:
    return b"\n\n" in read or b"\r\n\r\n" in read


class GeminiChat:
    """The chat call to a Gemini model (`generateContent`) and its answer as OpenAI's; `model_path` is the
    model's resource path up to its name (`/v1beta/models/`, or Vertex's `.../publishers/google/models/`)."""

    @staticmethod
    def call(model_path: str, body: bytes | None, headers: list[tuple[str, str]] | None = None) -> Call:
        payload = json_payload(body)
        model = payload.get("model")
        stream = payload.get("stream") is True
        options = payload.get("stream_options")
        want_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
        action = ":streamGenerateContent?alt=sse" if stream else ":generateContent"
        return Call(
            "POST",
            model_path + model_segment(model) + action,
            orjson.dumps(gemini_request(payload)),
            headers or [],
            stream=stream,
            model=str(model),
            route="chat",
            want_usage=want_usage,
        )

    @staticmethod
    async def adapt(call: Call, answer: UpstreamResponse, host: str) -> UpstreamResponse:
        if answer.status >= 400:
            status, error = error_answer(answer.status, await read_whole(answer, host))
            return LocalAnswer(status, error)
        if not call.stream:
            body = await read_whole(answer, host)
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise UpstreamFailure(f"{host}: malformed answer from the provider: not JSON") from None
            if reason := blocked_prompt(parsed):
                return LocalAnswer(400, blocked_error(reason))
            try:
                completion = chat_completion(body, call.model)
            except UpstreamBrokeOff as exc:
                raise UpstreamFailure(f"{host}: {exc}") from exc
            return LocalAnswer(answer.status, orjson.dumps(completion))
        # A prompt refused outright is the stream's only event: look at the first one before answering.
        try:
            pending = await first_bytes(answer, _event_complete)
        except (UpstreamBrokeOff, OSError, TimeoutError) as exc:
            answer.close()
            raise UpstreamFailure(f"{host}: the stream broke off before its first event: {exc}") from exc
        chunks = ChatChunks(call.model, call.want_usage)
        first = pending.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0]
        if first.startswith(b"data:"):
            try:
                reason = blocked_prompt(orjson.loads(first[5:]))
            except orjson.JSONDecodeError:
                reason = None  # the stream's reader reports it in turn
            if reason:
                answer.close()
                return LocalAnswer(400, blocked_error(reason))
        return TranslatedAnswer(answer, headers=dict(_SSE), stream=chunks, pending=pending)


class GeminiUpstream(DialectUpstream):
    """A host of Google's Gemini API, seen by the gateway as an OpenAI-family provider."""

    key_header = "x-goog-api-key"
    native_responses = False  # a Responses request reaches it as chat (translation/responses_on_chat)

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        version = config.option("api_version", GEMINI_DEFAULT_API_VERSION)
        self._models = f"{self.http.base_path}/{version}/models/"

    async def prepare(self, method: str, path: str, body: bytes | None, client_headers: Any) -> Call:
        if method == "POST" and path == "/v1/chat/completions":
            return GeminiChat.call(self._models, body)
        if method == "POST" and path == "/v1/embeddings":
            return self._embeddings(body)
        raise InvalidRequest(f"{path} is not served by host {self.host} of provider {self.name} (Gemini API)")

    def _embeddings(self, body: bytes | None) -> Call:
        payload = json_payload(body)
        model = model_segment(payload.get("model"))
        texts = payload.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise InvalidRequest(
                "'input' must be a string or an array of strings for a Gemini embedding model"
            )
        if payload.get("encoding_format") not in (None, "float", "base64"):
            raise InvalidRequest("encoding_format must be 'float' or 'base64'")
        request: dict[str, Any] = {"model": f"models/{payload['model']}"}
        if isinstance(payload.get("dimensions"), int):
            request["outputDimensionality"] = payload["dimensions"]
        requests = [{**request, "content": {"parts": [{"text": text}]}} for text in texts]
        target = f"{self._models}{model}:batchEmbedContents"
        route = "embed_base64" if payload.get("encoding_format") == "base64" else "embed"
        body = orjson.dumps({"requests": requests})
        return Call("POST", target, body, model=payload["model"], route=route)

    async def adapt(self, call: Call, answer: UpstreamResponse) -> UpstreamResponse:
        if call.route == "chat":
            return await GeminiChat.adapt(call, answer, self.host)
        body = await read_whole(answer, self.host)
        if answer.status >= 400:
            return LocalAnswer(*error_answer(answer.status, body))
        try:
            embeddings = orjson.loads(body)["embeddings"]
            vectors = [[float(v) for v in e["values"]] for e in embeddings]
            data = [
                {"object": "embedding", "index": n, "embedding": _encoded(v, call.route)}
                for n, v in enumerate(vectors)
            ]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise UpstreamFailure(f"{self.host}: {broken('no embeddings in the answer')}") from exc
        # Gemini's batchEmbedContents reports no usage: the input is estimated like the gateway estimates
        # any uncounted text (its UTF-8 bytes / BYTES_PER_TOKEN, at least one token per input).
        tokens = sum(
            max(1, -(-len(r["content"]["parts"][0]["text"].encode()) // BYTES_PER_TOKEN))
            for r in orjson.loads(call.body or b"{}")["requests"]
        )
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        answer_body = {"object": "list", "data": data, "model": call.model, "usage": usage}
        return LocalAnswer(answer.status, orjson.dumps(answer_body))
