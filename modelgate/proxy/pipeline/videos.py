"""GET /v1/videos: the organization's videos, from the gateway's own bindings rather than any provider.

Each video id was bound to its organization and routing row when it was created
(modelgate/plugins/object_binding.py), so the list needs no upstream call and shows only this organization's
videos, whichever provider made them. Items carry what the gateway knows (`id`, `object`, `model`,
`created_at`); `GET /v1/videos/{id}` asks the provider for the rest (status, progress, size). Paging is
OpenAI's: `limit` (1 to 100, default 20), `order` (`desc` by default, or `asc`) and `after` (an id of the
previous page).
"""

from __future__ import annotations

import orjson
from aiohttp import web

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.state.objects import ObjectStore

_MAX_LIMIT = 100


def _limit(raw: str | None) -> int:
    if raw is None:
        return 20
    # isascii: str.isdigit() accepts digits int() refuses; the length bound keeps int() cheap.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 3) or not 1 <= int(raw) <= _MAX_LIMIT:
        raise InvalidRequest(f"Invalid 'limit': expected an integer from 1 to {_MAX_LIMIT}.")
    return int(raw)


class VideoList:
    """Answers GET /v1/videos locally."""

    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    async def handle(self, ctx: RequestContext) -> web.Response:
        query = ctx.request.query
        limit = _limit(query.get("limit"))
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidRequest("Invalid 'order': expected 'asc' or 'desc'.")
        after = query.get("after") or None
        page = await self._objects.listed(
            ctx.api_key.organization_id, "video", limit=limit + 1, newest_first=order == "desc", after=after
        )
        data = [
            {"id": binding.id, "object": "video", "model": binding.model, "created_at": int(created_at)}
            for binding, created_at in page[:limit]
        ]
        body = {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(page) > limit,
        }
        ctx.status = 200
        return web.Response(
            body=orjson.dumps(body),
            content_type="application/json",
            headers={"x-request-id": ctx.request_id},
        )
