"""Structured output (`response_format`) for providers whose own mechanism is a forced tool.

A chat request's `response_format` of type `json_schema` (strict or not) or `json_object` is carried to an
Anthropic-family row (native, Bedrock InvokeModel, Vertex rawPredict) and to Bedrock Converse as one more
tool, the *answer tool*, whose input schema is the requested schema, and a tool choice that makes the model
call it. Its call comes back as the answer's text (the JSON of its input), finishing with `stop`, so
`chat.completions.parse` reads it as if the provider had written JSON itself. A forced tool works on every
model of those families; their native JSON-schema outputs do not (older Claude models, most Converse models).

`json_object` asks for any JSON object: the answer tool's schema is then an open object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.proxy.translation.field_rules import FieldRefused

# The answer tool's name; a client tool of the same name would be told apart from it by nothing, so a
# request that has both is refused.
ANSWER_TOOL = "json_answer"
OPEN_OBJECT: dict[str, Any] = {"type": "object"}
_DESCRIPTION = "Give your whole answer by calling this tool once, its input being the answer."


@dataclass(frozen=True, slots=True)
class AnswerTool:
    """The tool that carries a structured answer: its schema and what the model is told about it."""

    schema: dict[str, Any]
    description: str


def answer_tool_of(response_format: Any, tool_names: list[str]) -> AnswerTool | None:
    """The answer tool for a chat `response_format` (None for none or `text`); `tool_names` are the client's
    own tools. FieldRefused for a format no provider of these families can honour."""
    schema = requested_schema(response_format)
    if schema is None:
        return None
    if ANSWER_TOOL in tool_names:
        raise FieldRefused("tools", f"a tool named {ANSWER_TOOL!r} cannot come with 'response_format'")
    description = _DESCRIPTION
    spec = response_format.get("json_schema")
    if isinstance(spec, dict) and isinstance(spec.get("description"), str) and spec["description"]:
        description = f"{_DESCRIPTION} {spec['description']}"
    return AnswerTool(schema, description)


def requested_schema(response_format: Any) -> dict[str, Any] | None:
    """The object schema a chat `response_format` asks for (an open object for `json_object`; None for none
    or `text`)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise FieldRefused("response_format", "must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return OPEN_OBJECT
    if kind != "json_schema":
        raise FieldRefused("response_format", f"type {kind!r} is not one this provider takes")
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise FieldRefused("response_format", "'json_schema' must be an object with a 'name'")
    schema = spec.get("schema")
    if schema is None:
        return OPEN_OBJECT
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        # Tool inputs are objects on every one of these providers.
        raise FieldRefused("response_format", "'json_schema.schema' must describe an object")
    return schema


def asks_structured_output(payload: dict[str, Any] | None) -> bool:
    """Whether a chat request asked for JSON (so a call of the answer tool is its answer)."""
    response_format = payload.get("response_format") if payload else None
    return isinstance(response_format, dict) and response_format.get("type") in ("json_schema", "json_object")
