"""A fake AWS Bedrock runtime: InvokeModel (and its response stream) for Claude, Converse (and ConverseStream)
for other models, CountTokens. It checks what it receives like Bedrock does — the SigV4 signature against
the known test secret, the path, the body's shape (botocore's bedrock-runtime service model) — and answers
like Bedrock: JSON, or event-stream frames with real CRCs; tool use, usage, invocation metrics; exceptions
as HTTP errors with `x-amzn-errortype` or as stream frames, first or mid-stream, on demand (`fake.then(...)`).
"""

from __future__ import annotations

import base64
import binascii
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from .bedrock_wire import event_frame, exception_frame, signature_problem, with_bad_crc
from .gates import Gates
from .records import RecordedRequest, RequestLog
from .schema_answer import schema_answer
from .upstream import SHUTDOWN_GRACE, FakeUpstream

INPUT_TOKENS = 17
OUTPUT_TOKENS = 5
TOOL_ID = "tooluse_fake0001"
EVENT_STREAM = "application/vnd.amazon.eventstream"
METRICS = {"inputTokenCount": INPUT_TOKENS, "outputTokenCount": OUTPUT_TOKENS, "invocationLatency": 120}
# What `then()` takes: the next request's misbehaviour.
MODES = ("throttle", "validation", "unavailable", "exception-first", "exception-mid", "bad-crc", "garbage")
MODES += ("no-delta-usage",)
_STATE: web.AppKey[BedrockState] = web.AppKey("bedrock_state")
_CONVERSE_KEYS = {
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "additionalModelRequestFields",
    "requestMetadata",
}
_BLOCKS = {"text", "image", "toolUse", "toolResult", "document"}


@dataclass(slots=True)
class BedrockState:
    region: str
    keys: dict[str, tuple[str, str | None]]  # access key id → (secret, session token)
    log: RequestLog
    gates: Gates
    modes: deque[str] = field(default_factory=deque)
    # The TokenUsage a Converse answer reports instead of the fixed one (plain and streamed), until cleared.
    report_usage: dict | None = None
    report_claude_usage: dict | None = None  # the same for InvokeModel (Anthropic's shape)


