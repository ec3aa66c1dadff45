"""Follow-ups reach the row that created an object, and never another organization's object.

POST /v1/responses with `previous_response_id`, GET/DELETE /v1/responses/{id} and GET/DELETE
/v1/videos/{id} (and its /content) are routed to the row bound to that id; an unknown or foreign id is 404
without a code (the spec's unknown task identifier), or 400 for previous_response_id. New stored response
ids and video ids are bound as soon as they appear in the upstream answer: whatever their shape, as long as
`proxy.state.objects.is_object_id` accepts them (an id it refuses is logged and left unbound). A translated
answer's id is never bound: the row that made it stores nothing to come back to.

A binding also remembers the context its response carried (the input + output tokens the provider reported
for it), and a `conversation` the context of the last response made in it: a follow-up re-reads that
context, which its body does not show, so its reservation counts it (`AdmissionState.carried_input_tokens`;
the model's context window when it is not known).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from functools import partial

import orjson

from modelgate.domain.errors import InvalidRequest, UnknownTask
from modelgate.proxy.pipeline.chain import Plugin, StreamStep
from modelgate.proxy.pipeline.context import PhaseError, RequestContext
from modelgate.proxy.state.objects import MAX_OBJECT_ID_BYTES, ObjectBinding, ObjectStore, is_object_id
from modelgate.proxy.translation.answer_fields import answer_field, event_documents, string_field
from modelgate.proxy.upstream.model_rows import ModelCatalog

log = logging.getLogger("modelgate.objects")

_ID = string_field("id")
# Route kind -> the kind its objects are bound as; route name -> the object kind of its creations.
_OBJECT_KINDS: dict[str | None, str] = {"responses": "response", "videos": "video"}
_NOUNS = {"response": "Response", "video": "Video"}
# A stream names its object in its first event; past this many bytes it is not looked for any more.
_SCAN_LIMIT = 64 * 1024


class ObjectBindingPlugin(Plugin):
    """Binds stored response ids and video ids to their row and organization."""

    name = "object_binding"
    requires = frozenset(
        {
            "admission",
            "answer",
            "answered_status",
            "bytes_sent",
            "key",
            "metering",
            "object_id",
            "outcome",
            "payload",
            "route",
            "row",
            "status",
        }
    )
    provides = frozenset({"admission", "bound_object", "model", "rows", "scan_tail"})
    essential = True

    def __init__(self, store: ObjectStore, catalog: ModelCatalog) -> None:
        self._store = store
        self._catalog = catalog

    def on_request(self, ctx: RequestContext) -> Awaitable[None] | None:
        # A plain function: most routes bind nothing, and their requests pass without a coroutine.
        kind = _OBJECT_KINDS.get(ctx.matched_route.kind)
        if kind is None:
            return None
        return self._bind(ctx, kind)

    async def _bind(self, ctx: RequestContext, kind: str) -> None:
        route = ctx.matched_route
        if route.has_id:
            if not is_object_id(ctx.object_id):  # no such id was ever bound: no lookup either
                raise UnknownTask(f"{_NOUNS[kind]} not found.")
            binding = await self._store.find(ctx.object_id, ctx.api_key.organization_id, kind)
            row = self._catalog.rows_by_key.get(binding.row_key) if binding else None
            if binding is None or row is None:
                raise UnknownTask(f"{_NOUNS[kind]} with id '{ctx.object_id}' not found.")
            ctx.model = self._catalog.get(binding.model)
            ctx.rows = [row]
            return
        if kind != "response":
            return
        payload = ctx.json_payload
        previous = payload.get("previous_response_id")
        if previous is not None:
            binding = await self._store.find(previous, ctx.api_key.organization_id, "response")
            if binding is None:
                raise InvalidRequest(f"Previous response with id '{previous}' not found.")
            ctx.rows = [r for r in ctx.rows if r.key == binding.row_key]
            if not ctx.rows:
                raise InvalidRequest(
                    f"Previous response '{previous}' was made by a row this request cannot use."
                )
            ctx.admission.carried_input_tokens = self._carried(ctx, binding)
        conversation = _conversation_id(payload)
        if conversation is not None:
            binding = await self._store.find(conversation, ctx.api_key.organization_id, "conversation")
            ctx.admission.carried_input_tokens = self._carried(ctx, binding)

    @staticmethod
    def _carried(ctx: RequestContext, binding: ObjectBinding | None) -> int:
        """The context a follow-up re-reads: what its response reported, else the model's whole window."""
        context = ctx.model.config.max_context_tokens if ctx.model is not None else 0
        if binding is None or binding.context_tokens is None:
            return context
        return binding.context_tokens if binding.context_tokens < context else context

    def stream_step(self, ctx: RequestContext) -> StreamStep | None:
        if ctx.matched_route.creates is None:  # most routes create nothing: never called for their streams
            return None
        return partial(self.on_chunk, ctx)

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        route = ctx.route  # ctx.matched_route, inline: this runs for every piece of a stream
        if route is None:
            raise PhaseError("route", "route_support")
        if route.creates is not None:  # most routes create nothing: no further call
            self._bind_created(ctx, route.creates, chunk)
        return chunk  # read, never changed

    def _bind_created(self, ctx: RequestContext, kind: str, chunk: bytes) -> None:
        if ctx.status != 200 or ctx.bound_object is not None:
            return
        if ctx.bytes_sent > _SCAN_LIMIT or ctx.json_payload.get("store") is False:
            return
        if ctx.answer is not None and ctx.answer.translator is not None:
            return  # a translated answer (Responses on a Messages or chat row) is stored nowhere upstream
        token = _created_id(ctx, chunk)
        if token is None:
            return
        try:
            object_id = orjson.loads(token)
        except orjson.JSONDecodeError:
            object_id = None
        if not is_object_id(object_id):
            ctx.bound_object = ""  # seen, and not bindable
            log.warning(
                "row %s created a %s whose id cannot be bound (over %d bytes, or characters a URL path "
                "segment cannot carry as they are): %.80r",
                ctx.served_row.key,
                kind,
                MAX_OBJECT_ID_BYTES,
                token,
                extra={"request_id": ctx.request_id},
            )
            return
        ctx.bound_object = object_id
        self._store.remember(
            ObjectBinding(
                object_id, ctx.api_key.organization_id, kind, ctx.routed_model.name, ctx.served_row.key
            )
        )

    def on_complete(self, ctx: RequestContext) -> Awaitable[None] | None:
        route = ctx.route
        if route is None:
            return None
        if route.deletes and ctx.status == 200 and ctx.object_id is not None:
            return self._store.forget(ctx.object_id)
        if route.creates == "response" and ctx.answered_status == 200:
            self._remember_context(ctx)
        return None

    def _remember_context(self, ctx: RequestContext) -> None:
        """The context a created response carried, as the provider reported it (none reported: unknown)."""
        usage = ctx.metering.usage
        if usage is None or usage.estimated or ctx.outcome != "completed":
            return
        tokens = usage.input_tokens + usage.output_tokens
        if ctx.bound_object:
            self._store.remember_context(ctx.bound_object, tokens)
        conversation = _conversation_id(ctx.payload)
        if conversation is not None and ctx.row is not None:
            self._store.remember_conversation(
                ObjectBinding(
                    conversation,
                    ctx.api_key.organization_id,
                    "conversation",
                    ctx.routed_model.name,
                    ctx.row.key,
                    tokens,
                )
            )


def _conversation_id(payload: dict | None) -> str | None:
    """The conversation a Responses request is made in (an id, or `{"id": ...}`), when it names one."""
    if payload is None:
        return None
    conversation = payload.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return conversation if is_object_id(conversation) else None


def _created_id(ctx: RequestContext, chunk: bytes) -> bytes | None:
    """The JSON string token of the created object's id: the answer's own `id` of a JSON answer, or of the
    first SSE event that names one. What came before without it is kept in `ctx.scan_tail`, so an id split
    across chunks is found once its rest arrives (a stream is looked at in complete lines)."""
    data = ctx.scan_tail + chunk if ctx.scan_tail else chunk
    if data.lstrip()[:1] == b"{":  # a JSON answer, whole or its first chunks
        match = answer_field(data, _ID)
        ctx.scan_tail = b"" if match or len(data) > _SCAN_LIMIT else data
        return match.group(1) if match else None
    end = data.rfind(b"\n") + 1
    ctx.scan_tail = data[end:] if len(data) - end <= _SCAN_LIMIT else b""
    for start, stop in event_documents(data[:end]):
        match = answer_field(data, _ID, start, stop)
        if match is not None:
            ctx.scan_tail = b""
            return match.group(1)
    return None
