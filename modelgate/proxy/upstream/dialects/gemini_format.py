"""A chat completion request as Gemini's `generateContent` body (Gemini API and Gemini on Vertex).

System and developer messages become `systemInstruction`; user and assistant turns `contents` with roles
`user` and `model`; assistant `tool_calls` become `functionCall` parts and tool messages `functionResponse`
parts (named after the call they answer); tools `functionDeclarations` with their schema cut to what Gemini
accepts (gemini_schema.py); sampling options `generationConfig`. A request this cannot carry (an unknown
content part, a tool message answering no call, arguments that are not JSON) is the client's 400.

A tool call's id carries Gemini's `thoughtSignature` when the model gave one (gemini_answers.py writes it), so
a client that sends the conversation back returns the signature Gemini 3 requires with the call.
"""

from __future__ import annotations

import base64
import mimetypes
from typing import Any

import orjson

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.field_matrix import CHAT_ON_GEMINI
from modelgate.proxy.translation.field_rules import check_fields
from modelgate.proxy.translation.reasoning import gemini_thinking
from modelgate.proxy.upstream.dialects.base import add_turn
from modelgate.proxy.upstream.dialects.gemini_schema import gemini_schema

SIGNATURE_MARK = "__ts_"  # in a tool call id: what follows is the call's thought signature (URL-safe base64)
# Google's documented stand-in for a signature lost on the way (a conversation built without one).
_NO_SIGNATURE = "skip_thought_signature_validator"
_TOOL_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


def gemini_request(payload: dict[str, Any]) -> dict[str, Any]:
    """The Gemini `generateContent` body for a chat completion request (docs/translation-fields.md)."""
    check_fields(payload, CHAT_ON_GEMINI.fields)
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array")
    model = str(payload.get("model") or "")
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, dict):
            raise InvalidRequest("each message must be an object")
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_text_parts(message.get("content"), role))
        elif role == "user":
            add_turn(contents, "user", _user_parts(message.get("content")), "parts")
        elif role == "assistant":
            add_turn(contents, "model", _assistant_parts(message, call_names, model), "parts")
        elif role in ("tool", "function"):
            add_turn(contents, "user", [_function_response(message, call_names)], "parts")
        else:
            raise InvalidRequest(f"message role {role!r} cannot be sent to a Gemini model")
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"role": "user", "parts": system}
    tools = payload.get("tools")
    if tools:
        body["tools"] = [{"functionDeclarations": [_declaration(tool) for tool in _listed(tools, "tools")]}]
    if (choice := payload.get("tool_choice")) is not None:
        body["toolConfig"] = {"functionCallingConfig": _calling_config(choice)}
    config = _generation_config(payload)
    if thinking := gemini_thinking(payload.get("reasoning_effort"), model):
        config["thinkingConfig"] = thinking
    if config:
        body["generationConfig"] = config
    return body


