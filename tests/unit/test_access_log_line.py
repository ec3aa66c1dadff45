"""The access line written straight to the JSON log (its fields serialized by the plugin, who-called-what
once per distinct set) is the line a logging record of the same fields makes, field for field and in order."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request

from modelgate.domain.errors import InvalidRequest, UpstreamUnavailable
from modelgate.domain.usage import Usage
from modelgate.plugins.access_log import AccessLog
from modelgate.proxy.observability.logs import BufferedLineHandler
from modelgate.proxy.pipeline.context import RequestContext

_ROW = SimpleNamespace(key="openai/gpt-4o@api.openai.com", provider="openai")


def _context(path: str, status: int, **changes) -> RequestContext:
    ctx = RequestContext(make_mocked_request("POST", path), "req_0123abcd", time.perf_counter() - 0.0123)
    ctx.route = SimpleNamespace(name="chat_completions")
    ctx.key = SimpleNamespace(organization_id="org_1", id="key_1")
    ctx.model = SimpleNamespace(name="gpt-4o")
    ctx.row = _ROW
    ctx.credential = "b8e5af58"
    ctx.status = status
    ctx.first_byte_at = time.perf_counter() - 0.001
    ctx.metering.usage = Usage(input_tokens=42, output_tokens=9)
    ctx.metering.cost_micros = 35
    ctx.attempts = 1
    ctx.bytes_sent = 290
    for name, value in changes.items():
        setattr(ctx, name, value)
    return ctx


CASES = [
    lambda: _context("/v1/chat/completions", 200),
    lambda: _context("/v1/chat/completions", 200, stream=True, first_byte_at=None),
    lambda: _context('/v1/files/fïle "ü"\\x', 400, error=InvalidRequest("bad"), row=None, credential=""),
    lambda: _context(
        "/v1/chat/completions",
        503,
        error=UpstreamUnavailable(),
        row_failures=[(_ROW, "http_503")],
        attempts=2,
    ),
    lambda: _context(
        "/v1/chat/completions", 404, model=None, key=None, route=None, payload={"model": "nope"}
    ),
    lambda: _context("/v1/chat/completions", 200, error=ConnectionResetError()),
]


def _line(handler: BufferedLineHandler, path, ctx: RequestContext, direct: bool) -> dict:
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    if not direct:  # a filter on the way: the plugin must go through a logging record
        handler.addFilter(lambda record: True)
    try:
        AccessLog(log_prompts=False).on_complete(ctx)
    finally:
        handler.filters.clear()
    handler.flush()
    return orjson.loads(path.read_text().splitlines()[-1])


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_direct_line_is_the_records_line(json_log, case: int) -> None:
    handler, path = json_log
    ctx = CASES[case]()
    direct = _line(handler, path, ctx, direct=True)
    via_record = _line(handler, path, ctx, direct=False)
    assert direct.pop("ts")[:10] == via_record.pop("ts")[:10]
    for line in (direct, via_record):
        assert line.pop("latency_ms") >= 12.3  # written a moment apart
    assert list(direct.items()) == list(via_record.items())  # the same fields, in the same order
    assert direct["logger"] == "modelgate.access"
    assert direct["request_id"] == "req_0123abcd"
    assert direct["path"] == ctx.request.path


def test_lines_of_one_caller_share_their_serialized_part_and_stay_distinct(json_log) -> None:
    handler, path = json_log
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.INFO)
    plugin = AccessLog(log_prompts=False)
    for n in range(3):
        plugin.on_complete(_context("/v1/chat/completions", 200, bytes_sent=n))
    plugin.on_complete(_context("/v1/embeddings", 200, model=SimpleNamespace(name="other")))
    handler.flush()
    lines = [orjson.loads(line) for line in path.read_text().splitlines()]
    assert [(line["path"], line["model"], line["bytes_sent"]) for line in lines] == [
        ("/v1/chat/completions", "gpt-4o", 0),
        ("/v1/chat/completions", "gpt-4o", 1),
        ("/v1/chat/completions", "gpt-4o", 2),
        ("/v1/embeddings", "other", 290),
    ]
