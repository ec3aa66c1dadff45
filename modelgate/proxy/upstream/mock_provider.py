"""The built-in deterministic `mock` provider: the embedded demo works with no network and no account.

It answers in the wire format of the route (OpenAI style, or Anthropic style on /v1/messages), echoes the
last user message, counts words as tokens, and streams one word per event.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson
from multidict import CIMultiDict

if TYPE_CHECKING:
    from modelgate.proxy.upstream.providers import StreamedBody

_JSON = CIMultiDict({"content-type": "application/json"})
_SSE = CIMultiDict({"content-type": "text/event-stream", "cache-control": "no-cache"})


class _Content:
    """The mock answer's body (an `AnswerBody`): its pieces, made in memory."""

    __slots__ = ("_chunks",)

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    def at_eof(self) -> bool:
        return False  # never says so: each piece goes out as it is read, the end with the generator's

    async def read(self, n: int = -1) -> bytes:
        body = b"".join(self._chunks)
        return body if n < 0 else body[:n]


class MockResponse:
    """The mock provider's answer (an `UpstreamResponse`, modelgate/proxy/upstream/providers.py)."""

    __slots__ = ("_body", "content", "credential", "headers", "status")

    def __init__(self, status: int, headers: CIMultiDict[str], chunks: list[bytes]) -> None:
        self.status = status
        self.headers = headers
        self.credential = ""  # no key
        self.content = _Content(chunks)
        self._body = b"".join(chunks)

    async def read(self, n: int = -1) -> bytes:
        return self._body if n < 0 else self._body[:n]

    def close(self) -> None:
        return None

    def release(self) -> None:
        return None


def _json(status: int, body: dict) -> MockResponse:
    return MockResponse(status, _JSON, [orjson.dumps(body)])


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _words(text: str) -> int:
    return len(text.split())


def _last_user_text(messages: Any) -> str:
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return _text_of(message.get("content"))
    return ""


def _prompt_tokens(messages: Any) -> int:
    if not isinstance(messages, list):
        return 0
    return sum(_words(_text_of(m.get("content"))) + 3 for m in messages if isinstance(m, dict))


def _reply(prompt: str, max_tokens: Any) -> tuple[list[str], bool]:
    words = ("echo: " + prompt).split()
    if isinstance(max_tokens, int) and 0 < max_tokens < len(words):
        return words[:max_tokens], True
    return words, False


