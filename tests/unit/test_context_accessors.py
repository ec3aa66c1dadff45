"""The request context's checked accessors: a field an earlier phase fills in, read by a later step without
`None` in its type, and a clear internal error when a step reads it before that phase ran."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from modelgate.proxy.pipeline.context import AnswerHead, PhaseError, RequestContext


def _fresh() -> RequestContext:
    return RequestContext(make_mocked_request("POST", "/v1/chat/completions"), "req_accessors", 0.0)


@pytest.mark.parametrize(
    ("accessor", "message"),
    [
        ("matched_route", "ctx.route read before route_support filled it in"),
        ("api_key", "ctx.key read before auth filled it in"),
        ("routed_model", "ctx.model read before model_routing filled it in"),
        ("json_payload", "ctx.payload read before body_limits filled it in"),
        ("served_row", "ctx.row read before the forwarder filled it in"),
        ("answer_head", "ctx.answer read before the forwarder filled it in"),
    ],
)
def test_a_field_read_before_its_phase_is_an_error_naming_the_field_and_the_step(
    accessor: str, message: str
) -> None:
    with pytest.raises(PhaseError, match=message):
        getattr(_fresh(), accessor)


def test_once_filled_each_accessor_gives_the_field_itself() -> None:
    ctx = _fresh()
    # Stand-ins: the accessors hand back whatever the phase stored, the object itself.
    ctx.route, ctx.key, ctx.model, ctx.row = object(), object(), object(), object()
    ctx.payload = {"model": "gpt-test"}
    ctx.answer = AnswerHead(200, {}, {}, False)

    assert ctx.matched_route is ctx.route
    assert ctx.api_key is ctx.key
    assert ctx.routed_model is ctx.model
    assert ctx.json_payload is ctx.payload
    assert ctx.served_row is ctx.row
    assert ctx.answer_head is ctx.answer
