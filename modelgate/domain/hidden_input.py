"""Prompt tokens a request body does not show, bounded from what the gateway knows, so that its reservation
bounds what the provider can bill (docs/billing.md).

The body's own bytes are estimated elsewhere (2 bytes a token). What they do not show: the context a
`previous_response_id` or `conversation` re-reads (known to the gateway from that response's reported usage,
`proxy.state.objects`; else the model's context window), a stored `prompt: {id}`, files named by id, URL or
data (a PDF is read as text and page images), images named by URL or file id (OpenAI's tile formula: the
base at detail "low", else the base and 8 tiles), audio by URL, and what hosted tools (web and file search,
MCP, code interpreter) put into the prompt. Together they never exceed the model's context window, which
no prompt can.

The request path stays cheap: the parts are walked only when a message (chat, messages) or input item
(Responses) has content that is not plain text (`may_name_parts`): a plain chat request costs a look at each
message's content type (~0.3 µs for two messages; a substring search of a 1 KB body costs ~1.5 µs on
CPython 3.11, four of them about as much as parsing the body).
"""

from __future__ import annotations

from typing import Any

from modelgate.config import ModelConfig
from modelgate.config.schema import CLAUDE_MAX_IMAGE_TOKENS

_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
# Parts whose content the provider reads from elsewhere, or turns into more tokens than their bytes.
_FILE_PARTS = frozenset({"file", "input_file", "document", "audio_url", "input_audio_url"})
# Tools that run at the provider and feed what they find back into the prompt (OpenAI Responses: web_search,
# web_search_preview, file_search, mcp, code_interpreter, image_generation; Anthropic server tools:
# web_search_20250305, web_fetch_…, code_execution_…). Client tools — chat and Responses `function` and
# `custom`, Anthropic tools without a type or executed by the client (bash, text editor, computer) — add
# only what the client sends back, which a later body shows.
_HOSTED_TOOLS = (
    "web_search",
    "web_fetch",
    "file_search",
    "mcp",
    "code_interpreter",
    "code_execution",
    "image_gen",
)


def may_name_parts(payload: dict[str, Any]) -> bool:
    """Whether the payload may hold a part naming input it does not show (false: no walk needed): parts
    live in content that is not a string (chat and messages `messages`, Responses `input`)."""
    for name in ("messages", "input"):
        items = payload.get(name, ())
        if items.__class__ is list:
            for item in items:  # plain loops and class checks: this runs on every request
                if item.__class__ is not dict or item.get("content").__class__ is not str:
                    return True
    return False


def hosted_tools(payload: dict[str, Any]) -> bool:
    """Whether a request lets the provider run tools whose results enter the prompt (web search, ...):
    such a request can bill input beyond the context window (each internal turn re-reads it)."""
    tools = payload.get("tools")
    if not isinstance(tools, list):
        return False
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind.startswith(_HOSTED_TOOLS):
            return True
    return False


def hidden_input_tokens(payload: dict[str, Any], model: ModelConfig, carried: int) -> int:
    """Prompt tokens beyond the body's own: `carried` (a previous response's or conversation's context),
    a stored prompt, named files and images, hosted tools' results; at most the model's context window."""
    context = model.max_context_tokens
    hidden = carried
    prompt = payload.get("prompt")
    if isinstance(prompt, dict) and prompt.get("id") is not None:  # a stored prompt (Responses)
        return context
    if hosted_tools(payload):
        return context
    if may_name_parts(payload):
        hidden += _part_tokens(payload, model)
    return hidden if hidden < context else context


def _part_tokens(payload: dict[str, Any], model: ModelConfig) -> int:
    """Tokens of the images and files the payload's parts name (a file: the whole context window)."""
    total = 0
    stack: list[Any] = [payload]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            kind = item.get("type")
            if kind.__class__ is str:  # a client may send anything: an unhashable `type` is no part
                if kind in _IMAGE_PARTS:
                    total += _image_tokens(item, model)
                elif kind in _FILE_PARTS:
                    return model.max_context_tokens
            for value in item.values():
                if isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return total


def _image_tokens(part: dict[str, Any], model: ModelConfig) -> int:
    """An image part's most tokens by its provider's formula: for Claude (a Messages `image` part, or a
    model served by Claude) Anthropic's bound, whatever the detail; else OpenAI's tile formula, its base at
    detail "low" (chat: in `image_url`; Responses: on the part), else the base and 8 tiles."""
    if model.claude_images or part.get("type") == "image":
        tiles = model.max_image_tokens
        return tiles if tiles > CLAUDE_MAX_IMAGE_TOKENS else CLAUDE_MAX_IMAGE_TOKENS
    detail = part.get("detail")
    inner = part.get("image_url")
    if detail is None and isinstance(inner, dict):
        detail = inner.get("detail")
    if detail == "low":
        return model.image_base_tokens
    return model.max_image_tokens