def _listed(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidRequest(f"'{name}' must be an array")
    return value


def _text_parts(content: Any, role: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts = []
    for part in _listed(content, f"{role} message content"):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise InvalidRequest(f"a {role} message may hold only text parts for a Gemini model")
        if part["text"]:
            parts.append({"text": part["text"]})
    return parts


def _user_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str) or content is None:
        return [{"text": content}] if content else []
    parts = []
    for part in _listed(content, "user message content"):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            parts.append(media_part(image.get("url") if isinstance(image, dict) else image))
        elif kind == "input_audio" and isinstance(part.get("input_audio"), dict):
            audio = part["input_audio"]
            mime = f"audio/{audio.get('format') or 'wav'}"
            parts.append({"inlineData": {"mimeType": mime, "data": str(audio.get("data") or "")}})
        elif kind == "file" and isinstance(part.get("file"), dict) and part["file"].get("file_data"):
            parts.append(media_part(part["file"]["file_data"]))
        else:
            raise InvalidRequest(f"content part type {kind!r} cannot be sent to a Gemini model")
    return parts


def media_part(url: Any) -> dict[str, Any]:
    """An image (or file) URL as a Gemini part: a data URL inline, an http(s) URL by reference."""
    if not isinstance(url, str) or not url:
        raise InvalidRequest("an image_url content part needs a non-empty 'url'")
    if url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        mime, _, encoding = header.partition(";")
        if not sep or encoding != "base64" or not mime:
            raise InvalidRequest("an image data URL must be base64-encoded: data:<media type>;base64,<data>")
        return {"inlineData": {"mimeType": mime, "data": data}}
    if url.startswith(("https://", "http://", "gs://")):
        mime, _ = mimetypes.guess_type(url.split("?", 1)[0])
        if mime is None:
            raise InvalidRequest(
                f"cannot tell the media type of {url[:100]!r} for a Gemini model: send it as a data URL"
                " or a URL ending in its file extension (.png, .jpg, .webp, .pdf, ...)"
            )
        return {"fileData": {"mimeType": mime, "fileUri": url}}
    raise InvalidRequest("an image URL must be a data: URL or an http(s):// URL")


def _assistant_parts(message: dict[str, Any], call_names: dict[str, str], model: str) -> list[dict[str, Any]]:
    content = message.get("content")
    parts = _text_parts(content, "assistant") if not isinstance(content, list) else _assistant_text(content)
    for position, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest("an assistant tool call needs a function with a name")
        arguments = function.get("arguments") or "{}"
        try:
            args = orjson.loads(arguments) if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError:
            raise InvalidRequest(f"the arguments of tool call {call.get('id')!r} are not JSON") from None
        if not isinstance(args, dict):
            raise InvalidRequest(f"the arguments of tool call {call.get('id')!r} must be a JSON object")
        call_id = str(call.get("id") or "")
        call_names[call_id] = function["name"]
        part: dict[str, Any] = {"functionCall": {"name": function["name"], "args": args}}
        signature = signature_of(call_id)
        if signature is None and position == 0 and "gemini-3" in model:
            signature = _NO_SIGNATURE
        if signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _assistant_text(content: list[Any]) -> list[dict[str, Any]]:
    # An assistant turn may hold refusal parts besides text; only the text goes back to the model.
    return [
        {"text": part["text"]}
        for part in content
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    ]


def _function_response(message: dict[str, Any], call_names: dict[str, str]) -> dict[str, Any]:
    if message.get("role") == "function":
        name = message.get("name")
    else:
        call_id = str(message.get("tool_call_id") or "")
        name = call_names.get(call_id)
        if name is None:
            raise InvalidRequest(
                f"tool message answers tool call {call_id!r}, which no assistant message made"
            )
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    response: Any = None
    if isinstance(content, str):
        try:
            response = orjson.loads(content)
        except orjson.JSONDecodeError:
            response = None
    if not isinstance(response, dict):
        response = {"result": content if content is not None else ""}
    return {"functionResponse": {"name": name, "response": response}}


def signature_of(call_id: str) -> str | None:
    """The thought signature a tool call id carries (standard base64, as Gemini wrote it), else None."""
    _, mark, encoded = call_id.partition(SIGNATURE_MARK)
    if not mark or not encoded:
        return None
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except ValueError:
        return None
    return base64.b64encode(raw).decode("ascii")


def call_id_with_signature(call_id: str, signature: Any) -> str:
    """`call_id` carrying Gemini's thought signature (URL-safe, so the id stays a plain token)."""
    if not isinstance(signature, str) or not signature:
        return call_id
    try:
        raw = base64.b64decode(signature + "=" * (-len(signature) % 4))
    except ValueError:
        return call_id
    return call_id + SIGNATURE_MARK + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _declaration(tool: Any) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise InvalidRequest(f"tool type {kind!r} cannot be sent to a Gemini model (function tools only)")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InvalidRequest("a function tool needs a function with a name")
    declaration: dict[str, Any] = {"name": function["name"]}
    if isinstance(function.get("description"), str):
        declaration["description"] = function["description"]
    parameters = gemini_schema(function.get("parameters")) if function.get("parameters") else None
    # Gemini refuses an object schema without properties: a function taking nothing declares no parameters.
    if parameters and (parameters.get("type") != "object" or parameters.get("properties")):
        declaration["parameters"] = parameters
    return declaration


def _calling_config(choice: Any) -> dict[str, Any]:
    if isinstance(choice, str) and choice in _TOOL_MODES:
        return {"mode": _TOOL_MODES[choice]}
    function = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return {"mode": "ANY", "allowedFunctionNames": [function["name"]]}
    raise InvalidRequest("tool_choice must be 'auto', 'none', 'required' or a named function")


def _logprobs_config(payload: dict[str, Any]) -> dict[str, Any]:
    """`logprobs` / `top_logprobs` as Gemini's `responseLogprobs` / `logprobs` (alternatives per token)."""
    top = payload.get("top_logprobs")
    if payload.get("logprobs") is not True:
        if top:
            raise InvalidRequest("'top_logprobs' requires 'logprobs' to be true")
        return {}
    config: dict[str, Any] = {"responseLogprobs": True}
    if top:
        if not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20:
            raise InvalidRequest("'top_logprobs' must be an integer from 0 to 20")
        config["logprobs"] = top
    return config


def _generation_config(payload: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    limit = payload.get("max_completion_tokens", payload.get("max_tokens"))
    if limit is not None:
        config["maxOutputTokens"] = limit
    for ours, theirs in (
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("n", "candidateCount"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ):
        if payload.get(ours) is not None:
            config[theirs] = payload[ours]
    config.update(_logprobs_config(payload))
    stop = payload.get("stop")
    if stop is not None:
        config["stopSequences"] = [stop] if isinstance(stop, str) else _listed(stop, "stop")
    response_format = payload.get("response_format")
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind in ("json_object", "json_schema"):
            config["responseMimeType"] = "application/json"
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
                config["responseSchema"] = gemini_schema(spec["schema"])
        elif kind not in ("text", "json_object"):
            raise InvalidRequest(f"response_format type {kind!r} cannot be sent to a Gemini model")
    return config
