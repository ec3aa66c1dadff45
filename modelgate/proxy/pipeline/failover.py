"""Failover: the rows one request tries, best first, and what each try's outcome does to the row (its
health, and so its cool-down) and to the request's record (attempts, failed rows, the operator's log line).
The forwarder and the realtime relay both try rows through it, and both fail over only while nothing has
reached the client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from modelgate.domain.errors import ServiceUnavailable
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.upstream.model_rows import RoutingRow, RowSelector

# The failover lines were the forwarder's first, and operators filter on its name.
log = logging.getLogger("modelgate.forward")


def log_failed_attempt(
    ctx: RequestContext, row: RoutingRow, what: str, exc: BaseException | None = None
) -> None:
    """The operator's line about one failed attempt; the tenant is told only that the model is unavailable."""
    log.warning(
        "model %s: row %s (provider %s, host %s) %s%s",
        row.model,
        row.key,
        row.provider,
        row.host,
        what,
        f": {exc.__class__.__name__}: {exc}" if exc is not None else "",
        extra={"request_id": ctx.request_id},
    )


class RowAttempts:
    """The healthy rows of `ctx`, best first (at most `most`), each counted as an attempt as it is tried.

    Raises ServiceUnavailable (503) when every row is cooling down after failures.
    """

    __slots__ = ("_ctx", "_rows", "_selector")

    def __init__(self, selector: RowSelector, ctx: RequestContext, *, most: int | None = None) -> None:
        rows = selector.order(ctx.rows)
        if most is not None:
            rows = rows[:most]
        if not rows:
            log.warning(
                "every row of model %s is cooling down after failures",
                ctx.model.name if ctx.model else "?",
                extra={"request_id": ctx.request_id},
            )
            raise ServiceUnavailable()
        self._ctx = ctx
        self._rows = rows
        self._selector = selector

    def __iter__(self) -> Iterator[RoutingRow]:
        for row in self._rows:
            self._ctx.attempts += 1
            yield row

    def failed(self, row: RoutingRow, reason: str, what: str, exc: BaseException | None = None) -> None:
        """The row failed this request (`reason`, e.g. "unreachable", "http_503"): counted towards its
        cool-down, logged, recorded on the request."""
        self._selector.failed(row)
        log_failed_attempt(self._ctx, row, what, exc)
        self._ctx.row_failures.append((row, reason))

    def cannot_carry(self, row: RoutingRow, reason: str, what: str) -> None:
        """The row cannot carry this request at all (not its health: no cool-down); recorded, logged."""
        log_failed_attempt(self._ctx, row, what)
        self._ctx.row_failures.append((row, reason))

    def succeeded(self, row: RoutingRow) -> None:
        self._selector.succeeded(row)
