"""Follow-ups reach the row that created an object, and never another organization's object.

POST /v1/responses with `previous_response_id`, GET/DELETE /v1/responses/{id} and GET/DELETE
/v1/videos/{id} (and its /content) are routed to the row bound to that id; an unknown or foreign id is 404
without a code (the spec's unknown task identifier), or 400 for previous_response_id. New stored response
ids and video ids are bound as soon as they appear in the upstream answer.
"""

from __future__ import annotations

import re

from plugins.base import Plugin
from proxy.context import RequestContext
from proxy.errors import InvalidRequest, UnknownTask
from proxy.objects import ObjectBinding, ObjectStore
from proxy.routing import ModelCatalog

_RESPONSE_ID_IN_BODY = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]+)"')
_VIDEO_ID_IN_BODY = re.compile(rb'"id"\s*:\s*"(video_[A-Za-z0-9_-]+)"')
# Route kind -> the kind its objects are bound as; route name -> (object kind, id pattern) of creations.
_OBJECT_KINDS = {"responses": "response", "videos": "video"}
_CREATIONS = {"responses": ("response", _RESPONSE_ID_IN_BODY), "videos_create": ("video", _VIDEO_ID_IN_BODY)}
_DELETIONS = frozenset({"responses_delete", "videos_delete"})
_NOUNS = {"response": "Response", "video": "Video"}
_SCAN_LIMIT = 64 * 1024
_TAIL = 256  # longer than any `"id": "resp_…"` we bind


class ObjectBindingPlugin(Plugin):
    """Binds stored response ids and video ids to their row and organization."""

    name = "object_binding"
    essential = True

    def __init__(self, store: ObjectStore, catalog: ModelCatalog) -> None:
        self._store = store
        self._catalog = catalog

    async def on_request(self, ctx: RequestContext) -> None:
        route = ctx.route
        kind = _OBJECT_KINDS.get(route.kind)
        if kind is None:
            return
        if route.has_id:
            binding = await self._store.find(ctx.object_id, ctx.key.organization_id, kind)
            row = self._catalog.rows_by_key.get(binding.row_key) if binding else None
            if row is None:
                raise UnknownTask(f"{_NOUNS[kind]} with id '{ctx.object_id}' not found.")
            ctx.model = self._catalog.get(binding.model)
            ctx.rows = [row]
            return
        if kind != "response":
            return
        previous = ctx.payload.get("previous_response_id")
        if previous is not None:
            binding = await self._store.find(previous, ctx.key.organization_id, "response")
            if binding is None:
                raise InvalidRequest(f"Previous response with id '{previous}' not found.")
            ctx.rows = [r for r in ctx.rows if r.key == binding.row_key]
            if not ctx.rows:
                raise InvalidRequest(
                    f"Previous response '{previous}' was made by a row this request cannot use."
                )

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> None:
        creation = _CREATIONS.get(ctx.route.name)
        if creation is None or ctx.status != 200 or ctx.bytes_sent > _SCAN_LIMIT:
            return
        if ctx.bound_object is not None or ctx.payload.get("store") is False:
            return
        kind, pattern = creation
        # The id may straddle two chunks: search the previous chunk's tail together with this one.
        data = ctx.scan_tail + chunk if ctx.scan_tail else chunk
        match = pattern.search(data)
        ctx.scan_tail = data[-_TAIL:]
        if match:
            object_id = match.group(1).decode()
            ctx.bound_object = object_id
            self._store.remember(
                ObjectBinding(object_id, ctx.key.organization_id, kind, ctx.model.name, ctx.row.key)
            )

    async def on_complete(self, ctx: RequestContext) -> None:
        if ctx.route is not None and ctx.route.name in _DELETIONS and ctx.status == 200:
            await self._store.forget(ctx.object_id)
