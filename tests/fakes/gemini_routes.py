"""The routes of GeminiFake (gemini_host.py): Google's Gemini API, Vertex AI (Gemini and Claude models) and
an OAuth token endpoint for service accounts, checking what the real ones check.

- Gemini API: `POST /{version}/models/{model}:generateContent | :streamGenerateContent?alt=sse |
  :batchEmbedContents` with the key in `x-goog-api-key`.
- Vertex: `POST /v1/projects/{project}/locations/{region}/publishers/google/models/{model}:generateContent`
  (and the stream), `.../publishers/anthropic/models/{model}:rawPredict | :streamRawPredict`,
  `.../anthropic/models/count-tokens:rawPredict`, with a bearer token the token endpoint issued.
- `POST /token`: the JWT-bearer grant; the assertion's RS256 signature is checked with the service account's
  public key, and its claims (issuer, audience, scope).

Bodies are checked like Gemini checks them: roles `user`/`model` on every content, one data field per part,
schema keys Gemini knows, a `functionResponse` for every `functionCall` of the turn before, the thought
signatures it issued coming back (Gemini 3 models require them). The echo model answers `echo: <last user
text>`; with tools it calls the first one with `{"text": <last user text>}` until a function response comes
back (`tool said: <result>`). A text with `blocked` is refused as a prompt (`promptFeedback.blockReason`),
one with `forbidden` ends in `finishReason: SAFETY`. Usage is fixed: USAGE.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import orjson
from aiohttp import web

from .echo_model import split_pieces
from .gemini_claude import claude_answer, count_tokens_answer
from .gemini_state import STATE, GeminiState, google_error, verify_assertion
from .records import RecordedRequest
from .schema_answer import schema_answer

USAGE = {
    "promptTokenCount": 11,
    "candidatesTokenCount": 5,
    "thoughtsTokenCount": 2,
    "cachedContentTokenCount": 3,
    "totalTokenCount": 18,
}
_SCHEMA_KEYS = frozenset(
    (
        "type",
        "format",
        "description",
        "nullable",
        "enum",
        "items",
        "properties",
        "required",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "anyOf",
        "propertyOrdering",
        "minProperties",
        "maxProperties",
    )
)
_CONFIG_KEYS = frozenset(
    (
        "maxOutputTokens",
        "temperature",
        "topP",
        "topK",
        "candidateCount",
        "stopSequences",
        "seed",
        "presencePenalty",
        "frequencyPenalty",
        "responseMimeType",
        "responseSchema",
        "thinkingConfig",
        "responseLogprobs",
        "logprobs",
    )
)
_PART_FIELDS = ("text", "inlineData", "fileData", "functionCall", "functionResponse")


class Refused(Exception):
    """A request Gemini answers with 400 INVALID_ARGUMENT."""


def _record(request: web.Request, body: bytes) -> None:
    request.app[STATE].log.append(
        RecordedRequest.capture(
            request.method, request.path, dict(request.query), dict(request.headers), body
        )
    )


def _check_schema(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        raise Refused(f"{where}: a schema must be an object")
    for key in schema:
        if key not in _SCHEMA_KEYS:
            raise Refused(
                f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': Cannot find field."
            )
    for name, value in (schema.get("properties") or {}).items():
        _check_schema(value, f"{where}.properties[{name}]")
    if "items" in schema:
        _check_schema(schema["items"], f"{where}.items")
    if schema.get("type") == "object" and "properties" in schema and not schema["properties"]:
        raise Refused(f"{where}.properties: should be non-empty for OBJECT type")


def _check_body(body: Any, state: GeminiState, model: str) -> None:
    if not isinstance(body, dict):
        raise Refused("the body must be a JSON object")
    unknown = set(body) - {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig"}
    if unknown:
        raise Refused(f'Invalid JSON payload received. Unknown name "{sorted(unknown)[0]}"')
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise Refused("contents is not specified")
    pending_calls: list[str] = []
    for n, content in enumerate(contents):
        role = content.get("role")
        if role not in ("user", "model"):
            raise Refused(f"contents[{n}].role must be 'user' or 'model', got {role!r}")
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            raise Refused(f"contents[{n}].parts must not be empty")
        for part in parts:
            fields = [f for f in _PART_FIELDS if f in part]
            if len(fields) != 1:
                raise Refused(f"contents[{n}]: a part holds exactly one of {_PART_FIELDS}")
        calls = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
        answers = [p["functionResponse"]["name"] for p in parts if "functionResponse" in p]
        if pending_calls and sorted(answers) != sorted(pending_calls):
            raise Refused(f"contents[{n}]: the function responses do not match the calls {pending_calls}")
        if answers and not pending_calls:
            raise Refused(f"contents[{n}]: a function response answers no function call")
        pending_calls = calls
        signed = [p for p in parts if "functionCall" in p]
        for position, part in enumerate(signed):
            signature = part.get("thoughtSignature")
            if signature is not None and signature not in state.signatures:
                raise Refused("Corrupted thought signature.")
            if position == 0 and model.startswith("gemini-3") and signature is None:
                raise Refused(f"Function call is missing a thought_signature in functionCall parts ({n})")
    for tool in body.get("tools") or ():
        for declaration in tool.get("functionDeclarations") or ():
            if "parameters" in declaration:
                _check_schema(
                    declaration["parameters"], f"tools.function_declarations[{declaration['name']}]"
                )
    config = body.get("generationConfig") or {}
    for key in config:
        if key not in _CONFIG_KEYS:
            raise Refused(f"Invalid JSON payload received. Unknown name \"{key}\" at 'generation_config'")
    if "responseSchema" in config:
        _check_schema(config["responseSchema"], "generation_config.response_schema")
    if "logprobs" in config and not config.get("responseLogprobs"):
        raise Refused("logprobs is only valid if responseLogprobs is true")


def _texts(content: dict[str, Any]) -> str:
    return " ".join(p["text"] for p in content.get("parts", ()) if "text" in p)


def _reply(body: dict[str, Any], state: GeminiState) -> dict[str, Any]:
    """The echo model's GenerateContentResponse for a checked body."""
    contents = body["contents"]
    last = contents[-1]
    user_text = next((_texts(c) for c in reversed(contents) if c["role"] == "user" and _texts(c)), "")
    if "blocked" in user_text:
        return {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 11}}
    declarations = [d for tool in body.get("tools") or () for d in tool.get("functionDeclarations") or ()]
    responses = [p["functionResponse"] for p in last["parts"] if "functionResponse" in p]
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode", "AUTO")
    config = body.get("generationConfig") or {}
    if responses:
        parts: list[dict[str, Any]] = [{"text": "tool said: " + _result_text(responses[0]["response"])}]
    elif declarations and mode != "NONE":
        signature = base64.b64encode(os.urandom(24)).decode()
        state.signatures.add(signature)
        call = {"name": declarations[0]["name"], "args": {"text": user_text}}
        parts = [{"functionCall": call, "thoughtSignature": signature}]
    elif "responseSchema" in config:
        answer = orjson.dumps(schema_answer(config["responseSchema"], user_text)).decode()
        parts = [{"text": answer}]
    elif config.get("responseMimeType") == "application/json":
        parts = [{"text": orjson.dumps({"text": user_text}).decode()}]
    else:
        parts = [{"text": f"echo: {user_text}"}]
    if (config.get("thinkingConfig") or {}).get("includeThoughts") and not responses:
        # Thought summaries come only when asked for, ahead of the answer.
        parts.insert(0, {"thought": True, "text": "thinking it over"})
    count = (body.get("generationConfig") or {}).get("candidateCount", 1)
    if "forbidden" in user_text:
        candidates = [{"finishReason": "SAFETY", "index": 0, "safetyRatings": []}]
    else:
        candidates = [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": i}
            for i in range(count)
        ]
    if config.get("responseLogprobs"):
        for candidate in (c for c in candidates if "content" in c):
            candidate["logprobsResult"] = _logprobs_result(candidate, config.get("logprobs", 0))
    return {
        "candidates": candidates,
        "usageMetadata": dict(state.report_usage or USAGE),
        "modelVersion": "gemini-2.5-flash-001",
        "responseId": base64.urlsafe_b64encode(os.urandom(9)).decode(),
    }


