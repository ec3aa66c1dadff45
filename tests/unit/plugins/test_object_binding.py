"""Object binding: created response and video ids are bound to their row and organization, and follow-ups
reach that row; another organization's or an unknown id is 404 (400 for previous_response_id)."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest, UnknownTask
from modelgate.plugins.object_binding import ObjectBindingPlugin
from modelgate.proxy.state.objects import ObjectBinding, ObjectStore
from modelgate.proxy.translation import translator_for
from tests.support.plugin_context import (
    PluginServices,
    StoredKey,
    add_key,
    answer_head,
    answered,
    context_before,
    run_hook,
)

NATIVE_ROW = "anthropic/claude-test@anthropic.test"


async def _bound(services: PluginServices, key: StoredKey, object_id: str, kind: str = "response") -> None:
    model = "video-test" if kind == "video" else "gpt-test"
    row = NATIVE_ROW if kind == "response" else "openai/video-test@openai.test"
    services.objects.remember(ObjectBinding(object_id, key.record.organization_id, kind, model, row))
    await services.objects.drain()


async def test_a_created_response_id_is_bound_to_its_row_and_stored(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before(
        "object_binding",
        services,
        path="/v1/responses",
        payload={"model": "gpt-test", "input": "hi"},
        key=key.record,
    )
    plugin = ObjectBindingPlugin(services.objects, services.catalog)
    await run_hook(plugin.on_request(ctx))
    answered(ctx, row_index=1)

    plugin.on_chunk(ctx, b'{"id": "resp_abc123", "object": "response", "output": []}')
    await services.objects.drain()

    assert ctx.bound_object == "resp_abc123"
    stored = await ObjectStore(services.db).find("resp_abc123", key.record.organization_id, "response")
    assert stored == ObjectBinding(
        "resp_abc123", key.record.organization_id, "response", "gpt-test", NATIVE_ROW
    )


async def test_a_response_asked_not_to_be_stored_is_not_bound(
    services: PluginServices, key: StoredKey
) -> None:
    payload = {"model": "gpt-test", "input": "hi", "store": False}
    ctx = await context_before(
        "object_binding", services, path="/v1/responses", payload=payload, key=key.record
    )
    plugin = ObjectBindingPlugin(services.objects, services.catalog)
    answered(ctx)

    plugin.on_chunk(ctx, b'{"id": "resp_abc123", "object": "response"}')

    assert ctx.bound_object is None
    assert await services.objects.find("resp_abc123", key.record.organization_id, "response") is None


async def test_a_translated_answer_is_not_bound_for_its_row_stores_nothing(
    services: PluginServices, key: StoredKey
) -> None:
    payload = {"model": "gpt-test", "input": "hi"}
    ctx = await context_before(
        "object_binding", services, path="/v1/responses", payload=payload, key=key.record
    )
    plugin = ObjectBindingPlugin(services.objects, services.catalog)
    answer_head(ctx).translator = translator_for("responses", "anthropic")
    answered(ctx)

    plugin.on_chunk(ctx, b'{"id": "msg_abc123", "type": "message", "content": []}')

    assert ctx.bound_object is None
    assert await services.objects.find("msg_abc123", key.record.organization_id, "response") is None


async def test_a_follow_up_reaches_the_row_that_created_the_object(
    services: PluginServices, key: StoredKey
) -> None:
    await _bound(services, key, "resp_abc123")
    ctx = await context_before(
        "object_binding", services, method="GET", path="/v1/responses/resp_abc123", key=key.record
    )

    await run_hook(ObjectBindingPlugin(services.objects, services.catalog).on_request(ctx))

    assert ctx.model is services.catalog.get("gpt-test")
    assert [row.key for row in ctx.rows] == [NATIVE_ROW]


async def test_another_organizations_object_is_404_without_a_code(
    services: PluginServices, key: StoredKey
) -> None:
    await _bound(services, key, "video_abc123", kind="video")
    stranger = await add_key(services)
    ctx = await context_before(
        "object_binding", services, method="GET", path="/v1/videos/video_abc123", key=stranger.record
    )

    with pytest.raises(UnknownTask) as caught:
        await run_hook(ObjectBindingPlugin(services.objects, services.catalog).on_request(ctx))

    assert (caught.value.status, caught.value.code) == (404, None)
    assert caught.value.message == "Video with id 'video_abc123' not found."
    assert ctx.rows == []


async def test_an_unknown_previous_response_id_is_400(services: PluginServices, key: StoredKey) -> None:
    payload = {"model": "gpt-test", "input": "more", "previous_response_id": "resp_never"}
    ctx = await context_before(
        "object_binding", services, path="/v1/responses", payload=payload, key=key.record
    )

    with pytest.raises(InvalidRequest, match="Previous response with id 'resp_never' not found"):
        await run_hook(ObjectBindingPlugin(services.objects, services.catalog).on_request(ctx))


async def test_a_previous_response_keeps_only_the_row_that_made_it(
    services: PluginServices, key: StoredKey
) -> None:
    await _bound(services, key, "resp_abc123")
    payload = {"model": "gpt-test", "input": "more", "previous_response_id": "resp_abc123"}
    ctx = await context_before(
        "object_binding", services, path="/v1/responses", payload=payload, key=key.record
    )

    await run_hook(ObjectBindingPlugin(services.objects, services.catalog).on_request(ctx))

    assert [row.key for row in ctx.rows] == [NATIVE_ROW]


async def test_a_deleted_object_is_forgotten_once_the_delete_succeeded(
    services: PluginServices, key: StoredKey
) -> None:
    await _bound(services, key, "resp_abc123")
    ctx = await context_before(
        "object_binding", services, method="DELETE", path="/v1/responses/resp_abc123", key=key.record
    )
    plugin = ObjectBindingPlugin(services.objects, services.catalog)
    await run_hook(plugin.on_request(ctx))
    answered(ctx)

    await run_hook(plugin.on_complete(ctx))

    assert await ObjectStore(services.db).find("resp_abc123", key.record.organization_id, "response") is None
