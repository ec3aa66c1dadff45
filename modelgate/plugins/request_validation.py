"""Route-specific parameter checks that the gateway owns (the spec's 400 rules); upstreams check the rest."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.state.objects import is_object_id

_CONVERSATION_ID = re.compile(r"^conv_[A-Za-z0-9_-]{1,128}$")
DECISION_QUESTION_TYPES = frozenset({"boolean", "choice", "number", "text", "predicate", "score"})


def _expect_bool(payload: dict, name: str) -> None:
    # null is the OpenAI API's "not given" for these flags, so only other non-booleans are refused.
    if payload.get(name) is not None and not isinstance(payload[name], bool):
        raise InvalidRequest(
            f"Invalid type for '{name}': expected a boolean, got {_type_name(payload[name])}."
        )


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def validate_responses(payload: dict) -> None:
    """`store`, `previous_response_id`, `conversation`, `background` (spec rule 2)."""
    _expect_bool(payload, "store")
    _expect_bool(payload, "background")
    previous = payload.get("previous_response_id")
    if previous is not None and not is_object_id(previous):
        raise InvalidRequest("Invalid 'previous_response_id': expected the id of a stored response.")
    conversation = payload.get("conversation")
    if conversation is not None:
        conv_id = conversation.get("id") if isinstance(conversation, dict) else conversation
        if not isinstance(conv_id, str) or not _CONVERSATION_ID.match(conv_id):
            raise InvalidRequest(
                "Invalid 'conversation': expected a conversation id 'conv_…' or {\"id\": \"conv_…\"}."
            )
        if previous is not None:
            raise InvalidRequest("'previous_response_id' and 'conversation' cannot be used together.")
    if payload.get("background") is True and payload.get("store") is False:
        raise InvalidRequest("'background' requires 'store' to be true.")


def validate_decisions(payload: dict) -> None:
    """A decision request: `model`, `state` or `input`, and typed `questions`; no streaming."""
    if payload.get("stream"):
        raise InvalidRequest("decisions do not support streaming")
    if "state" not in payload and "input" not in payload:
        raise InvalidRequest("a decision request needs 'state' or 'input'")
    questions = payload.get("questions")
    if not isinstance(questions, list) or not questions:
        raise InvalidRequest("'questions' must be a non-empty array")
    for index, question in enumerate(questions):
        if not isinstance(question, dict):
            raise InvalidRequest(f"questions[{index}] must be an object")
        # The openai SDK names questions with an optional `name`; the gateway's own shape uses `id`.
        for label in ("id", "name"):
            if label in question and not isinstance(question[label], str):
                raise InvalidRequest(f"questions[{index}].{label} must be a string")
        if question.get("type") not in DECISION_QUESTION_TYPES:
            allowed = ", ".join(sorted(DECISION_QUESTION_TYPES))
            raise InvalidRequest(f"questions[{index}].type must be one of: {allowed}")


def validate_messages(payload: dict) -> None:
    """A Messages request: `max_tokens` (required, spec rule 3) and a non-empty list of turns."""
    max_tokens = payload.get("max_tokens")
    if max_tokens is None:
        raise InvalidRequest("max_tokens: Field required")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: must be an integer of at least 1")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: must be a non-empty array of {role, content} objects")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise InvalidRequest(f"messages.{index}.role: must be 'user' or 'assistant'")
        if not isinstance(message.get("content"), str | list):
            raise InvalidRequest(f"messages.{index}.content: must be a string or an array of content blocks")


# Fields that name, key or get stored: ids the gateway or the provider looks up, and labels kept with the
# request. A NUL there cannot be stored (PostgreSQL text) or matched, so it is refused. A NUL inside prompt
# text is the provider's business and is forwarded: refusing it would mean scanning every prompt.
_LOOKED_UP_FIELDS = ("model", "user", "previous_response_id", "safety_identifier", "prompt_cache_key")
_LABEL_FIELDS = ("metadata", "conversation")


def refuse_nul_in_looked_up_fields(payload: dict) -> None:
    """400 when an id, a user or a metadata key or value holds a NUL character."""
    for name in _LOOKED_UP_FIELDS:
        value = payload.get(name)
        if isinstance(value, str) and "\x00" in value:
            raise InvalidRequest(f"Invalid '{name}': it must not contain NUL characters.")
    for name in _LABEL_FIELDS:
        value = payload.get(name)
        texts = [value] if isinstance(value, str) else []
        if isinstance(value, dict):
            texts = [*value, *(v for v in value.values() if isinstance(v, str))]
        if any("\x00" in text for text in texts):
            raise InvalidRequest(f"Invalid '{name}': its keys and values must not contain NUL characters.")


_ROUTE_CHECKS: dict[str, Callable[[dict], None]] = {
    "responses": validate_responses,
    "decisions": validate_decisions,
    "messages": validate_messages,
}


class RequestValidation(Plugin):
    """Checks `stream` and the route's own parameters before any routing."""

    name = "request_validation"
    requires = frozenset({"body", "body_stream", "payload", "route"})
    provides = frozenset({"stream"})
    essential = True

    def on_request(self, ctx: RequestContext) -> None:
        payload = ctx.payload
        if payload is None:
            return
        if ctx.body_stream is not None:  # a multipart body's fields are all strings
            if any("\x00" in value for value in payload.values()):
                raise InvalidRequest("multipart fields must not contain NUL characters")
            return
        # JSON can only carry a NUL escaped, so bodies without one skip the field checks.
        if ctx.body and b"\\u0000" in ctx.body:
            refuse_nul_in_looked_up_fields(payload)
        stream = payload.get("stream")
        if stream is None:  # absent, or null: the OpenAI API's "not given"
            stream = False
        if not isinstance(stream, bool):
            raise InvalidRequest(f"Invalid type for 'stream': expected a boolean, got {_type_name(stream)}.")
        route = ctx.matched_route
        if stream and not route.streams:
            raise InvalidRequest(f"streaming is not supported on {route.path}")
        ctx.stream = stream
        check = _ROUTE_CHECKS.get(route.name)
        if check is not None:
            check(payload)
