"""The deterministic "model" behind every fake route: echo replies, token counts, tool calls, vectors.

Token counts are words (whitespace-separated), so tests can compute expected usage by hand:
prompt tokens = words across all messages (+ system) + 3 per message; completion tokens = reply words.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

TOKENS_PER_MESSAGE = 3
WEATHER_CITIES = ("Paris", "London")
DEFAULT_DIMENSIONS = 8

# A word with the whitespace before it; the last piece also keeps trailing whitespace,
# so joining the pieces gives the text back exactly.
_PIECE = re.compile(r"\s*\S+\s*$|\s*\S+")


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def word_count(text: str) -> int:
    return len(text.split())


def split_pieces(text: str) -> list[str]:
    """One streamed delta per word; their concatenation equals `text`."""
    return _PIECE.findall(text)


def content_text(content: Any) -> str:
    """Text of a message content: a string, or a list of parts carrying `text` (tool results included)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif part.get("type") == "tool_result":
                parts.append(content_text(part.get("content")))
    return " ".join(p for p in parts if p)


def prompt_tokens(messages: Iterable[Any], system: Any = None) -> int:
    """Words across the system prompt and all messages, plus a fixed overhead per message."""
    total = word_count(content_text(system))
    for message in messages:
        if isinstance(message, dict):
            total += word_count(content_text(message.get("content"))) + TOKENS_PER_MESSAGE
    return total


def last_user_text(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def awaits_answer_to_user(messages: Sequence[Any]) -> bool:
    """True when the conversation ends on a plain user turn (not a tool result being handed back)."""
    if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "user":
        return False
    content = messages[-1].get("content")
    if not isinstance(content, list):
        return True
    return not any(isinstance(part, dict) and part.get("type") == "tool_result" for part in content)


def text_inputs(value: Any) -> list[tuple[str, int]] | None:
    """Each input's text and token count for a string, strings, a token array or token arrays.

    None when `value` is none of those, so the route can answer 400 naming its own parameter.
    """

    def is_tokens(item: Any) -> bool:
        return (
            isinstance(item, list)
            and bool(item)
            and all(isinstance(t, int) and not isinstance(t, bool) for t in item)
        )

    if isinstance(value, str):
        return [(value, word_count(value))]
    if is_tokens(value):
        return [(" ".join(map(str, value)), len(value))]
    if isinstance(value, list) and value and all(isinstance(v, str) or is_tokens(v) for v in value):
        return [pair for item in value for pair in text_inputs(item) or ()]
    return None


def stop_list(stop: Any) -> list[str]:
    """OpenAI `stop` / Anthropic `stop_sequences`: a string or a list of strings."""
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list):
        return [s for s in stop if isinstance(s, str) and s]
    return []


@dataclass(frozen=True, slots=True)
class Reply:
    """The reply text and why it ended: naturally, at the token limit, or at a stop sequence."""

    text: str
    finish: Literal["end", "length", "stop"]
    stop_sequence: str | None = None

    @property
    def pieces(self) -> list[str]:
        return split_pieces(self.text)

    @property
    def tokens(self) -> int:
        return word_count(self.text)


def echo_reply(prompt: str, *, max_tokens: int | None = None, stops: Sequence[str] = ()) -> Reply:
    """`"echo: " + prompt`, cut before the earliest stop sequence, then to `max_tokens` words."""
    text = "echo: " + prompt
    finish: Literal["end", "length", "stop"] = "end"
    matched: str | None = None
    hits = [(text.find(s), s) for s in stops if s and s in text]
    if hits:
        cut, matched = min(hits)
        text, finish = text[:cut], "stop"
    if max_tokens is not None and word_count(text) > max_tokens:
        text = "".join(split_pieces(text)[:max_tokens])
        finish, matched = "length", None
    return Reply(text, finish, matched)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the fake model decided to make."""

    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return orjson.dumps(self.arguments).decode()

    @property
    def tokens(self) -> int:
        return word_count(self.arguments_json) + 1

    def argument_fragments(self, size: int = 6) -> list[str]:
        """The JSON arguments cut into small pieces, as real streams deliver them."""
        text = self.arguments_json
        return [text[i : i + size] for i in range(0, len(text), size)]


def plan_tool_calls(tool_names: Sequence[str], user_text: str, id_prefix: str) -> list[ToolCall]:
    """Call the first tool for "weather" prompts: once, or twice when the prompt says "parallel"."""
    lowered = user_text.lower()
    if not tool_names or "weather" not in lowered:
        return []
    count = 2 if "parallel" in lowered else 1
    return [ToolCall(new_id(id_prefix), tool_names[0], {"city": city}) for city in WEATHER_CITIES[:count]]


def embedding_vector(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """A unit vector derived from a hash of `text`, exactly representable as float32."""
    raw: list[float] = []
    block = 0
    while len(raw) < dimensions:
        digest = hashlib.sha256(f"{block}:{text}".encode()).digest()
        raw.extend((b - 127.5) / 127.5 for b in digest)
        block += 1
    raw = raw[:dimensions]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    # Round-trip through float32 so the float and base64 encodings carry the same numbers.
    return list(struct.unpack(f"<{dimensions}f", struct.pack(f"<{dimensions}f", *(v / norm for v in raw))))
