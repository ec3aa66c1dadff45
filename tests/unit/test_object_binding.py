"""Response ids are bound even when the upstream splits one across two chunks."""

from __future__ import annotations

from types import SimpleNamespace

from modelgate.plugins.object_binding import ObjectBindingPlugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.route_table import ROUTES


class _RecordingStore:
    def __init__(self) -> None:
        self.bound: list = []

    def remember(self, binding) -> None:
        self.bound.append(binding)


def _ctx() -> RequestContext:
    ctx = RequestContext(request=None, request_id="req_1", started=0.0)  # type: ignore[arg-type]
    ctx.route = next(route for route in ROUTES if route.name == "responses")
    ctx.status = 200
    ctx.payload = {"model": "m"}
    ctx.key = SimpleNamespace(organization_id="org_1")
    ctx.model = SimpleNamespace(name="m")
    ctx.row = SimpleNamespace(key="alpha/m@host")
    return ctx


def test_an_id_split_across_two_chunks_is_bound() -> None:
    store = _RecordingStore()
    plugin = ObjectBindingPlugin(store, catalog=None)  # type: ignore[arg-type]
    ctx = _ctx()
    plugin.on_chunk(ctx, b'event: response.created\ndata: {"response": {"id": "resp_ab')
    plugin.on_chunk(ctx, b'cdef123", "object": "response"}}\n\n')
    assert [b.id for b in store.bound] == ["resp_abcdef123"]
    assert ctx.bound_object == "resp_abcdef123"


def test_an_id_in_one_chunk_is_bound_once() -> None:
    store = _RecordingStore()
    plugin = ObjectBindingPlugin(store, catalog=None)  # type: ignore[arg-type]
    ctx = _ctx()
    plugin.on_chunk(ctx, b'{"id": "resp_xyz", "object": "response"}')
    plugin.on_chunk(ctx, b'{"id": "resp_other"}')
    assert [b.id for b in store.bound] == ["resp_xyz"]
