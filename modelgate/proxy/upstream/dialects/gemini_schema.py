"""JSON Schema as Gemini's `Schema` takes it: the subset of OpenAPI 3.0 it accepts.

Function parameters (`tools[].function.parameters`) and structured output (`response_format.json_schema`)
arrive as JSON Schema; Gemini refuses keys it does not know (`additionalProperties`, `$schema`, ...). So:

- local references (`$ref` to `#/$defs/...` or `#/definitions/...`) are inlined (a cycle becomes a bare
  object) and the definitions dropped;
- `type: [T, "null"]` becomes `type: T` with `nullable: true`; `const` becomes a one-value `enum`;
  `oneOf` becomes `anyOf`; an `allOf` of one schema is that schema;
- enum values become strings (Gemini's enums are strings), `required` keeps only listed properties;
- every other key outside `_KEPT` (`additionalProperties`, `$schema`, `$id`, `title`, `examples`, `default`,
  `strict`, `not`, `patternProperties`, ...) is dropped.
"""

from __future__ import annotations

from typing import Any

# The keys of Gemini's Schema kept as they are (their values are checked by the host).
_KEPT = frozenset(
    (
        "description",
        "format",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minProperties",
        "maxProperties",
        "propertyOrdering",
        "nullable",
    )
)
_MAX_DEPTH = 32  # deeper than any real tool schema; a deeper one is cut to a bare object


def gemini_schema(schema: Any) -> dict[str, Any]:
    """`schema` (JSON Schema) in the subset Gemini accepts."""
    if not isinstance(schema, dict):
        return {"type": "object"}
    definitions: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            definitions.update({f"#/{key}/{name}": value for name, value in schema[key].items()})
    return _clean(schema, definitions, (), 0)


def _clean(schema: Any, definitions: dict[str, Any], seen: tuple[str, ...], depth: int) -> dict[str, Any]:
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return {"type": "object"}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = definitions.get(ref)
        if target is None or ref in seen:
            return {"type": "object"}
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _clean(merged, definitions, (*seen, ref), depth + 1)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return _clean({**all_of[0], **rest}, definitions, seen, depth + 1)

    out: dict[str, Any] = {key: schema[key] for key in _KEPT if key in schema}
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) < len(kind):
            out["nullable"] = True
        kind = kinds[0] if len(kinds) == 1 else None
        if len(kinds) > 1:
            out["anyOf"] = [{"type": k} for k in kinds]
    if isinstance(kind, str):
        out["type"] = kind
    if "const" in schema:
        out["enum"] = [_enum_value(schema["const"])]
        out.setdefault("type", "string")
    elif isinstance(schema.get("enum"), list):
        values = [v for v in schema["enum"] if v is not None]
        if len(values) < len(schema["enum"]):
            out["nullable"] = True
        out["enum"] = [_enum_value(v) for v in values]
        out["type"] = "string"  # Gemini's enums are strings whatever the values were
    if out.get("type") == "string" and out.get("format") not in (None, "enum", "date-time"):
        out.pop("format")  # the Gemini API refuses other string formats
    variants = schema.get("anyOf") if isinstance(schema.get("anyOf"), list) else schema.get("oneOf")
    if isinstance(variants, list):
        cleaned = [
            _clean(v, definitions, seen, depth + 1)
            for v in variants
            if not (isinstance(v, dict) and v.get("type") == "null")
        ]
        if len(cleaned) < len(variants):
            out["nullable"] = True
        if len(cleaned) == 1:
            out.update({k: v for k, v in cleaned[0].items() if k not in out})
        elif cleaned:
            out["anyOf"] = cleaned
    properties = schema.get("properties")
    if isinstance(properties, dict):
        out["properties"] = {
            str(name): _clean(value, definitions, seen, depth + 1) for name, value in properties.items()
        }
        out.setdefault("type", "object")
        required = schema.get("required")
        if isinstance(required, list):
            listed = [name for name in required if name in properties]
            if listed:
                out["required"] = listed
    if "items" in schema:
        items = schema["items"]
        out["items"] = _clean(
            items[0] if isinstance(items, list) and items else items, definitions, seen, depth + 1
        )
        out.setdefault("type", "array")
    if "type" not in out and "anyOf" not in out:
        out["type"] = "object" if depth == 0 else "string"
    return out


def _enum_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
