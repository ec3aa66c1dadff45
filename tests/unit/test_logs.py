"""The JSON log: the access log's direct writer writes exactly the line the formatter would."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta

import orjson

from modelgate.proxy.observability.logs import (
    ENTRY_HEAD,
    BufferedLineHandler,
    json_line_writer,
)


def _only(handler: BufferedLineHandler) -> None:
    """Make `handler` the root logger's only one (in the test itself: pytest adds its own for the call)."""
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def _lines(handler: BufferedLineHandler, path) -> list[dict]:
    handler.flush()
    return [orjson.loads(line) for line in path.read_text().splitlines()]


def test_the_direct_writer_writes_the_formatters_line(json_log) -> None:
    handler, path = json_log
    _only(handler)
    logger = logging.getLogger("modelgate.test-direct")
    fields = {"request_id": "req_1", "status": 200, "path": "/v1/chat/completions", "ünï": "cödé"}
    logger.info("POST /v1/chat/completions 200", extra={"fields": fields, "request_id": "req_1"})
    writer = json_line_writer(logger)
    assert writer is not None
    writer(logging.INFO, _entry(logger.name, "POST /v1/chat/completions 200", fields))
    via_logging, direct = _lines(handler, path)
    assert list(direct)[: len(ENTRY_HEAD)] == list(ENTRY_HEAD) == list(via_logging)[: len(ENTRY_HEAD)]
    assert via_logging.pop("ts")[:4] == direct.pop("ts")[:4]
    assert via_logging == direct
    assert direct["level"] == "info" and direct["logger"] == "modelgate.test-direct"


def _entry(logger: str, message: str, fields: dict) -> dict:
    return {"ts": None, "level": None, "logger": logger, "msg": message, **fields}


def test_the_direct_writers_time_is_the_formatters_to_the_millisecond(json_log) -> None:
    handler, path = json_log
    _only(handler)
    writer = json_line_writer(logging.getLogger("modelgate.test-time"))
    before = datetime.now(UTC)
    for n in range(50):  # lines of one millisecond share its text; each line still carries the time
        writer(logging.INFO, _entry("modelgate.test-time", "tick", {"n": n}))
    after = datetime.now(UTC)
    stamps = [line["ts"] for line in _lines(handler, path)]
    assert len(stamps) == 50
    for stamp in stamps:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)
        when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert before - timedelta(milliseconds=1) <= when <= after
    assert stamps == sorted(stamps)


def test_the_direct_writer_respects_the_handler_level(json_log) -> None:
    handler, path = json_log
    _only(handler)
    handler.setLevel(logging.WARNING)
    writer = json_line_writer(logging.getLogger("modelgate.test-level"))
    writer(logging.INFO, _entry("modelgate.test-level", "quiet", {"n": 1}))
    writer(logging.WARNING, _entry("modelgate.test-level", "loud", {"n": 2}))
    assert [line["msg"] for line in _lines(handler, path)] == ["loud"]


def test_no_direct_writer_when_a_filter_or_another_handler_is_on_the_way(json_log) -> None:
    _only(json_log[0])
    logger = logging.getLogger("modelgate.test-filtered")
    logger.addFilter(lambda record: True)
    try:
        assert json_line_writer(logger) is None
    finally:
        logger.filters.clear()
    parent = logging.getLogger("modelgate")
    extra = logging.NullHandler()
    parent.addHandler(extra)
    try:
        assert json_line_writer(logger) is None
    finally:
        parent.removeHandler(extra)
    assert json_line_writer(logger) is not None
    logging.getLogger().addHandler(logging.NullHandler())
    assert json_line_writer(logger) is None