def _logprobs_result(candidate: dict[str, Any], alternatives: int) -> dict[str, Any]:
    """The echo model's log probabilities: a token per word of the answer's text, the i-th chosen with
    -0.5 * i, and `alternatives` other tokens per step ("alt<n>"), each less likely."""
    text = "".join(p.get("text", "") for p in candidate["content"]["parts"] if not p.get("thought"))
    tokens = split_pieces(text)
    chosen = [{"token": t, "logProbability": -0.5 * i} for i, t in enumerate(tokens)]

    def step(choice: dict[str, Any]) -> dict[str, Any]:
        others = [
            {"token": f"alt{n}", "logProbability": choice["logProbability"] - n}
            for n in range(1, alternatives)
        ]
        return {"candidates": [choice, *others]}

    steps = [step(choice) for choice in chosen] if alternatives else []
    return {"chosenCandidates": chosen, "topCandidates": steps}


def _result_text(response: Any) -> str:
    if isinstance(response, dict) and set(response) == {"result"}:
        return str(response["result"])
    return orjson.dumps(response).decode()


async def _sse(request: web.Request, answer: dict[str, Any]) -> web.StreamResponse:
    """The answer as Gemini streams it: the text in two events (thoughts with the first), the finish reason
    and usage on the last."""
    reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await reply.prepare(request)
    events = [answer]
    candidates = answer.get("candidates") or []
    parts = candidates[0].get("content", {}).get("parts", []) if candidates else []
    texts = [p for p in parts if "text" in p and not p.get("thought")]
    if len(candidates) == 1 and texts:
        text = texts[0]["text"]
        head, tail = text[: len(text) // 2], text[len(text) // 2 :]
        thoughts = [p for p in parts if p.get("thought")]  # a thought summary streams ahead of the text
        first_parts = [*thoughts, {"text": head}]
        first = {"candidates": [{"content": {"role": "model", "parts": first_parts}, "index": 0}]}
        first["usageMetadata"] = {"promptTokenCount": USAGE["promptTokenCount"]}
        last = orjson.loads(orjson.dumps(answer))
        last["candidates"][0]["content"]["parts"] = [{"text": tail}]
        events = [first, last]
    for event in events:
        await reply.write(b"data: " + orjson.dumps(event) + b"\r\n\r\n")
    await reply.write_eof()
    return reply


async def _generate(request: web.Request, model: str, action: str) -> web.StreamResponse:
    state = request.app[STATE]
    body_bytes = await request.read()
    _record(request, body_bytes)
    if (fault := state.next_fault()) is not None:
        return web.json_response(fault[1], status=fault[0])
    if model not in state.models:
        return google_error(404, "NOT_FOUND", f"models/{model} is not found for API version v1beta")
    try:
        body = orjson.loads(body_bytes)
        _check_body(body, state, model)
    except (orjson.JSONDecodeError, Refused, KeyError, TypeError, AttributeError) as exc:
        return google_error(400, "INVALID_ARGUMENT", str(exc) or "Invalid JSON payload received.")
    answer = _reply(body, state)
    if state.malformed:
        return web.Response(body=b"data: {not json\r\n\r\n" if action != "generateContent" else b"{oops")
    if action == "streamGenerateContent":
        if request.query.get("alt") != "sse":
            return google_error(400, "INVALID_ARGUMENT", "the fake streams with alt=sse only")
        return await _sse(request, answer)
    if action != "generateContent":
        return google_error(400, "INVALID_ARGUMENT", f"unknown action {action}")
    return web.json_response(answer)


async def _embed(request: web.Request, model: str) -> web.Response:
    body_bytes = await request.read()
    _record(request, body_bytes)
    requests = orjson.loads(body_bytes).get("requests") or []
    if not requests or any(r.get("model") != f"models/{model}" for r in requests):
        return google_error(400, "INVALID_ARGUMENT", "each request must name the model")
    values = [[float(len(r["content"]["parts"][0]["text"])), 0.5, -0.25] for r in requests]
    return web.json_response({"embeddings": [{"values": v} for v in values]})


async def gemini_api(request: web.Request) -> web.StreamResponse:
    """`/{version}/models/{model}:{action}` of the Gemini API."""
    state = request.app[STATE]
    if request.match_info["version"] != state.api_version:
        return google_error(404, "NOT_FOUND", f"unknown API version {request.match_info['version']}")
    if request.headers.get("x-goog-api-key") not in state.api_keys:
        return google_error(
            400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", "API_KEY_INVALID"
        )
    model, _, action = request.match_info["tail"].partition(":")
    if action == "batchEmbedContents":
        return await _embed(request, model)
    return await _generate(request, model, action)


async def vertex(request: web.Request) -> web.StreamResponse:
    """`/v1/projects/{project}/locations/{region}/publishers/{publisher}/models/{model}:{action}`."""
    state = request.app[STATE]
    info = request.match_info
    if (info["project"], info["region"]) != (state.project, state.region):
        return google_error(404, "NOT_FOUND", f"project {info['project']} in {info['region']} is not known")
    bearer = request.headers.get("authorization", "")
    if not bearer.startswith("Bearer ") or not state.knows_token(bearer[7:]):
        return google_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
    model, _, action = info["tail"].partition(":")
    if info["publisher"] == "google":
        return await _generate(request, model, action)
    if info["publisher"] != "anthropic":
        return google_error(404, "NOT_FOUND", f"publisher {info['publisher']} is not known")
    body_bytes = await request.read()
    _record(request, body_bytes)
    if (fault := state.next_fault()) is not None:
        return web.json_response(fault[1], status=fault[0])
    if model == "count-tokens" and action == "rawPredict":
        return count_tokens_answer(body_bytes)
    if model not in state.models:
        return google_error(404, "NOT_FOUND", f"Publisher Model {model} was not found")
    return await claude_answer(request, body_bytes, action)


async def token(request: web.Request) -> web.Response:
    """The OAuth token endpoint: a JWT-bearer grant signed by the service account's key."""
    state = request.app[STATE]
    form = await request.post()
    state.token_requests += 1
    if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
        return web.json_response({"error": "unsupported_grant_type"}, status=400)
    problem = verify_assertion(str(form.get("assertion", "")), state, str(request.url))
    if problem is not None or state.refuse_tokens:
        return web.json_response(
            {"error": "invalid_grant", "error_description": problem or "refused"}, status=400
        )
    return web.json_response(
        {"access_token": state.issue_token(), "expires_in": state.expires_in, "token_type": "Bearer"}
    )


def build_app(state: GeminiState) -> web.Application:
    app = web.Application()
    app[STATE] = state
    app.router.add_post("/token", token)
    app.router.add_post(
        "/v1/projects/{project}/locations/{region}/publishers/{publisher}/models/{tail}", vertex
    )
    app.router.add_post("/{version}/models/{tail}", gemini_api)
    return app
