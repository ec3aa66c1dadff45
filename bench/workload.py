"""The benchmark's workload: one ~1 KB chat request, as a JSON body and as raw HTTP/1.1 bytes."""

from __future__ import annotations

import orjson

MODEL = "bench-model"
CHAT_PATH = "/v1/chat/completions"
BODY_SIZE = 1024

_SYSTEM = "You are a concise assistant that answers questions about the weather in one sentence."


def chat_body(*, stream: bool = False, size: int = BODY_SIZE) -> bytes:
    """A chat completion request padded with user text to about `size` bytes."""
    payload = {
        "model": MODEL,
        "messages": [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": ""}],
        "max_tokens": 64,
        "temperature": 0.2,
        "stream": stream,
    }
    filler = max(0, size - len(orjson.dumps(payload)))
    payload["messages"][1]["content"] = ("What is the weather like today in Lisbon? " * 40)[:filler]
    return orjson.dumps(payload)


def raw_request(host: str, port: int, body: bytes, api_key: str) -> bytes:
    """The complete HTTP/1.1 keep-alive request a client sends for `body`."""
    head = (
        f"POST {CHAT_PATH} HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Content-Type: application/json\r\n"
        f"Authorization: Bearer {api_key}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body


EMBEDDINGS_PATH = "/v1/embeddings"


def embeddings_body() -> bytes:
    """A small embeddings request (the soak's third kind of traffic)."""
    return orjson.dumps({"model": MODEL, "input": "What is the weather like today in Lisbon?"})
