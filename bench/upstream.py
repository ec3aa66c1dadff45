"""A minimal, fast OpenAI-style fake upstream: a raw asyncio protocol on uvloop, zero delay.

Serves `POST /v1/chat/completions` with a fixed small JSON answer (with usage), or, when the body asks for
`"stream": true`, 11 SSE events (a role chunk, seven content chunks, a finish chunk, a usage chunk and
`[DONE]`), and `POST /v1/embeddings` with one small vector and usage. It parses only what it must, so the
upstream is never what limits the benchmark. Run: `python bench/upstream.py --port P [--cpu 1]`.

Like an LLM (the long-stream case, bench/long_streams.py): `--ttfb-ms T --chunk-delay-ms D --chunks N` make a
stream start after T ms and send N content events D ms apart (then the finish, usage and [DONE] events).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class Pacing:
    """A model-like stream: the first event after `ttfb` seconds, `chunks` content events `delay` apart."""

    ttfb: float
    delay: float
    chunks: int

    def events(self) -> list[bytes]:
        """The stream's chunked-encoded events: a role event, `chunks` content events, finish, usage, end."""
        content = STREAM_CHUNKS[1]
        return [STREAM_CHUNKS[0], *([content] * self.chunks), *STREAM_CHUNKS[-4:]]


class _PacedStream:
    """One paced answer: each event written by a timer, none after the connection is gone."""

    __slots__ = ("_events", "_index", "_loop", "_pacing", "_protocol")

    def __init__(self, protocol: ChatProtocol, pacing: Pacing, events: list[bytes]) -> None:
        self._protocol, self._pacing, self._events, self._index = protocol, pacing, events, 0
        self._loop = asyncio.get_running_loop()
        self._loop.call_later(pacing.ttfb, self._first)

    def _first(self) -> None:
        transport = self._protocol.transport
        if transport is not None:
            transport.write(STREAM_HEAD)
            self._next()

    def _next(self) -> None:
        transport = self._protocol.transport
        if transport is None:
            return
        events = self._events
        transport.write(events[self._index])
        self._index += 1
        if self._index == len(events) - 4:  # the last content event is out: the tail goes at once
            transport.writelines(events[self._index :])
            self._protocol.paced_done()
        else:
            self._loop.call_later(self._pacing.delay, self._next)


class ChatProtocol(asyncio.Protocol):
    """One keep-alive connection: answers each complete request as soon as it has been received."""

    pacing: Pacing | None = None  # set by serve() for paced streams
    paced_events: list[bytes] = []

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._pending: list[tuple[bytes, bytes]] = []  # requests behind a paced answer (pipelined)
        self._pacing_now = False

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._transport

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
            if self._pacing_now:
                self._pending.append((head, body))
            else:
                self._answer(head, body)

    def paced_done(self) -> None:
        self._pacing_now = False
        while self._pending and not self._pacing_now and self._transport is not None:
            self._answer(*self._pending.pop(0))

    def _answer(self, head: bytes, body: bytes) -> None:
        transport = self._transport
        assert transport is not None
        if head.startswith(_EMBEDDINGS_ROUTE):
            transport.write(EMBEDDINGS_RESPONSE)
        elif not head.startswith(_ROUTE):
            transport.write(NOT_FOUND_RESPONSE)
        elif _STREAM_FLAG.search(body) and self.pacing is not None:
            self._pacing_now = True
            _PacedStream(self, self.pacing, self.paced_events)
            return
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


async def serve(host: str, port: int, max_seconds: float, pacing: Pacing | None = None) -> None:
    """Serve until SIGTERM/SIGINT or until `max_seconds` have passed."""
    loop = asyncio.get_running_loop()
    if pacing is not None:
        ChatProtocol.pacing, ChatProtocol.paced_events = pacing, pacing.events()
    server = await loop.create_server(ChatProtocol, host, port, backlog=4096, reuse_address=True)
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
    parser.add_argument("--ttfb-ms", type=float, help="paced streams: first event after this long")
    parser.add_argument("--chunk-delay-ms", type=float, default=50.0, help="paced streams: between events")
    parser.add_argument("--chunks", type=int, default=40, help="paced streams: content events")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    pacing = None
    if args.ttfb_ms is not None:
        pacing = Pacing(args.ttfb_ms / 1000, args.chunk_delay_ms / 1000, args.chunks)
    main = serve(args.host, args.port, args.max_seconds, pacing)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


if __name__ == "__main__":
    main()
