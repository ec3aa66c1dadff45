"""Azure OpenAI (`dialect = "azure_openai"`): OpenAI's API on a deployment's path, with Azure's keys.

A row's upstream model is the Azure deployment's name. With a dated `api_version` a call goes to
`/openai/deployments/{deployment}/{call}?api-version=...`; the Responses API lives on Azure's v1 path
(`/openai/v1/responses`), and with `api_version = "v1"` every call does (`/openai/v1/{call}`, the deployment
named by the body's `model`). The keys go in `api-key`, or (`auth = "entra"`) a Microsoft Entra ID token goes
in `authorization` (modelgate/proxy/upstream/dialects/azure_entra.py).

Answers are OpenAI's, plus Azure's content-filter verdicts: they pass as they came, but for the chunk a
stream opens with that carries only the prompt's verdict and no choice (OpenAI never sends one; clients
that read `choices[0]` of every chunk would break on it). Azure's errors are rewritten into OpenAI's shape;
a content-filter refusal names the categories it filtered.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from modelgate.config import ProviderConfig
from modelgate.config.dialects import AZURE_DEFAULT_API_VERSION
from modelgate.domain.errors import InvalidRequest
from modelgate.domain.usage import complete_events_end
from modelgate.proxy.upstream.dialects.azure_entra import DEFAULT_SCOPE, EntraRefused, EntraToken, token_url
from modelgate.proxy.upstream.dialects.base import (
    Call,
    DialectUpstream,
    LocalAnswer,
    TranslatedAnswer,
    broken,
    json_error,
    raw_events,
)
from modelgate.proxy.upstream.providers import StreamedBody, UpstreamResponse

# The calls Azure serves on a deployment's own path (what the openai SDK's Azure client sends there).
DEPLOYMENT_CALLS = frozenset(
    (
        "chat/completions",
        "completions",
        "embeddings",
        "images/generations",
        "images/edits",
        "audio/transcriptions",
        "audio/translations",
        "audio/speech",
    )
)
# The streams whose opening chunk may be the prompt's filter verdict alone.
_CHAT_STREAMS = frozenset(("chat/completions", "completions"))
_MAX_ERROR_BODY = 64 * 1024
_CONTENT_FILTER_CODES = ("content_filter", "ResponsibleAIPolicyViolation")


class AzureUpstream(DialectUpstream):
    """An Azure OpenAI resource: deployment paths, `api-version`, `api-key` or Entra ID auth."""

    def __init__(self, config: ProviderConfig) -> None:
        self._api_version = (
            config.option("api_version", AZURE_DEFAULT_API_VERSION) or AZURE_DEFAULT_API_VERSION
        )
        self._entra: EntraToken | None = None
        if config.option("auth", "api_key") == "entra":
            self._entra = EntraToken(
                token_url(config.option("entra_tenant_id"), config.option("entra_token_url")),
                config.option("entra_client_id") or "",
                config.option("entra_client_secret") or "",
                config.option("entra_scope", DEFAULT_SCOPE) or DEFAULT_SCOPE,
                aiohttp.ClientTimeout(total=config.first_byte_timeout, sock_connect=config.connect_timeout),
            )
            # The token is the credential: no key goes with it, in any header.
            config = dataclasses.replace(config, api_key=None, api_keys=())
        else:
            self.key_header = "api-key"  # read by DialectUpstream.__init__, per instance
        super().__init__(config)
        # A base URL written as the openai SDK's Azure endpoint may already end in /openai or /openai/v1.
        base = self.http.base_path
        for suffix in ("/openai/v1", "/openai"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
                break
        self._base = base

    # -- the request -------------------------------------------------------------------------------

    def target(self, path: str, deployment: str) -> tuple[str, str]:
        """The host's request target for the gateway's `path`, and the call's name (`chat/completions`...);
        InvalidRequest for a route Azure has no call for."""
        call, _, query = path.removeprefix("/v1/").partition("?")
        if not path.startswith("/v1/") or call == "messages" or call.startswith("messages/"):
            raise InvalidRequest(f"{path.partition('?')[0]} is not served by Azure OpenAI host {self.host}")
        query = "?" + query if query else ""
        if self._api_version == "v1" or call == "responses" or call.startswith("responses/"):
            return f"{self._base}/openai/v1/{call}{query}", call
        if call not in DEPLOYMENT_CALLS:
            raise InvalidRequest(
                f"{path.partition('?')[0]} is not served by Azure OpenAI host {self.host}"
                f" (api_version {self._api_version})"
            )
        if not deployment:
            raise InvalidRequest(f"{path} on Azure OpenAI host {self.host} needs a model (the deployment)")
        version = quote(self._api_version, safe="")
        return (
            f"{self._base}/openai/deployments/{quote(deployment, safe='')}/{call}?api-version={version}",
            call,
        )

    async def _auth_headers(self) -> list[tuple[str, str]]:
        if self._entra is None:
            return []  # the key ring adds `api-key`
        return [("authorization", "Bearer " + await self._entra.bearer())]

    async def prepare(self, method: str, path: str, body: bytes | None, client_headers: Any) -> Call:
        deployment = ""
        if body and self._api_version != "v1":
            try:
                payload = orjson.loads(body)
            except orjson.JSONDecodeError:
                payload = None
            if isinstance(payload, dict) and isinstance(payload.get("model"), str):
                deployment = payload["model"]
        target, call = self.target(path, deployment)
        return Call(method, target, body, await self._auth_headers(), model=deployment, route=call)

    async def send(
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> UpstreamResponse:
        try:
            return await super().send(method, path, body, request_id, client_headers)
        except EntraRefused as refused:
            # Credentials the row cannot use: a 401 the forwarder fails over on, like a refused key.
            return LocalAnswer(401, json_error(401, str(refused), "openai"))

    async def send_streamed(
        self, method: str, path: str, body: StreamedBody, request_id: str, client_headers: Any
    ) -> UpstreamResponse:
        fields = getattr(body, "fields", None)
        deployment = fields.get("model", "") if isinstance(fields, dict) else ""
        target, call = self.target(path, deployment)
        headers = await self._auth_headers()
        answer = await self.http.upload(method, target, headers, body, request_id)
        return await self.adapt(Call(method, target, None, headers, model=deployment, route=call), answer)

    # -- the answer --------------------------------------------------------------------------------

    async def adapt(self, call: Call, answer: UpstreamResponse) -> UpstreamResponse:
        if answer.status >= 400:
            if answer.status == 401 and self._entra is not None:
                self._entra.forget(dict(call.headers).get("authorization", "").removeprefix("Bearer "))
            try:
                raw = await answer.content.read(_MAX_ERROR_BODY)
            finally:
                answer.close()
            status, body = azure_error(answer.status, raw)
            local = LocalAnswer(status, body)
            local.credential = answer.credential
            return local
        content_type = answer.headers.get("content-type", "")
        if content_type.startswith("text/event-stream") and call.route in _CHAT_STREAMS:
            headers = {name: value for name, value in answer.headers.items() if name != "content-length"}
            return TranslatedAnswer(answer, headers=headers, stream=AzureChatStream())
        if content_type.startswith("application/json") and call.body is not None:  # not an upload's
            return TranslatedAnswer(answer, headers=dict(answer.headers), body=checked_json)
        return answer

    async def close(self) -> None:
        if self._entra is not None:
            await self._entra.close()
        await super().close()


class AzureChatStream:
    """An Azure chat stream as OpenAI's: each event checked readable, and without the chunk that carries
    only the prompt's filter verdict (it comes first; once a chunk with a choice has passed, none is looked
    for). Events pass as they came, whole: an incomplete one waits for its end."""

    __slots__ = ("_carry", "_past_verdict")

    def __init__(self) -> None:
        self._carry = b""
        self._past_verdict = False

    def feed(self, chunk: bytes) -> bytes:
        data = self._carry + chunk if self._carry else chunk
        end = complete_events_end(data)
        if not end:
            self._carry = data
            return b""
        complete, self._carry = data[:end], data[end:]
        return b"".join([event for event in raw_events(complete) if self._keeps(event)])

    def finish(self) -> bytes:
        tail, self._carry = self._carry, b""
        # The last event without its blank line is whole if it reads (an unreadable one raises).
        return tail if tail.strip() and self._keeps(tail) else b""

    def _keeps(self, event: bytes) -> bool:
        for line in event.splitlines():
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return True
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise broken("an Azure chat stream event is not JSON") from None
            if self._past_verdict or not isinstance(chunk, dict):
                return True
            if chunk.get("choices"):
                self._past_verdict = True
                return True
            return "prompt_filter_results" not in chunk or chunk.get("usage") is not None
        return True


def checked_json(body: bytes) -> bytes:
    """A plain answer as it came, once it is known to be JSON."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        raise broken("an Azure answer is not JSON") from None
    return body


