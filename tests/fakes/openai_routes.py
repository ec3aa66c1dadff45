"""OpenAI `POST /v1/embeddings` and `POST /v1/decisions`."""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson
from aiohttp import web

from .context import answered_model, json_body, optional_int, required
from .echo_model import (
    DEFAULT_DIMENSIONS,
    TOKENS_PER_MESSAGE,
    content_text,
    embedding_vector,
    new_id,
    text_inputs,
    word_count,
)
from .envelopes import UpstreamError, json_response


async def embeddings(request: web.Request) -> web.Response:
    body = json_body(request)
    model = answered_model(request, body)
    inputs = text_inputs(body.get("input"))
    if inputs is None:
        raise UpstreamError(
            400, "Invalid 'input': expected a string, strings or token arrays.", param="input"
        )
    dimensions = optional_int(body, "dimensions") or DEFAULT_DIMENSIONS
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise UpstreamError(
            400, "Invalid 'encoding_format': expected 'float' or 'base64'.", param="encoding_format"
        )
    data = []
    for index, (text, _) in enumerate(inputs):
        vector = embedding_vector(text, dimensions)
        encoded: Any = vector
        if encoding == "base64":
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(count for _, count in inputs)
    return json_response(
        {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def _state_text(state: Any) -> str:
    """Text the decision model reads: a string, message items, or any JSON state serialised."""
    if isinstance(state, str):
        return state
    if isinstance(state, list) and all(isinstance(item, dict) and "content" in item for item in state):
        return " ".join(content_text(item["content"]) for item in state)
    return orjson.dumps(state).decode()


def _first_of(items: Any, index: int, field: str) -> list[Any]:
    if not isinstance(items, list) or not items:
        raise UpstreamError(400, f"questions[{index}].{field}: expected a non-empty list.", param="questions")
    return items


def _answer(index: int, question: Any) -> dict[str, Any]:
    """A deterministic typed answer: true, the first option, 1, or "ok".

    Questions typed `boolean`/`choice`+`options`/`number`/`text` get `{question_id, value}`; the SDK's
    `predicate`/`choice`+`choices`/`score` questions get the SDK's answer shape plus those two keys.
    """
    if not isinstance(question, dict):
        raise UpstreamError(400, f"questions[{index}]: expected an object.", param="questions")
    kind = question.get("type")
    qid = question.get("id", question.get("name"))
    if kind in ("boolean", "number", "text"):
        return {"question_id": qid, "value": {"boolean": True, "number": 1, "text": "ok"}[kind]}
    if kind == "choice" and "options" in question:
        first = _first_of(question["options"], index, "options")[0]
        return {"question_id": qid, "value": first.get("value") if isinstance(first, dict) else first}
    named = {"question_id": qid, "name": question.get("name")}
    if kind == "predicate":
        return {**named, "type": "predicate", "probability": 1.0, "value": True}
    if kind == "choice":
        values = [
            c.get("value") if isinstance(c, dict) else c
            for c in _first_of(question.get("choices"), index, "choices")
        ]
        probabilities = [{"value": v, "probability": 1.0 if i == 0 else 0.0} for i, v in enumerate(values)]
        return {
            **named,
            "type": "choice",
            "choice": values[0],
            "value": values[0],
            "confidence": 1.0,
            "probabilities": probabilities,
        }
    if kind == "score":
        levels = _first_of(question.get("levels"), index, "levels")
        probabilities = [
            {
                "label": level.get("label") if isinstance(level, dict) else str(level),
                "value": i + 1,
                "probability": 1.0 if i == 0 else 0.0,
            }
            for i, level in enumerate(levels)
        ]
        return {
            **named,
            "type": "score",
            "score": 1.0,
            "value": 1,
            "confidence": 1.0,
            "probabilities": probabilities,
        }
    raise UpstreamError(400, f"questions[{index}].type: unsupported {kind!r}.", param="questions")


async def decisions(request: web.Request) -> web.Response:
    body = json_body(request)
    model = required(body, "model", str)
    questions = required(body, "questions", list)
    if not questions:
        raise UpstreamError(400, "questions: expected at least one question.", param="questions")
    state = body.get("state", body.get("input"))
    if state is None:
        raise UpstreamError(400, "state: Field required (or `input`).", param="state")
    answers = [_answer(i, q) for i, q in enumerate(questions)]
    input_tokens = word_count(_state_text(state)) + TOKENS_PER_MESSAGE * len(questions)
    output_tokens = len(answers)
    return json_response(
        {
            "id": new_id("dec_"),
            "object": "decision",
            "model": model,
            "answers": answers,
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        }
    )
