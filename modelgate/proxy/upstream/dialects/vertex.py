"""Google Vertex AI (`dialect = "vertex"`): Claude and Gemini models of a Google Cloud project.

An `anthropic`-kind provider's models are Claude on Vertex: `/v1/messages` goes to the model's `:rawPredict`
(`:streamRawPredict` for a stream) with the Messages body less its `model` and with Vertex's
`anthropic_version`; the answers are Anthropic's own and pass through. `/v1/messages/count_tokens` goes to
`count-tokens:rawPredict`. An `openai`-kind provider's models are Gemini on Vertex: `/v1/chat/completions`
goes to `:generateContent` / `:streamGenerateContent?alt=sse` like the Gemini API's (gemini.py).

Every request carries a Google access token (vertex_auth.py); the configured API keys are never sent.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from modelgate.config import ProviderConfig
from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.upstream.dialects.base import (
    Call,
    DialectUpstream,
    LocalAnswer,
    json_error,
    json_payload,
    refuse_media_urls,
)
from modelgate.proxy.upstream.dialects.gemini import GeminiChat, model_segment, read_whole
from modelgate.proxy.upstream.dialects.vertex_auth import GoogleToken
from modelgate.proxy.upstream.providers import UpstreamResponse

VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"
_PASSED_HEADERS = ("anthropic-beta",)


class VertexUpstream(DialectUpstream):
    """A Vertex AI project and region, seen by the gateway as an `anthropic`- or `openai`-family provider."""

    native_responses = False  # a Responses request reaches Gemini on Vertex as chat (responses_on_chat)

    def __init__(self, config: ProviderConfig) -> None:
        # Vertex takes Google tokens only: a provider's keys (meant for its other hosts) never go to Google.
        super().__init__(dataclasses.replace(config, api_key=None, api_keys=()))
        project = config.option("project") or ""
        region = config.option("region") or ""
        if not project or not region:
            raise ValueError(f"provider {config.name}: a vertex host needs 'project' and 'region'")
        self._location = f"{self.http.base_path}/v1/projects/{project}/locations/{region}/publishers"
        self._token = GoogleToken(config.option("credentials_file"), self.host)

    async def prepare(self, method: str, path: str, body: bytes | None, client_headers: Any) -> Call:
        if (
            method == "POST"
            and self.kind == "anthropic"
            and path in ("/v1/messages", "/v1/messages/count_tokens")
        ):
            call = self._claude(path, body, client_headers)
        elif method == "POST" and self.kind == "openai" and path == "/v1/chat/completions":
            call = GeminiChat.call(f"{self._location}/google/models/", body)
        else:
            family = "Claude" if self.kind == "anthropic" else "Gemini"
            raise InvalidRequest(
                f"{path} is not served by host {self.host} of provider {self.name}"
                f" (Vertex AI, {family} models)"
            )
        call.headers.append(("authorization", await self._token.bearer()))
        return call

    def _claude(self, path: str, body: bytes | None, client_headers: Any) -> Call:
        payload = json_payload(body)
        refuse_media_urls(payload, "Claude on Vertex")
        payload["anthropic_version"] = VERTEX_ANTHROPIC_VERSION
        headers = [
            (name, value)
            for name in _PASSED_HEADERS
            if (value := client_headers.get(name)) and "\r" not in value and "\n" not in value
        ]
        if path == "/v1/messages/count_tokens":
            target = f"{self._location}/anthropic/models/count-tokens:rawPredict"
            return Call("POST", target, orjson.dumps(payload), headers, route="count_tokens")
        model = model_segment(payload.pop("model", None))
        stream = payload.get("stream") is True
        target = f"{self._location}/anthropic/models/{model}:{'streamRawPredict' if stream else 'rawPredict'}"
        return Call(
            "POST", target, orjson.dumps(payload), headers, stream=stream, model=model, route="messages"
        )

    async def adapt(self, call: Call, answer: UpstreamResponse) -> UpstreamResponse:
        if call.route == "chat":
            return await GeminiChat.adapt(call, answer, self.host)
        if answer.status < 400:
            return answer  # Anthropic's own answer, plain or streamed
        return LocalAnswer(answer.status, claude_error(answer.status, await read_whole(answer, self.host)))


def claude_error(status: int, body: bytes) -> bytes:
    """An error of Claude on Vertex in Anthropic's shape: Anthropic's own errors pass as they are; Google's
    (`{"error": {"code", "status", "message"}}`, e.g. quota) are rewritten."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, list) and parsed:
        parsed = parsed[0]
    if isinstance(parsed, dict) and parsed.get("type") == "error" and isinstance(parsed.get("error"), dict):
        return body
    error = parsed.get("error") if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = f"the provider answered HTTP {status}"
    return json_error(status, message, "anthropic")