def azure_error(status: int, raw: bytes) -> tuple[int, bytes]:
    """The status and OpenAI-shaped error body for an Azure error answer; a content-filter refusal is the
    client's 400 with code `content_filter` and the categories that were filtered."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        # API Management in front of the resource answers `{"statusCode": 401, "message": "..."}`.
        message = parsed.get("message") if isinstance(parsed, dict) else None
        if not isinstance(message, str) or not message:
            message = f"Azure OpenAI answered HTTP {status}"
        return status, json_error(status, message, "openai")
    message = error.get("message")
    if not isinstance(message, str) or not message:
        message = f"Azure OpenAI answered HTTP {status}"
    code = error.get("code")
    inner = error.get("innererror")
    inner_code = inner.get("code") if isinstance(inner, dict) else None
    if code in _CONTENT_FILTER_CODES or inner_code in _CONTENT_FILTER_CODES:
        categories = _filtered_categories(inner) if isinstance(inner, dict) else []
        if categories:
            message = f"{message} (filtered: {', '.join(categories)})"
        return 400, json_error(400, message, "openai", type_="invalid_request_error", code="content_filter")
    type_ = error.get("type") if isinstance(error.get("type"), str) else None
    # Azure's codes are names (DeploymentNotFound, 429 as a string): only names are worth relaying.
    named = code if isinstance(code, str) and code and not code.isdigit() else None
    return status, json_error(status, message, "openai", type_=type_, code=named)


def _filtered_categories(inner: dict[str, Any]) -> list[str]:
    verdicts = inner.get("content_filter_result") or inner.get("content_filter_results")
    if not isinstance(verdicts, dict):
        return []
    categories = []
    for name, verdict in verdicts.items():
        if isinstance(verdict, dict) and verdict.get("filtered") is True:
            severity = verdict.get("severity")
            categories.append(f"{name} ({severity})" if isinstance(severity, str) else name)
    return categories
