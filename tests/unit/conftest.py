"""Fixtures shared by the unit tests."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelgate.proxy.observability.logs import BufferedLineHandler, JsonFormatter


@pytest.fixture
def json_log(tmp_path: Path) -> Iterator[tuple[BufferedLineHandler, Path]]:
    """Our buffered JSON handler writing to a file; the root logger is restored afterwards. (A test makes it
    the root's handler itself: pytest adds its own for the call, after the fixtures.)"""
    path = tmp_path / "log.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    handler = BufferedLineHandler(fd)
    os.close(fd)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    try:
        yield handler, path
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        handler.close()
