"""Model routing: the request's model must exist and serve the route's kind; its rows go on the context."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest, ModelNotFound
from modelgate.plugins.model_routing import ModelRouting
from tests.support.plugin_context import PluginServices, context_before


async def test_a_known_model_leaves_its_entry_and_every_row(services: PluginServices) -> None:
    ctx = await context_before("model_routing", services, payload={"model": "gpt-test", "messages": []})

    ModelRouting(services.catalog).on_request(ctx)

    assert ctx.model is services.catalog.get("gpt-test")
    assert [row.key for row in ctx.rows] == [
        "openai/gpt-test-2025@openai.test",
        "anthropic/claude-test@anthropic.test",
    ]


async def test_an_unknown_model_is_404_model_not_found(services: PluginServices) -> None:
    ctx = await context_before("model_routing", services, payload={"model": "gpt-9", "messages": []})

    with pytest.raises(ModelNotFound) as caught:
        ModelRouting(services.catalog).on_request(ctx)

    assert (caught.value.status, caught.value.code) == (404, "model_not_found")
    assert "`gpt-9` does not exist" in caught.value.message
    assert ctx.model is None and ctx.rows == []


async def test_a_model_that_does_not_serve_the_route_is_404(services: PluginServices) -> None:
    ctx = await context_before(
        "model_routing", services, path="/v1/embeddings", payload={"model": "openai-only", "input": "x"}
    )

    with pytest.raises(ModelNotFound):
        ModelRouting(services.catalog).on_request(ctx)


@pytest.mark.parametrize("payload", [{"messages": []}, {"model": "", "messages": []}, {"model": 7}])
async def test_a_missing_or_empty_model_is_400(services: PluginServices, payload: dict) -> None:
    ctx = await context_before("model_routing", services, payload=payload)

    with pytest.raises(InvalidRequest, match="you must provide a model parameter"):
        ModelRouting(services.catalog).on_request(ctx)


@pytest.mark.parametrize("path", ["/v1/models", "/v1/responses/resp_123"])
async def test_routes_that_name_no_model_in_the_body_are_left_alone(
    services: PluginServices, path: str
) -> None:
    ctx = await context_before("model_routing", services, method="GET", path=path)

    ModelRouting(services.catalog).on_request(ctx)

    assert ctx.model is None and ctx.rows == []
