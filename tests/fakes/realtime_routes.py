"""The fake's realtime WebSocket at /v1/realtime?model=…, behind the same credential check as every route.

Text events are echoed as `{"type": "echo", "event": …}`, binary frames are echoed as they are;
`response.create` is answered with a `response.done` carrying usage, `session.update` with
`session.updated`, and `{"type": "fake.close", "code": N}` makes the fake close the socket with code N.
A test can hold every handshake at a gate (`realtime.hold_gate`) to keep a connect "being established".
"""

from __future__ import annotations

import secrets

import orjson
from aiohttp import WSMsgType, web

from .context import CONTEXT
from .media_records import RealtimeSession

USAGE = {
    "total_tokens": 30,
    "input_tokens": 10,
    "output_tokens": 20,
    "input_token_details": {"cached_tokens": 4, "text_tokens": 10, "audio_tokens": 0},
    "output_token_details": {"text_tokens": 20, "audio_tokens": 0},
}


def _answer(event: dict) -> dict | None:
    """The fake's reply to one client event (None: no reply)."""
    kind = event.get("type")
    if kind == "response.create":
        response_id = "resp_" + secrets.token_hex(8)
        return {
            "type": "response.done",
            "event_id": "event_" + secrets.token_hex(8),
            "response": {
                "id": response_id,
                "object": "realtime.response",
                "status": "completed",
                "usage": USAGE,
            },
        }
    if kind == "session.update":
        return {"type": "session.updated", "session": event.get("session")}
    return {"type": "echo", "event": event}


async def realtime(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    log = ctx.realtime
    gate = log.hold_gate
    if gate is not None and not await ctx.unless_stopping(ctx.gates.wait(gate)):
        return web.Response(status=503)
    ws = web.WebSocketResponse(max_msg_size=16 * 1024 * 1024)
    await ws.prepare(request)
    session = RealtimeSession(request.query.get("model"), request.headers.get("authorization"))
    log.opened(session)
    closed_by = "client"
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
            if event.get("type") == "fake.close":
                closed_by = "fake"
                await ws.close(code=int(event.get("code", 1000)), message=b"closed by the fake")
                break
            reply = _answer(event)
            if reply is not None:
                await ws.send_str(orjson.dumps(reply).decode())
    finally:
        session.close_code = ws.close_code
        session.closed_by = closed_by
        log.changed()
    return ws


ROUTES = [web.get("/v1/realtime", realtime)]
