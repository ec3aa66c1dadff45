"""A minimal, fast OpenAI-style fake upstream: a raw asyncio protocol on uvloop, zero delay.

Serves `POST /v1/chat/completions` with a fixed small JSON answer (with usage), or, when the body asks for
`"stream": true`, 11 SSE events (a role chunk, seven content chunks, a finish chunk, a usage chunk and
`[DONE]`), and `POST /v1/embeddings` with one small vector and usage. It parses only what it must, so the
upstream is never what limits the benchmark. Run: `python bench/upstream.py --port P [--cpu 1]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal

import orjson

_STREAM_FLAG = re.compile(rb'"stream"\s*:\s*true')
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close", re.IGNORECASE)
_ROUTE = b"POST /v1/chat/completions "
_EMBEDDINGS_ROUTE = b"POST /v1/embeddings "

_USAGE = {"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51}
_ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "It is sunny and 21 degrees in Lisbon."},
                "finish_reason": "stop",
            }
        ],
        "usage": _USAGE,
    }
)
NON_STREAM_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(_ANSWER)
) + _ANSWER
_EMBEDDING = orjson.dumps(
    {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.0125, -0.25, 0.5, 0.75] * 16}],
        "model": "bench-model",
        "usage": {"prompt_tokens": 42, "total_tokens": 42},
    }
)
EMBEDDINGS_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(_EMBEDDING)
) + _EMBEDDING
NOT_FOUND_RESPONSE = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def _chunk(choices: list, usage: dict | None = None) -> dict:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "bench-model",
        "choices": choices,
        "usage": usage,
    }


def _sse_chunks() -> list[bytes]:
    events = [_chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    for word in ("It ", "is ", "sunny ", "and ", "21 ", "degrees ", "in Lisbon."):
        events.append(_chunk([{"index": 0, "delta": {"content": word}, "finish_reason": None}]))
    events.append(_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    events.append(_chunk([], _USAGE))
    payloads = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in payloads] + [b"0\r\n\r\n"]


STREAM_CHUNKS = _sse_chunks()


class ChatProtocol(asyncio.Protocol):
    """One keep-alive connection: answers each complete request as soon as it has been received."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while self._transport is not None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buffer[:end])
            match = _CONTENT_LENGTH.search(head)
            total = end + 4 + (int(match.group(1)) if match else 0)
            if len(self._buffer) < total:
                return
            body = bytes(self._buffer[end + 4 : total])
            del self._buffer[:total]
            self._answer(head, body)

    def _answer(self, head: bytes, body: bytes) -> None:
        transport = self._transport
        assert transport is not None
        if head.startswith(_EMBEDDINGS_ROUTE):
            transport.write(EMBEDDINGS_RESPONSE)
        elif not head.startswith(_ROUTE):
            transport.write(NOT_FOUND_RESPONSE)
        elif _STREAM_FLAG.search(body):
            # Separate writes, so the head and each event leave as their own segments like a real stream.
            transport.write(STREAM_HEAD)
            for chunk in STREAM_CHUNKS:
                transport.write(chunk)
        else:
            transport.write(NON_STREAM_RESPONSE)
        if _CLOSE.search(head):
            transport.close()
            self._transport = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


async def serve(host: str, port: int, max_seconds: float) -> None:
    """Serve until SIGTERM/SIGINT or until `max_seconds` have passed."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(ChatProtocol, host, port, backlog=1024, reuse_address=True)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.call_later(max_seconds, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="fast fake OpenAI upstream for benchmarks")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cpu", type=int, help="pin the process to this core")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="exit by itself after this long")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.host, args.port, args.max_seconds))
    else:
        uvloop.run(serve(args.host, args.port, args.max_seconds))


if __name__ == "__main__":
    main()
