"""Server-sent events: frame encoding and playing a scripted stream under the request's fault."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from .context import CONTEXT, FakeContext, fault_of
from .faults import Fault

DONE_FRAME = b"data: [DONE]\n\n"
_NO_FAULT = Fault()


def data_frame(payload: Any) -> bytes:
    """An OpenAI chat/completions style frame: `data:` only."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def event_frame(event: str, payload: Any) -> bytes:
    """A named frame, as the Responses API and Anthropic send them."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


@dataclass(frozen=True, slots=True)
class SseScript:
    """A whole stream, split so a hold gate can keep `closing` (the final frames) back."""

    body: list[bytes]
    closing: list[bytes]


def drop_connection(request: web.Request) -> None:
    """End the TCP connection without finishing the HTTP response (already-written bytes still flush)."""
    if request.transport is not None:
        request.transport.close()


async def _pace(ctx: FakeContext, fault: Fault, index: int, gate_at: int) -> bool:
    """Wait as the fault asks before frame `index`; False if the server began stopping meanwhile."""
    gate = fault.hold_before_last_chunk
    if index == gate_at and gate is not None and not await ctx.unless_stopping(ctx.gates.wait(gate)):
        return False
    if index and fault.chunk_delay:
        return await ctx.unless_stopping(asyncio.sleep(fault.chunk_delay))
    return True


async def play(request: web.Request, script: SseScript) -> web.StreamResponse:
    """Send `script` as text/event-stream, applying the stream fields of the request's fault."""
    ctx = request.app[CONTEXT]
    fault = fault_of(request) or _NO_FAULT
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    )
    ctx.stats.stream_started()
    try:
        await response.prepare(request)
        frames = [*script.body, *script.closing]
        for index, frame in enumerate(frames):
            if index == fault.disconnect_after_chunks:
                drop_connection(request)
                return response
            if not await _pace(ctx, fault, index, gate_at=len(script.body)):
                # The server is stopping: cut the stream instead of holding shutdown up.
                drop_connection(request)
                return response
            await response.write(frame)
        gate = fault.hold_after_last_chunk
        if gate is not None and not await ctx.unless_stopping(ctx.gates.wait(gate)):
            drop_connection(request)
            return response
        if fault.disconnect_after_chunks is not None:
            # Fewer frames than the fault allows: still cut before the chunked terminator.
            drop_connection(request)
    finally:
        ctx.stats.stream_ended()
    return response
