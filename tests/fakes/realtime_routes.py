"""The fake's realtime WebSocket at /v1/realtime?model=…, behind the same credential check as every route.

Text events are echoed as `{"type": "echo", "event": …}`, binary frames are echoed as they are;
`response.create` is answered with a `response.done` carrying usage, `session.update` with
`session.updated`, and `{"type": "fake.close", "code": N}` makes the fake close the socket with code N;
with server VAD on, `{"type": "fake.speech_stopped"}` makes the fake commit the buffer and start a response;
after `{"type": "fake.hold_cancels", "gate": NAME}` the fake answers each `response.cancel` of that session
only once the test releases gate NAME (a test learns the gateway has cancelled, and decides when usage comes).
A test can hold every handshake at a gate (`realtime.hold_gate`) to keep a connect "being established",
and switch on `response.created` announcements, held responses and server VAD (see RealtimeLog).
"""

from __future__ import annotations

import secrets

import orjson
from aiohttp import WSMsgType, web

from .context import CONTEXT
from .media_records import RealtimeLog, RealtimeSession

USAGE = {
    "total_tokens": 30,
    "input_tokens": 10,
    "output_tokens": 20,
    "input_token_details": {"cached_tokens": 4, "text_tokens": 10, "audio_tokens": 0},
    "output_token_details": {"text_tokens": 20, "audio_tokens": 0},
}


# What a held response reports when the client cancels it: part of its output was generated.
PARTIAL_USAGE = {
    "total_tokens": 15,
    "input_tokens": 10,
    "output_tokens": 5,
    "input_token_details": {"cached_tokens": 0, "text_tokens": 2, "audio_tokens": 8},
    "output_token_details": {"text_tokens": 1, "audio_tokens": 4},
}


def _event_id() -> str:
    return "event_" + secrets.token_hex(8)


def _response(response_id: str, status: str, usage: dict | None) -> dict:
    return {"id": response_id, "object": "realtime.response", "status": status, "usage": usage}


def _done(response_id: str, status: str = "completed", usage: dict | None = USAGE) -> dict:
    return {
        "type": "response.done",
        "event_id": _event_id(),
        "response": _response(response_id, status, usage),
    }


def _start_response(log: RealtimeLog, session: RealtimeSession) -> list[dict]:
    """The events of one model response: done at once, or started and held until cancelled."""
    response_id = "resp_" + secrets.token_hex(8)
    created = {
        "type": "response.created",
        "event_id": _event_id(),
        "response": _response(response_id, "in_progress", None),
    }
    if log.hold_responses:
        session.held.append(response_id)
        delta = {"type": "response.output_audio.delta", "response_id": response_id, "delta": "AAAA"}
        return [created, delta]
    done = _done(response_id, usage=USAGE if log.usage is None else log.usage)
    return [created, done] if log.announce_responses else [done]


def _cancel(session: RealtimeSession, event: dict) -> list[dict]:
    """A held response (the one named, or every one) finishes as cancelled with part of its usage."""
    named = event.get("response_id")
    cancelled = [r for r in session.held if named in (None, r)]
    session.held = [r for r in session.held if r not in cancelled]
    return [_done(r, "cancelled", PARTIAL_USAGE) for r in cancelled]


def _error(event: dict, code: str, message: str) -> dict:
    """An `error` event refusing the client's `event`."""
    error = {
        "type": "invalid_request_error",
        "code": code,
        "message": message,
        "param": None,
        "event_id": event.get("event_id"),
    }
    return {"type": "error", "event_id": _event_id(), "error": error}


def _answer(log: RealtimeLog, session: RealtimeSession, event: dict) -> list[dict]:
    """The fake's replies to one client event."""
    kind = event.get("type")
    if kind == "response.create" and log.reject_responses:
        busy = "Conversation already has an active response in progress."
        return [_error(event, "conversation_already_has_active_response", busy)]
    if kind == "response.create":
        return _start_response(log, session)
    if kind == "response.cancel":
        return _cancel(session, event)
    if kind == "input_audio_buffer.append" and isinstance(event.get("audio"), str):
        session.buffered += len(event["audio"])
    elif kind == "input_audio_buffer.clear":
        session.buffered = 0
    elif kind == "input_audio_buffer.commit":
        buffered, session.buffered = session.buffered, 0
        if not buffered and log.empty_commit_error:
            empty = "Error committing input audio buffer: the buffer is empty."
            return [_error(event, "input_audio_buffer_commit_empty", empty)]
    # Server VAD: the client's commit, or the end of speech the fake is told of, starts a response.
    if kind == "fake.speech_stopped":
        session.buffered = 0
    if kind in ("input_audio_buffer.commit", "fake.speech_stopped") and log.server_vad:
        return [
            {"type": "input_audio_buffer.committed", "event_id": _event_id()},
            *_start_response(log, session),
        ]
    if kind == "session.update":
        return [{"type": "session.updated", "session": event.get("session")}]
    return [{"type": "echo", "event": event}]


async def realtime(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    log = ctx.realtime
    gate = log.hold_gate
    if gate is not None and not await ctx.unless_stopping(ctx.gates.wait(gate)):
        return web.Response(status=503)
    ws = web.WebSocketResponse(max_msg_size=16 * 1024 * 1024)
    # Recorded before the 101 goes out: once a client sees its upgrade, the session is already in the log.
    session = RealtimeSession(request.query.get("model"), request.headers.get("authorization"))
    log.opened(session)
    await ws.prepare(request)
    closed_by = "client"
    cancel_gate: str | None = None
    try:
        async for message in ws:
            if message.type is WSMsgType.BINARY:
                session.binary_frames += 1
                await ws.send_bytes(message.data)
                continue
            if message.type is not WSMsgType.TEXT:
                continue
            try:
                event = orjson.loads(message.data)
            except orjson.JSONDecodeError:
                event = {"type": "text", "text": message.data}
            session.events.append(event)
            log.changed()
            if event.get("type") == "fake.close":
                closed_by = "fake"
                await ws.close(code=int(event.get("code", 1000)), message=b"closed by the fake")
                break
            if event.get("type") == "fake.hold_reading":  # reads nothing more until the gate opens
                if not await ctx.unless_stopping(ctx.gates.wait(str(event.get("gate")))):
                    break
                continue
            if event.get("type") == "fake.hold_cancels":
                cancel_gate = str(event.get("gate"))
                continue
            if event.get("type") == "response.cancel" and cancel_gate is not None:
                if not await ctx.unless_stopping(ctx.gates.wait(cancel_gate)):
                    break
            for reply in _answer(log, session, event):
                await ws.send_str(orjson.dumps(reply).decode())
    finally:
        session.close_code = ws.close_code
        session.closed_by = closed_by
        log.changed()
    return ws


ROUTES = [web.get("/v1/realtime", realtime)]