def _sse(data: dict | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else orjson.dumps(data).decode()
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


class MockUpstream:
    """An in-process provider that answers every JSON model route deterministically."""

    kind = "mock"
    native_messages = True
    native_responses = True
    pool = None  # in process: no connections

    def __init__(self, name: str) -> None:
        self.name = name
        self.host = "mock"
        self._responses: dict[str, dict] = {}

    async def close(self) -> None:
        return None

    async def send(
        self, method: str, path: str, body: bytes | StreamedBody | None, request_id: str, client_headers: Any
    ) -> MockResponse:
        if body is not None and not isinstance(body, bytes):
            return _json(
                404, {"error": {"message": "mock provider takes no uploads", "type": "invalid_request_error"}}
            )
        payload = orjson.loads(body) if body else {}
        if path == "/v1/chat/completions":
            return self._chat(payload)
        if path == "/v1/completions":
            return self._completion(payload)
        if path == "/v1/embeddings":
            return self._embeddings(payload)
        if path == "/v1/responses":
            return self._create_response(payload)
        if path.startswith("/v1/responses/"):
            return self._stored_response(method, path.rsplit("/", 1)[1])
        if path == "/v1/messages":
            return self._messages(payload)
        if path == "/v1/messages/count_tokens":
            return _json(200, {"input_tokens": _prompt_tokens(payload.get("messages"))})
        if path == "/v1/decisions":
            return self._decision(payload)
        return _json(
            404,
            {"error": {"message": f"mock provider does not serve {path}", "type": "invalid_request_error"}},
        )

    def _chat(self, p: dict) -> MockResponse:
        model, messages = p.get("model"), p.get("messages")
        words, truncated = _reply(
            _last_user_text(messages), p.get("max_completion_tokens") or p.get("max_tokens")
        )
        finish = "length" if truncated else "stop"
        usage = {"prompt_tokens": _prompt_tokens(messages), "completion_tokens": len(words)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        cid, created = "chatcmpl-" + secrets.token_hex(12), int(time.time())
        if not p.get("stream"):
            message = {"role": "assistant", "content": " ".join(words)}
            return _json(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                },
            )
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
        chunks = [
            _sse(
                {
                    **base,
                    "choices": [
                        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    ],
                }
            )
        ]
        for i, word in enumerate(words):
            text = word if i == 0 else " " + word
            chunks.append(
                _sse({**base, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
            )
        chunks.append(_sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
        if (p.get("stream_options") or {}).get("include_usage"):
            chunks.append(_sse({**base, "choices": [], "usage": usage}))
        chunks.append(_sse("[DONE]"))
        return MockResponse(200, _SSE, chunks)

    def _completion(self, p: dict) -> MockResponse:
        prompt = p["prompt"] if isinstance(p.get("prompt"), str) else ""
        words, truncated = _reply(prompt, p.get("max_tokens"))
        usage = {"prompt_tokens": _words(prompt), "completion_tokens": len(words)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        base = {
            "id": "cmpl-" + secrets.token_hex(12),
            "object": "text_completion",
            "created": int(time.time()),
            "model": p.get("model"),
        }
        finish = "length" if truncated else "stop"
        if not p.get("stream"):
            choice = {"index": 0, "text": " ".join(words), "finish_reason": finish, "logprobs": None}
            return _json(200, {**base, "choices": [choice], "usage": usage})
        chunks = [
            _sse(
                {
                    **base,
                    "choices": [
                        {"index": 0, "text": (" " if i else "") + w, "finish_reason": None, "logprobs": None}
                    ],
                }
            )
            for i, w in enumerate(words)
        ]
        chunks.append(
            _sse({**base, "choices": [{"index": 0, "text": "", "finish_reason": finish, "logprobs": None}]})
        )
        if (p.get("stream_options") or {}).get("include_usage"):
            chunks.append(_sse({**base, "choices": [], "usage": usage}))
        chunks.append(_sse("[DONE]"))
        return MockResponse(200, _SSE, chunks)

    def _embeddings(self, p: dict) -> MockResponse:
        inputs = p.get("input")
        items = inputs if isinstance(inputs, list) else [inputs]
        dims = p["dimensions"] if isinstance(p.get("dimensions"), int) and p["dimensions"] > 0 else 8
        data, tokens = [], 0
        for index, item in enumerate(items):
            text = item if isinstance(item, str) else orjson.dumps(item).decode()
            tokens += max(_words(text), 1)
            digest = hashlib.sha256(text.encode()).digest()
            vector = [(digest[i % 32] - 128) / 128.0 for i in range(dims)]
            if p.get("encoding_format") == "base64":
                import base64

                vector = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        return _json(
            200,
            {
                "object": "list",
                "data": data,
                "model": p.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _create_response(self, p: dict) -> MockResponse:
        source = p.get("input")
        prompt = source if isinstance(source, str) else _last_user_text(source)
        words, truncated = _reply(prompt, p.get("max_output_tokens"))
        in_tokens = _words(prompt) + 3
        response = {
            "id": "resp_" + secrets.token_hex(16),
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if truncated else "completed",
            "model": p.get("model"),
            "output": [
                {
                    "type": "message",
                    "id": "msg_" + secrets.token_hex(8),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": " ".join(words), "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "previous_response_id": p.get("previous_response_id"),
            "usage": {
                "input_tokens": in_tokens,
                "output_tokens": len(words),
                "total_tokens": in_tokens + len(words),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        if p.get("store", True):
            self._responses[response["id"]] = response
        if not p.get("stream"):
            return _json(200, response)
        chunks = [
            _sse(
                {
                    "type": "response.created",
                    "response": {**response, "status": "in_progress"},
                    "sequence_number": 0,
                },
                "response.created",
            )
        ]
        for i, word in enumerate(words):
            chunks.append(
                _sse(
                    {
                        "type": "response.output_text.delta",
                        "output_index": 0,
                        "content_index": 0,
                        "item_id": response["output"][0]["id"],
                        "delta": (" " if i else "") + word,
                        "sequence_number": i + 1,
                    },
                    "response.output_text.delta",
                )
            )
        chunks.append(
            _sse(
                {"type": "response.completed", "response": response, "sequence_number": len(words) + 1},
                "response.completed",
            )
        )
        return MockResponse(200, _SSE, chunks)

    def _stored_response(self, method: str, response_id: str) -> MockResponse:
        if response_id not in self._responses:
            return _json(
                404,
                {"error": {"message": f"Response {response_id} not found", "type": "invalid_request_error"}},
            )
        if method == "DELETE":
            del self._responses[response_id]
            return _json(200, {"id": response_id, "object": "response.deleted", "deleted": True})
        return _json(200, self._responses[response_id])

    def _messages(self, p: dict) -> MockResponse:
        words, truncated = _reply(_last_user_text(p.get("messages")), p.get("max_tokens"))
        stop = "max_tokens" if truncated else "end_turn"
        usage = {
            "input_tokens": _prompt_tokens(p.get("messages")),
            "output_tokens": len(words),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": "msg_" + secrets.token_hex(12),
            "type": "message",
            "role": "assistant",
            "model": p.get("model"),
            "content": [{"type": "text", "text": " ".join(words)}],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not p.get("stream"):
            return _json(200, message)
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
        chunks = [
            _sse({"type": "message_start", "message": start}, "message_start"),
            _sse(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            ),
            _sse({"type": "ping"}, "ping"),
        ]
        for i, word in enumerate(words):
            chunks.append(
                _sse(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": (" " if i else "") + word},
                    },
                    "content_block_delta",
                )
            )
        chunks.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        chunks.append(
            _sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": len(words)},
                },
                "message_delta",
            )
        )
        chunks.append(_sse({"type": "message_stop"}, "message_stop"))
        return MockResponse(200, _SSE, chunks)

    def _decision(self, p: dict) -> MockResponse:
        answers = []
        for question in p.get("questions") or []:
            kind = question.get("type")
            options = question.get("options") or question.get("choices") or []
            value: Any = {"boolean": True, "predicate": True, "number": 1, "score": 1}.get(kind, "ok")
            if kind == "choice" and options:
                value = options[0]
            answers.append({"question_id": question.get("id"), "type": kind, "value": value})
        state = p.get("state", p.get("input"))
        in_tokens = _words(state if isinstance(state, str) else orjson.dumps(state).decode())
        return _json(
            200,
            {
                "id": "dec_" + secrets.token_hex(12),
                "object": "decision",
                "model": p.get("model"),
                "answers": answers,
                "usage": {
                    "input_tokens": in_tokens,
                    "output_tokens": len(answers),
                    "total_tokens": in_tokens + len(answers),
                },
            },
        )
