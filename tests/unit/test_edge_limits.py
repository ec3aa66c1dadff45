"""The connection guard's settings are validated and clamped; a parser error is described without the request
bytes its message quotes."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    BadStatusLine,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
)

from modelgate.config import ConfigError, load_config
from modelgate.config.loader import DEFAULT_CONFIG_PATH
from modelgate.proxy.http.bad_http import MissingHttpVersion, fault_reason, fault_status
from modelgate.proxy.http.connection_guard import DESCRIPTOR_RESERVE, connection_cap

SECRET = "sk-secret-0123456789"

# The embedded defaults have no [server] table: a test may put one before them.
MINIMAL = DEFAULT_CONFIG_PATH.read_text(encoding="utf-8")


def test_the_edge_settings_must_be_positive(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text(
        "[server]\nheader_timeout_seconds = 0\nbody_idle_timeout_seconds = -1.0\n"
        "keepalive_timeout_seconds = 0.0\nmax_connections = 0\n" + MINIMAL
    )
    with pytest.raises(ConfigError) as failure:
        load_config(path, env={})
    problems = "\n".join(failure.value.problems)
    for key in ("header_timeout_seconds", "body_idle_timeout_seconds", "keepalive_timeout_seconds"):
        assert f"server.{key}: must be greater than 0" in problems
    assert "server.max_connections: must be at least 1" in problems


def test_the_edge_settings_have_defaults(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text(MINIMAL)
    server = load_config(path, env={}).server
    assert (server.header_timeout_seconds, server.body_idle_timeout_seconds) == (10.0, 30.0)
    assert (server.keepalive_timeout_seconds, server.max_connections) == (75.0, 16384)
    assert (server.max_open_requests, server.max_event_loop_lag_seconds) == (10000, 0.5)


def test_the_connection_cap_leaves_descriptors_for_everything_else() -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap(5) == 5
    if soft != resource.RLIM_INFINITY:
        assert connection_cap(10**9) == max(1, soft - DESCRIPTOR_RESERVE)


@pytest.mark.parametrize(
    ("exc", "reason", "status"),
    [
        (LineTooLong(SECRET.encode() + b"...", 8190), "request line or header field too long", 431),
        (InvalidHeader(f"X-Key: {SECRET}".encode()), "invalid header", 400),
        (
            BadHttpMessage(f"Invalid header value char:\n\n  b'X-Key: {SECRET}'\n  ^"),
            "invalid header value char",
            400,
        ),
        (
            BadStatusLine(error=f"Bad status line:\n  Invalid HTTP version:\n\n  b'{SECRET}'\n  ^"),
            "invalid HTTP version",
            400,
        ),
        (BadHttpMethod(f"G@T /{SECRET}"), "invalid method", 400),
        (BadStatusLine(f"GET /{SECRET}"), "invalid request line", 400),
        (InvalidURLError(f"/{SECRET}"), "invalid request target", 400),
        (BadHttpMessage(f"{SECRET}:\n\n  {'x' * 100}"), "malformed request", 400),
        (BadHttpMessage("Too many headers received"), "too many header fields", 431),
        (BadHttpMessage("Missing 'Host' header in request."), "missing Host header", 400),
        (BadHttpMessage("Duplicate 'Content-Length' header found."), "duplicate header", 400),
        (MissingHttpVersion(), "no HTTP version in the request line", 400),
    ],
)
def test_a_parser_error_is_described_without_the_bytes_it_quotes(
    exc: Exception, reason: str, status: int
) -> None:
    assert fault_reason(exc) == reason
    assert SECRET not in fault_reason(exc)
    assert fault_status(exc) == status
