"""The echo model's structured answer: a deterministic JSON value that fits a JSON Schema.

What real providers do when asked for structured output (a forced tool, `response_format`, `responseSchema`):
answer with a value of the schema. Strings are the user's words, integers their count, so a test can tell the
value came from its own prompt; every property is filled (strict schemas require all of them).
"""

from __future__ import annotations

from typing import Any

from .echo_model import word_count


def schema_answer(schema: Any, user_text: str) -> Any:
    """A value of `schema` (JSON Schema, or Gemini's OpenAPI subset) made from `user_text`."""
    definitions: dict[str, Any] = {}
    if isinstance(schema, dict):
        for key in ("$defs", "definitions"):
            for name, value in (schema.get(key) or {}).items():
                definitions[f"#/{key}/{name}"] = value
    return _value(schema, user_text, definitions, 0)


def _value(schema: Any, text: str, definitions: dict[str, Any], depth: int) -> Any:
    if not isinstance(schema, dict) or depth > 16:
        return {}
    if isinstance(schema.get("$ref"), str):
        return _value(definitions.get(schema["$ref"], {}), text, definitions, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        variants = [v for v in schema.get(key) or () if not (isinstance(v, dict) and v.get("type") == "null")]
        if variants:
            return _value(variants[0], text, definitions, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    kind = str(kind).lower() if kind is not None else ("object" if "properties" in schema else "string")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _value(value, text, definitions, depth + 1) for name, value in properties.items()}
    if kind == "array":
        return [_value(schema.get("items") or {}, text, definitions, depth + 1)]
    if kind == "integer":
        return word_count(text)
    if kind == "number":
        return word_count(text) + 0.5
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return text
