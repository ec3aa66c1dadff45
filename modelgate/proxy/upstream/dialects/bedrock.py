"""AWS Bedrock as a host: Claude models through InvokeModel (Anthropic family), other models through
Converse (OpenAI family), every request signed with SigV4.

- An `anthropic`-kind provider: `/v1/messages` → `POST /model/{id}/invoke` (or `invoke-with-response-stream`)
  with the Messages body minus `model`/`stream`, plus `anthropic_version` (and `anthropic_beta` from the
  client's header); `/v1/messages/count_tokens` → `POST /model/{id}/count-tokens`. The streamed answer's
  event-stream `chunk`s each carry one Anthropic event (base64), relayed as Messages SSE.
- An `openai`-kind provider: `/v1/chat/completions` → `POST /model/{id}/converse` (or `converse-stream`),
  converted both ways in bedrock_converse.
- Bedrock's errors (`x-amzn-errortype`, or an exception frame opening a stream) become the family's error
  with a status that fails over where another row may do better (throttling 429, outages 503).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

from modelgate.config import ProviderConfig
from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.sse import named_frame
from modelgate.proxy.translation.structured_output import asks_structured_output
from modelgate.proxy.upstream.dialects.aws_eventstream import (
    EventStreamDecoder,
    EventStreamTransform,
    frame_message,
    starts_with_frame,
)
from modelgate.proxy.upstream.dialects.base import (
    Call,
    DialectUpstream,
    LocalAnswer,
    TranslatedAnswer,
    broken,
    first_bytes,
    json_error,
    refuse_media_urls,
)
from modelgate.proxy.upstream.dialects.bedrock_auth import AwsSigner
from modelgate.proxy.upstream.dialects.bedrock_converse import (
    ConverseStreamToChat,
    chat_to_converse,
    converse_to_chat,
)
from modelgate.proxy.upstream.http_client import UpstreamBrokeOff
from modelgate.proxy.upstream.providers import UpstreamFailure, UpstreamResponse

BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"
EVENT_STREAM = "application/vnd.amazon.eventstream"
METRICS = "amazon-bedrock-invocationMetrics"
_MAX_ERROR_BODY = 64 * 1024

# Bedrock's error names (an answer's `x-amzn-errortype`, a stream's `:exception-type`, lower-cased) → the
# status the gateway acts on: throttling and outages fail over, the client's mistakes reach the client.
ERROR_STATUS = {
    "throttlingexception": 429,
    "servicequotaexceededexception": 429,
    "modelnotreadyexception": 429,
    "toomanyrequestsexception": 429,
    "validationexception": 400,
    "accessdeniedexception": 403,
    "unrecognizedclientexception": 403,
    "invalidsignatureexception": 403,
    "expiredtokenexception": 403,
    "resourcenotfoundexception": 404,
    "modeltimeoutexception": 408,
    "modelerrorexception": 502,
    "modelstreamerrorexception": 502,
    "internalserverexception": 500,
    "serviceunavailableexception": 503,
}


class BedrockUpstream(DialectUpstream):
    """One Bedrock host (`dialect = "bedrock"`), region from its options, credentials signed per request."""

    key_header = None  # SigV4, not keys
    native_responses = (
        False  # Converse: a Responses request reaches it as chat (translation/responses_on_chat)
    )

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        parts = urlsplit(config.base_url)
        self.region = config.option("region") or ""
        self._signer = AwsSigner(config, self.region)
        self._origin = f"{parts.scheme}://{self.http.authority}"

    async def prepare(self, method: str, path: str, body: bytes | None, client_headers: Any) -> Call:
        route = path.partition("?")[0]
        if method != "POST" or body is None:
            raise self._not_served(path)
        if self.kind == "anthropic" and route == "/v1/messages":
            call = self._invoke(_json_object(body), client_headers)
        elif self.kind == "anthropic" and route == "/v1/messages/count_tokens":
            call = self._count_tokens(_json_object(body), client_headers)
        elif self.kind == "openai" and route == "/v1/chat/completions":
            call = self._converse(_json_object(body))
        else:
            raise self._not_served(path)
        url = self._origin + call.target
        call.headers = await self._signer.signed_headers(call.method, url, self.http.authority, call.body)
        return call

    def _not_served(self, path: str) -> InvalidRequest:
        return InvalidRequest(f"{path} is not served by Bedrock host {self.host} of provider {self.name}")

    def _target(self, model: str, action: str) -> str:
        return f"{self.http.base_path}/model/{quote(model, safe='')}/{action}"

    def _invoke(self, request: dict[str, Any], client_headers: Any) -> Call:
        model = _model(request)
        stream = bool(request.get("stream"))
        body = _invoke_body(request, client_headers)
        action = "invoke-with-response-stream" if stream else "invoke"
        route = "invoke-stream" if stream else "invoke"
        return Call(
            "POST", self._target(model, action), orjson.dumps(body), stream=stream, model=model, route=route
        )

    def _count_tokens(self, request: dict[str, Any], client_headers: Any) -> Call:
        model = _model(request)
        body = _invoke_body(request, client_headers)
        body.setdefault("max_tokens", 1)  # an InvokeModel body needs one; counting the input ignores it
        encoded = base64.b64encode(orjson.dumps(body)).decode("ascii")
        count = {"input": {"invokeModel": {"body": encoded}}}
        return Call(
            "POST", self._target(model, "count-tokens"), orjson.dumps(count), model=model, route="count"
        )

    def _converse(self, request: dict[str, Any]) -> Call:
        model = _model(request)
        stream = bool(request.get("stream"))
        want_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        body = orjson.dumps(chat_to_converse(request))
        action = "converse-stream" if stream else "converse"
        return Call(
            "POST",
            self._target(model, action),
            body,
            stream=stream,
            model=model,
            route=action,
            want_usage=want_usage,
            structured=asks_structured_output(request),
        )

    async def adapt(self, call: Call, answer: UpstreamResponse) -> UpstreamResponse:
        if answer.status >= 400:
            return await self._error(answer)
        if call.stream:
            return await self._stream(call, answer)
        json_type = {"content-type": "application/json"}
        if call.route == "invoke":
            return TranslatedAnswer(
                answer, headers=json_type, body=_messages_answer(call.model, answer.headers)
            )
        if call.route == "count":
            return TranslatedAnswer(answer, headers=json_type, body=_count_answer)
        completion_id = _completion_id(answer.headers)
        structured = call.structured
        return TranslatedAnswer(
            answer,
            headers=json_type,
            body=lambda raw: orjson.dumps(
                converse_to_chat(_loads(raw), call.model, completion_id, structured)
            ),
        )

    async def _error(self, answer: UpstreamResponse) -> LocalAnswer:
        """Bedrock's error answer (`{"message"}` and `x-amzn-errortype`) in the family's shape."""
        try:
            raw = await answer.content.read(_MAX_ERROR_BODY)
        except (UpstreamBrokeOff, OSError, TimeoutError):
            raw = b""
        finally:
            answer.close()
        try:
            document = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            document = {}
        if not isinstance(document, dict):
            document = {}
        name = answer.headers.get("x-amzn-errortype", "").partition(":")[0]
        name = name or str(document.get("__type", "")).rpartition("#")[2]
        message = str(
            document.get("message") or document.get("Message") or raw[:200].decode("utf-8", "replace")
        )
        status = ERROR_STATUS.get(name.lower(), answer.status)
        return self._error_answer(status, name or f"HTTP {answer.status}", message)

    def _error_answer(self, status: int, name: str, message: str) -> LocalAnswer:
        text = f"Bedrock {name}: {message}" if message else f"Bedrock {name}"
        return LocalAnswer(status, json_error(status, text, self.kind, code=name or None))

    async def _stream(self, call: Call, answer: UpstreamResponse) -> UpstreamResponse:
        """A streamed answer, its first frame looked at first: an exception there is the whole answer."""
        content_type = answer.headers.get("content-type", "")
        if not content_type.startswith(EVENT_STREAM):
            answer.close()
            return self._error_answer(
                502, "UnexpectedAnswer", f"a stream came back as {content_type or 'nothing'}"
            )
        try:
            opening = await first_bytes(answer, starts_with_frame)
        except (UpstreamBrokeOff, OSError, TimeoutError) as exc:
            answer.close()
            raise UpstreamFailure(f"{self.name}: the stream broke off before its first event: {exc}") from exc
        try:
            frames = EventStreamDecoder().feed(opening)
        except UpstreamBrokeOff:
            frames = []  # the transform meets it again and breaks the answer off before its first byte
        if frames and frames[0].message_type != "event":
            answer.close()
            name = frames[0].exception_type or "error"
            return self._error_answer(ERROR_STATUS.get(name.lower(), 503), name, frame_message(frames[0]))
        transform: EventStreamTransform
        if call.route == "invoke-stream":
            transform = InvokeStreamToMessages(call.model)
        else:
            transform = ConverseStreamToChat(
                call.model, _completion_id(answer.headers), call.want_usage, call.structured
            )
        headers = {"content-type": "text/event-stream", "cache-control": "no-cache"}
        return TranslatedAnswer(answer, headers=headers, stream=transform, pending=opening)


class InvokeStreamToMessages(EventStreamTransform):
    """InvokeModelWithResponseStream's `chunk` events (each one Anthropic stream event, base64) as Messages
    SSE. Bedrock's invocation metrics on the last event are taken off; they fill the usage of the
    `message_delta` (held back one event for that) when the model's own events lack it."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self._model = model
        self._held: dict[str, Any] | None = None  # the message_delta, until the event after it
        self._input_counted = False
        self._stopped = False

    def event(self, name: str, payload: dict) -> bytes:
        if name != "chunk":
            return b""
        try:
            event = orjson.loads(base64.b64decode(payload.get("bytes") or "", validate=True))
        except (binascii.Error, orjson.JSONDecodeError, TypeError, ValueError):
            raise broken("a chunk's bytes are not a base64 JSON event") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise broken("a chunk is not an Anthropic stream event")
        metrics = event.pop(METRICS, None)
        kind = event["type"]
        if kind == "message_start" and isinstance(event.get("message"), dict):
            event["message"].setdefault("model", self._model)
            self._input_counted = bool((event["message"].get("usage") or {}).get("input_tokens"))
        out = self._release(metrics if isinstance(metrics, dict) else None)
        if kind == "message_delta":
            self._held = event
            return out
        self._stopped = self._stopped or kind == "message_stop"
        return out + named_frame(kind.encode(), event)

    def _release(self, metrics: dict | None) -> bytes:
        held, self._held = self._held, None
        if held is None:
            return b""
        usage = held.get("usage")
        if metrics is not None and (not isinstance(usage, dict) or not usage.get("output_tokens")):
            usage = held["usage"] = dict(usage) if isinstance(usage, dict) else {}
            usage["output_tokens"] = int(metrics.get("outputTokenCount") or 0)
            if not self._input_counted:
                usage.setdefault("input_tokens", int(metrics.get("inputTokenCount") or 0))
        return named_frame(b"message_delta", held)

    def end(self) -> bytes:
        if not self._stopped:
            raise broken("the stream ended before message_stop")
        return self._release(None)


