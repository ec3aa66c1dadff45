"""GET /v1/models and /v1/models/{id}, answered by the gateway itself.

OpenAI list shape by default; the Anthropic list shape (with its `limit` / `before_id` / `after_id`
paging, errors in envelope B) when the request carries the `anthropic-version` header.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from modelgate.domain.errors import InvalidRequest, ModelNotFound
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.envelopes import Envelope, stamp_request_id
from modelgate.proxy.upstream.model_rows import ModelCatalog

_CREATED = 1_700_000_000  # models have no creation date in the config; a fixed epoch keeps answers stable
_CREATED_ISO = "2023-11-14T22:13:20Z"


def _openai_model(name: str) -> dict:
    return {"id": name, "object": "model", "created": _CREATED, "owned_by": "modelgate"}


def _anthropic_model(name: str) -> dict:
    return {"type": "model", "id": name, "display_name": name, "created_at": _CREATED_ISO}


def _json(ctx: RequestContext, body: dict) -> web.Response:
    headers: dict[str, str] = {}
    stamp_request_id(headers, ctx.request_id, ctx.envelope)
    return web.Response(body=orjson.dumps(body), content_type="application/json", headers=headers)


def _visible(catalog: ModelCatalog, ctx: RequestContext) -> list[str]:
    """The models this key may use: all configured ones, less those its policy denies or does not enable."""
    policy = ctx.policy
    if policy is None or not policy.rules:
        return sorted(catalog.models)
    key = ctx.api_key
    visible = []
    for name in sorted(catalog.models):
        decision = policy.decide(key.id, key.system_id, name)
        if not decision.denied and not decision.not_enabled:
            visible.append(name)
    return visible


def list_models(catalog: ModelCatalog, ctx: RequestContext) -> web.Response:
    names = _visible(catalog, ctx)
    if ctx.envelope is not Envelope.B:
        return _json(ctx, {"object": "list", "data": [_openai_model(n) for n in names]})
    query = ctx.request.query
    unknown = set(query) - {"limit", "before_id", "after_id"}
    if unknown:
        raise InvalidRequest(f"unknown query parameter(s): {', '.join(sorted(unknown))}")
    raw_limit = query.get("limit", "20")
    # isascii: str.isdigit() accepts digits int() refuses (e.g. "²"); the length bound keeps int() cheap.
    if not (raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) <= 4) or not (
        1 <= int(raw_limit) <= 1000
    ):
        raise InvalidRequest("limit: must be an integer between 1 and 1000")
    limit = int(raw_limit)
    before, after = query.get("before_id"), query.get("after_id")
    if before and after:
        raise InvalidRequest("before_id and after_id cannot be used together")
    for cursor in (before, after):
        if cursor and cursor not in catalog.models:
            raise InvalidRequest(f"unknown model id in cursor: {cursor}")
    if after:
        names = names[names.index(after) + 1 :]
    if before:
        names = names[: names.index(before)]
        has_more = len(names) > limit
        names = names[-limit:]
    else:
        has_more = len(names) > limit
        names = names[:limit]
    return _json(
        ctx,
        {
            "data": [_anthropic_model(n) for n in names],
            "has_more": has_more,
            "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None,
        },
    )


def get_model(catalog: ModelCatalog, ctx: RequestContext) -> web.Response:
    name = ctx.object_id
    if name not in catalog.models or name not in _visible(catalog, ctx):
        raise ModelNotFound(f"The model `{name}` does not exist or you do not have access to it.")
    return _json(ctx, _anthropic_model(name) if ctx.envelope is Envelope.B else _openai_model(name))