class FakeBedrock(FakeUpstream):
    """The fake Bedrock on a loopback port (`base_url`); `requests` records what it received."""

    def __init__(self, *, region: str = "us-east-1", keys: dict[str, tuple[str, str | None]]) -> None:
        super().__init__("bedrock")
        self.state = BedrockState(region, keys, self._ctx.log, self._ctx.gates)

    def then(self, *modes: str) -> None:
        """Misbehave on the next requests, one mode each (see MODES)."""
        assert all(mode in MODES for mode in modes), modes
        self.state.modes.extend(modes)

    def clear(self) -> None:
        super().clear()
        self.clear_faults()
        self.state.modes.clear()
        self.state.report_usage = self.state.report_claude_usage = None

    async def _listen(self) -> None:
        app = web.Application()
        app[_STATE] = self.state
        app.router.add_post("/model/{model}/{action}", _handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self.port = runner.addresses[0][1]


def aws_error(status: int, name: str, message: str) -> web.Response:
    headers = {"x-amzn-errortype": f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    return web.json_response({"message": message}, status=status, headers=headers)


async def _handle(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE]
    body = await request.read()
    headers = {k.lower(): v for k, v in request.headers.items()}
    state.log.append(RecordedRequest.capture("POST", request.raw_path, dict(request.query), headers, body))
    refused = signature_problem("POST", request.raw_path, headers, body, state.region, state.keys)
    if refused is not None:
        return aws_error(403, *refused)
    mode = state.modes.popleft() if state.modes else ""
    if mode in ("throttle", "validation", "unavailable"):
        return {
            "throttle": aws_error(
                429, "ThrottlingException", "Too many requests, please wait before trying again."
            ),
            "validation": aws_error(
                400, "ValidationException", "Malformed input request: temperature out of range"
            ),
            "unavailable": aws_error(
                503, "ServiceUnavailableException", "Bedrock is unable to process your request."
            ),
        }[mode]
    model, action = request.match_info["model"], request.match_info["action"]
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return aws_error(400, "SerializationException", "Could not parse the request body.")
    if action in ("invoke", "invoke-with-response-stream", "count-tokens"):
        problem = _count_problem(document) if action == "count-tokens" else _invoke_problem(document)
    elif action in ("converse", "converse-stream"):
        problem = _converse_problem(document)
    else:
        return aws_error(404, "UnknownOperationException", f"no operation {action}")
    if problem:
        return aws_error(400, "ValidationException", problem)
    if action == "count-tokens":
        return web.json_response({"inputTokens": INPUT_TOKENS})
    if mode == "garbage" and not action.endswith("stream"):
        return web.Response(body=b"{not json", content_type="application/json")
    if action == "invoke":
        return web.json_response(_claude_message(document, model, state.report_claude_usage))
    if action == "converse":
        return web.json_response(_converse_answer(document, state.report_usage))
    if action.startswith("invoke"):
        frames = list(_claude_events(document, model, mode, state.report_claude_usage))
    else:
        frames = list(_converse_events(document, state.report_usage))
    return await _stream(request, frames, mode)


async def _stream(request: web.Request, frames: list[bytes], mode: str) -> web.StreamResponse:
    """The frames, each in two writes (the client must put frames together from pieces). A mid-stream
    break (`exception-mid`, `bad-crc`) comes after the first three frames, once the test released the gate
    `mid` (so those frames reached the client first)."""
    later: list[bytes] = []
    if mode == "exception-first":
        frames = [exception_frame("throttlingException", "Too many tokens, please wait before trying again.")]
    elif mode == "exception-mid":
        frames, later = (
            frames[:3],
            [exception_frame("modelStreamErrorException", "The model stopped unexpectedly.")],
        )
    elif mode == "bad-crc":
        frames, later = frames[:3], [with_bad_crc(frames[3]), *frames[4:]]
    elif mode == "garbage":
        frames = [*frames[:2], b"\x00\x00\x00\tgarbage!!"]
    response = web.StreamResponse(headers={"content-type": EVENT_STREAM, "x-amzn-requestid": "req-fake-1"})
    await response.prepare(request)
    for data in frames:
        await response.write(data[:7])
        await response.write(data[7:])
    if later:
        await request.app[_STATE].gates.wait("mid")
        for data in later:
            await response.write(data)
    await response.write_eof()
    return response


# -- what it checks -----------------------------------------------------------------------------------------


def _invoke_problem(body: Any) -> str:
    if not isinstance(body, dict):
        return "body must be an object"
    if "model" in body or "stream" in body:
        return "extraneous key [model/stream] is not permitted"
    if body.get("anthropic_version") != "bedrock-2023-05-31":
        return "anthropic_version: must be bedrock-2023-05-31"
    if "anthropic_beta" in body and not all(isinstance(b, str) for b in body["anthropic_beta"]):
        return "anthropic_beta: must be a list of strings"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: required integer"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: required non-empty list"
    if any(m.get("role") not in ("user", "assistant") for m in messages):
        return "messages: roles must be user or assistant"
    return ""


def _count_problem(body: Any) -> str:
    try:
        encoded = body["input"]["invokeModel"]["body"]
        return _invoke_problem(orjson.loads(base64.b64decode(encoded, validate=True)))
    except (KeyError, TypeError, binascii.Error, orjson.JSONDecodeError):
        return "input.invokeModel.body: required base64 InvokeModel body"


def _converse_problem(body: Any) -> str:
    if not isinstance(body, dict) or not set(body) <= _CONVERSE_KEYS:
        return f"unknown keys: {sorted(set(body) - _CONVERSE_KEYS) if isinstance(body, dict) else body}"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: required non-empty list"
    tool_ids: set[str] = set()
    for number, message in enumerate(messages):
        if message.get("role") != ("user" if number % 2 == 0 else "assistant"):
            return "A conversation must alternate between user and assistant roles, starting with user."
        content = message.get("content")
        if not isinstance(content, list) or not content:
            return f"messages.{number}.content: required non-empty list"
        for block in content:
            if not isinstance(block, dict) or len(block) != 1 or not set(block) <= _BLOCKS:
                return f"messages.{number}: a content block must have exactly one member of {sorted(_BLOCKS)}"
            if problem := _block_problem(block, tool_ids):
                return f"messages.{number}: {problem}"
    if tool_ids and "toolConfig" not in body:
        return "toolConfig field must be defined when using toolUse and toolResult content blocks."
    if not all(isinstance(s, dict) and set(s) == {"text"} and s["text"] for s in body.get("system", [])):
        return "system: blocks of non-empty text"
    if not set(body.get("inferenceConfig", {})) <= {"maxTokens", "temperature", "topP", "stopSequences"}:
        return "inferenceConfig: unknown member"
    return _tool_config_problem(body.get("toolConfig"))


def _block_problem(block: dict, tool_ids: set[str]) -> str:
    if "text" in block and (not isinstance(block["text"], str) or not block["text"]):
        return "text must be a non-empty string"
    if "image" in block:
        image = block["image"]
        if image.get("format") not in ("png", "jpeg", "gif", "webp"):
            return "image.format must be png, jpeg, gif or webp"
        try:
            base64.b64decode(image["source"]["bytes"], validate=True)
        except (KeyError, TypeError, binascii.Error):
            return "image.source.bytes must be base64"
    if "toolUse" in block:
        use = block["toolUse"]
        if not use.get("toolUseId") or not use.get("name") or not isinstance(use.get("input"), dict):
            return "toolUse needs toolUseId, name and an input object"
        tool_ids.add(use["toolUseId"])
    if "toolResult" in block:
        result = block["toolResult"]
        if result.get("toolUseId") not in tool_ids or not isinstance(result.get("content"), list):
            return "toolResult must answer an earlier toolUse, with a content list"
    return ""


def _tool_config_problem(config: Any) -> str:
    if config is None:
        return ""
    tools = config.get("tools")
    if not isinstance(tools, list) or not tools:
        return "toolConfig.tools: required non-empty list"
    for tool in tools:
        spec = tool.get("toolSpec") if isinstance(tool, dict) else None
        if (
            not isinstance(spec, dict)
            or not spec.get("name")
            or not isinstance(spec.get("inputSchema", {}).get("json"), dict)
        ):
            return "toolConfig.tools: each a toolSpec with name and inputSchema.json"
    choice = config.get("toolChoice")
    if choice is not None and (len(choice) != 1 or not set(choice) <= {"auto", "any", "tool"}):
        return "toolConfig.toolChoice: one of auto, any, tool"
    return ""


# -- what it answers --------------------------------------------------------------------------------------


def _reply(last_content: Any, tool_names: list[str], tool_result: Any) -> tuple[str, str | None]:
    """(text, tool to call or None): a tool result is acknowledged, 'weather' with tools calls the first."""
    if tool_result is not None:
        return f"the tool said: {tool_result}", None
    text = last_content if isinstance(last_content, str) else " ".join(str(part) for part in last_content)
    if tool_names and "weather" in text:
        return "", tool_names[0]
    return f"echo: {text}", None


def _claude_reply(body: dict) -> tuple[str, str | None]:
    content = body["messages"][-1]["content"]
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    results = [b.get("content") for b in blocks if b.get("type") == "tool_result"]
    texts = [b["text"] for b in blocks if b.get("type") == "text"]
    choice = body.get("tool_choice") or {}
    if choice.get("type") == "tool" and not results:
        return " ".join(texts), choice["name"]  # a forced tool (structured output) is always called
    return _reply(
        " ".join(texts), [t["name"] for t in body.get("tools", [])], results[0] if results else None
    )


def _tool_input(schemas: dict[str, Any], tool: str, text: str) -> dict:
    """The fake's input for a call of `tool`: the weather city for the weather tool (or one that takes
    anything), else a value of its schema (a structured answer)."""
    schema = schemas.get(tool) or {}
    if tool == "get_weather" or not schema.get("properties"):
        return {"city": "Paris"}
    return schema_answer(schema, text)


def _claude_input(body: dict, tool: str, text: str) -> dict:
    return _tool_input({t["name"]: t.get("input_schema") for t in body.get("tools", [])}, tool, text)


def _claude_message(body: dict, model: str, reported: dict | None = None) -> dict:
    text, tool = _claude_reply(body)
    block = (
        {"type": "tool_use", "id": TOOL_ID, "name": tool, "input": _claude_input(body, tool, text)}
        if tool
        else None
    )
    return {  # no `model`: the gateway names it
        "id": "msg_bdrk_fake",
        "type": "message",
        "role": "assistant",
        "content": [block or {"type": "text", "text": text}],
        "stop_reason": "tool_use" if tool else "end_turn",
        "stop_sequence": None,
        "usage": reported or {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
    }


def _chunk(event: dict) -> bytes:
    return event_frame("chunk", {"bytes": base64.b64encode(orjson.dumps(event)).decode()})


def _claude_events(body: dict, model: str, mode: str, reported: dict | None = None) -> Iterator[bytes]:
    text, tool = _claude_reply(body)
    message = {**_claude_message(body, model), "content": [], "stop_reason": None, "model": model}
    message["usage"] = {**(reported or {"input_tokens": INPUT_TOKENS}), "output_tokens": 1}
    yield _chunk({"type": "message_start", "message": message})
    if tool:
        start = {"type": "tool_use", "id": TOOL_ID, "name": tool, "input": {}}
        arguments = orjson.dumps(_claude_input(body, tool, text)).decode()
        pieces = [{"type": "input_json_delta", "partial_json": p} for p in _halves(arguments)]
    else:
        start = {"type": "text", "text": ""}
        pieces = [{"type": "text_delta", "text": p} for p in _halves(text)]
    yield _chunk({"type": "content_block_start", "index": 0, "content_block": start})
    for delta in pieces:
        yield _chunk({"type": "content_block_delta", "index": 0, "delta": delta})
    yield _chunk({"type": "content_block_stop", "index": 0})
    delta = {"type": "message_delta", "delta": {"stop_reason": "tool_use" if tool else "end_turn"}}
    if mode != "no-delta-usage":
        delta["usage"] = reported or {"output_tokens": OUTPUT_TOKENS}
    yield _chunk(delta)
    yield _chunk({"type": "message_stop", "amazon-bedrock-invocationMetrics": METRICS})


def _halves(text: str) -> list[str]:
    return [text[: len(text) // 2], text[len(text) // 2 :]]


def _converse_reply(body: dict) -> tuple[str, str | None]:
    blocks = body["messages"][-1]["content"]
    results = [b["toolResult"]["content"][0].get("text") for b in blocks if "toolResult" in b]
    texts = [b["text"] for b in blocks if "text" in b] + [
        f"[{b['image']['format']} image]" for b in blocks if "image" in b
    ]
    forced = (body.get("toolConfig", {}).get("toolChoice") or {}).get("tool")
    if forced and not results:
        return " ".join(texts), forced["name"]  # a forced tool (structured output) is always called
    names = [t["toolSpec"]["name"] for t in body.get("toolConfig", {}).get("tools", [])]
    return _reply(" ".join(texts), names, results[0] if results else None)


def _converse_input(body: dict, tool: str) -> dict:
    blocks = body["messages"][-1]["content"]
    text = " ".join(b["text"] for b in blocks if "text" in b)
    specs = [t["toolSpec"] for t in body.get("toolConfig", {}).get("tools", [])]
    return _tool_input({spec["name"]: spec["inputSchema"]["json"] for spec in specs}, tool, text)


def _converse_stop(body: dict, text: str) -> tuple[str, str]:
    """The text cut at the first stop sequence it holds, and the stop reason."""
    hits = [(text.find(s), s) for s in body.get("inferenceConfig", {}).get("stopSequences", []) if s in text]
    return (text[: min(hits)[0]], "stop_sequence") if hits else (text, "end_turn")


def _converse_usage(reported: dict | None = None) -> dict:
    if reported is not None:
        return reported
    return {
        "inputTokens": INPUT_TOKENS,
        "outputTokens": OUTPUT_TOKENS,
        "totalTokens": INPUT_TOKENS + OUTPUT_TOKENS,
    }


def _converse_answer(body: dict, reported: dict | None = None) -> dict:
    text, tool = _converse_reply(body)
    text, stop_reason = _converse_stop(body, text)
    block = (
        {"toolUse": {"toolUseId": TOOL_ID, "name": tool, "input": _converse_input(body, tool)}}
        if tool
        else {"text": text}
    )
    return {
        "output": {"message": {"role": "assistant", "content": [block]}},
        "stopReason": "tool_use" if tool else stop_reason,
        "usage": _converse_usage(reported),
        "metrics": {"latencyMs": 42},
    }


def _converse_events(body: dict, reported: dict | None = None) -> Iterator[bytes]:
    text, tool = _converse_reply(body)
    text, stop_reason = _converse_stop(body, text)
    yield event_frame("messageStart", {"role": "assistant"})
    if tool:
        start = {"toolUse": {"toolUseId": TOOL_ID, "name": tool}}
        yield event_frame("contentBlockStart", {"contentBlockIndex": 0, "start": start})
        arguments = orjson.dumps(_converse_input(body, tool)).decode()
        deltas = [{"toolUse": {"input": piece}} for piece in _halves(arguments)]
    else:
        deltas = [{"text": piece} for piece in _halves(text)]
    for delta in deltas:
        yield event_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": delta})
    yield event_frame("contentBlockStop", {"contentBlockIndex": 0})
    yield event_frame("messageStop", {"stopReason": "tool_use" if tool else stop_reason})
    yield event_frame("metadata", {"usage": _converse_usage(reported), "metrics": {"latencyMs": 42}})