def _json_object(body: bytes) -> dict[str, Any]:
    """The client's request body (refused with a 400 if it is no JSON object)."""
    return _object(body, InvalidRequest, "the request body")


def _object(raw: bytes, error: Callable[[str], Exception], what: str) -> dict[str, Any]:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise error(f"{what} is not JSON") from None
    if not isinstance(document, dict):
        raise error(f"{what} is not a JSON object")
    return document


def _model(request: dict[str, Any]) -> str:
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model must be a Bedrock model id")
    return model


def _invoke_body(request: dict[str, Any], client_headers: Any) -> dict[str, Any]:
    """The InvokeModel body of a Messages request: no model, no stream, Bedrock's anthropic_version."""
    refuse_media_urls(request, "Claude on Bedrock")
    body = {key: value for key, value in request.items() if key not in ("model", "stream")}
    body["anthropic_version"] = BEDROCK_ANTHROPIC_VERSION
    betas = client_headers.get("anthropic-beta") if client_headers is not None else None
    if betas:
        body["anthropic_beta"] = [beta.strip() for beta in betas.split(",") if beta.strip()]
    return body


def _loads(raw: bytes) -> dict[str, Any]:
    """The host's answer body (broken off if it is no JSON object)."""
    return _object(raw, broken, "the answer")


def _messages_answer(model: str, headers: Mapping[str, str]) -> Callable[[bytes], bytes]:
    """InvokeModel's answer is the Messages JSON; it gets the model's name if it lacks one, and usage from
    Bedrock's token-count headers if it lacks that."""

    def rewrite(raw: bytes) -> bytes:
        message = _loads(raw)
        if message.get("type") != "message":
            raise broken("InvokeModel's answer is not a Messages answer")
        message.setdefault("model", model)
        if not isinstance(message.get("usage"), dict) and "x-amzn-bedrock-input-token-count" in headers:
            message["usage"] = {
                "input_tokens": int(headers.get("x-amzn-bedrock-input-token-count") or 0),
                "output_tokens": int(headers.get("x-amzn-bedrock-output-token-count") or 0),
            }
        return orjson.dumps(message)

    return rewrite


def _count_answer(raw: bytes) -> bytes:
    tokens = _loads(raw).get("inputTokens")
    if not isinstance(tokens, int):
        raise broken("CountTokens answered without inputTokens")
    return orjson.dumps({"input_tokens": tokens})


def _completion_id(headers: Mapping[str, str]) -> str:
    return "chatcmpl-" + (headers.get("x-amzn-requestid") or uuid.uuid4().hex)
