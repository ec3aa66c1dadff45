"""`GET /v1/models` and `GET /v1/models/{id}` in the shape of whichever vendor the client speaks."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .context import CONTEXT, vendor_of
from .envelopes import UpstreamError, Vendor, json_response

# A fixed timestamp keeps the listing byte-for-byte stable between runs.
CREATED = 1_700_000_000
CREATED_ISO = "2023-11-14T22:13:20Z"


def _entry(vendor: Vendor, model_id: str, owner: str) -> dict[str, Any]:
    if vendor is Vendor.ANTHROPIC:
        return {"type": "model", "id": model_id, "display_name": model_id, "created_at": CREATED_ISO}
    return {"id": model_id, "object": "model", "created": CREATED, "owned_by": owner}


async def list_models(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    vendor = vendor_of(request)
    data = [_entry(vendor, model_id, ctx.name) for model_id in ctx.models]
    if vendor is Vendor.ANTHROPIC:
        return json_response(
            {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )
    return json_response({"object": "list", "data": data})


async def retrieve_model(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    model_id = request.match_info["model_id"]
    if model_id not in ctx.models:
        message = f"The model '{model_id}' does not exist"
        raise UpstreamError(404, message, param="model", code="model_not_found")
    return json_response(_entry(vendor_of(request), model_id, ctx.name))
