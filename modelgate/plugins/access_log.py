"""Access log: one structured line per model API request on the `modelgate.access` logger.

The line names the organization and key by id, never a secret; request and answer bodies are left out
unless `logging.log_prompts` is true, and then the request body goes to a separate debug line.
"""

from __future__ import annotations

import logging
import time
from enum import Enum
from itertools import islice

from modelgate.domain.errors import GatewayError
from modelgate.proxy.observability.logs import ENTRY_HEAD, EntryWriter, json_line_writer
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext

_LOGGER = "modelgate.access"
log = logging.getLogger(_LOGGER)

_MAX_MODEL_NAME = 200
_MAX_PATH = 512


class _Unset(Enum):
    UNSET = 0


_UNSET = _Unset.UNSET  # the writer not looked up yet


class AccessLog(Plugin):
    """Writes the access line (info; warning for upstream failures; error for internal errors)."""

    name = "access_log"
    requires = frozenset(
        {
            "attempts",
            "body",
            "bytes_sent",
            "credential",
            "error",
            "first_byte_at",
            "key",
            "metering",
            "model",
            "payload",
            "route",
            "row",
            "row_failures",
            "status",
            "stream",
        }
    )
    essential = True

    def __init__(self, log_prompts: bool) -> None:
        self._log_prompts = log_prompts
        self._writer: EntryWriter | _Unset | None = _UNSET  # looked up on first use, once logging is set

    def _write(self, level: int, entry: dict, request_id: str) -> None:
        writer = self._writer
        if writer is _UNSET:
            writer = self._writer = json_line_writer(log)
        if writer is not None:
            writer(level, entry)
        else:  # a logging set-up of the operator's own: a record, with the fields after the line's head
            fields = dict(islice(entry.items(), len(ENTRY_HEAD), None))
            log.log(level, "%s", entry["msg"], extra={"fields": fields, "request_id": request_id})

    def on_complete(self, ctx: RequestContext) -> None:
        started = ctx.started
        latency = time.perf_counter() - started
        status = ctx.status
        level = logging.ERROR if status == 500 else logging.WARNING if status > 500 else logging.INFO
        if not log.isEnabledFor(level):
            return
        request, key, row, usage, error = ctx.request, ctx.key, ctx.row, ctx.metering.usage, ctx.error
        first_byte_at, method = ctx.first_byte_at, request.method
        # Never the query string: it may carry a realtime client secret.
        path = request.path[:_MAX_PATH]
        # The whole line in one dict display (the log writer fills in ts and level): see ENTRY_HEAD.
        entry = {
            "ts": None,
            "level": None,
            "logger": _LOGGER,
            "msg": f"{method} {path} {status}",
            "request_id": ctx.request_id,
            "method": method,
            "path": path,
            "route": ctx.route.name if ctx.route is not None else None,
            "organization_id": key.organization_id if key else None,
            "key_id": key.id if key else None,
            "model": ctx.model.name if ctx.model is not None else _requested_model(ctx),
            "row": row.key if row else None,
            "provider": row.provider if row else None,
            "upstream_key": ctx.credential or None,  # a fingerprint, never the key
            "status": status,
            "stream": ctx.stream,
            "latency_ms": _milliseconds(latency),
            "ttfb_ms": _milliseconds(first_byte_at - started) if first_byte_at is not None else None,
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "cost_micros": ctx.metering.cost_micros or 0,
            "attempts": ctx.attempts,
            "bytes_sent": ctx.bytes_sent,
        }
        if isinstance(error, GatewayError):
            entry["error"] = error.code or error.type_b  # e.g. "authentication_error", "rate_limit_exceeded"
        elif error is not None:
            entry["error"] = "stream_broken" if status < 500 else "internal"
        if ctx.row_failures:
            entry["failed_rows"] = [f"{failed.key}: {reason}" for failed, reason in ctx.row_failures]
        self._write(level, entry, ctx.request_id)
        if self._log_prompts and ctx.body and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request body of %s",
                ctx.request_id,
                extra={"request_id": ctx.request_id, "body": ctx.body.decode("utf-8", "replace")},
            )


def _milliseconds(seconds: float) -> float:
    """`seconds` in milliseconds to two decimals: round(ms, 2) goes through a decimal conversion, five times
    the cost of the rest of this for a value that is only ever read."""
    return int(seconds * 100_000 + 0.5) / 100


def _requested_model(ctx: RequestContext) -> str | None:
    """The model the client asked for when it is not a configured one (e.g. a 404), clipped."""
    payload = ctx.payload
    name = payload.get("model") if isinstance(payload, dict) else None
    return name[:_MAX_MODEL_NAME] if isinstance(name, str) else None
