"""Route support: only the model API reference is served; it picks the error envelope once."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest, RouteNotSupported
from modelgate.plugins.route_support import RouteSupport
from modelgate.proxy.pipeline.envelopes import Envelope
from modelgate.proxy.pipeline.route_table import RouteTable
from tests.support.plugin_context import request_context


async def test_a_known_route_is_recorded_with_envelope_a() -> None:
    ctx = request_context("POST", "/v1/chat/completions", body={"model": "gpt-test"})

    RouteSupport(RouteTable()).on_request(ctx)

    assert ctx.route.name == "chat_completions"
    assert ctx.object_id is None
    assert ctx.envelope is Envelope.A


async def test_a_path_outside_the_reference_is_404_route_not_supported() -> None:
    ctx = request_context("POST", "/v1/assistants", body={})

    with pytest.raises(RouteNotSupported) as caught:
        RouteSupport(RouteTable()).on_request(ctx)

    assert (caught.value.status, caught.value.type_a, caught.value.message) == (
        404,
        "invalid_request_error",
        "route not supported",
    )
    assert ctx.route is None


async def test_a_known_path_with_a_method_it_does_not_serve_is_404_too() -> None:
    ctx = request_context("GET", "/v1/chat/completions")

    with pytest.raises(RouteNotSupported):
        RouteSupport(RouteTable()).on_request(ctx)


async def test_an_object_route_records_the_id_from_the_path() -> None:
    ctx = request_context("GET", "/v1/videos/video_123/content")

    RouteSupport(RouteTable()).on_request(ctx)

    assert (ctx.route.name, ctx.object_id) == ("videos_content", "video_123")


async def test_messages_routes_answer_in_envelope_b() -> None:
    ctx = request_context("POST", "/v1/messages", body={"model": "gpt-test"})

    RouteSupport(RouteTable()).on_request(ctx)

    assert ctx.envelope is Envelope.B


async def test_the_model_list_switches_to_envelope_b_only_with_the_version_header() -> None:
    plain = request_context("GET", "/v1/models")
    versioned = request_context("GET", "/v1/models", headers={"anthropic-version": "2023-06-01"})

    RouteSupport(RouteTable()).on_request(plain)
    RouteSupport(RouteTable()).on_request(versioned)

    assert (plain.envelope, versioned.envelope) == (Envelope.A, Envelope.B)


async def test_a_nul_in_the_query_is_400_in_the_routes_envelope() -> None:
    ctx = request_context("GET", "/v1/responses/resp_1?include=%00")

    with pytest.raises(InvalidRequest) as caught:
        RouteSupport(RouteTable()).on_request(ctx)

    assert caught.value.status == 400
    assert ctx.route.name == "responses_get"  # recorded first: the 400 goes out in the route's envelope
