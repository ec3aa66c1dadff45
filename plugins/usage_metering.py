"""Usage metering: token usage is read from the upstream answer as it passes, and every request writes a
ledger row (organization, key, system, model, row, tokens by kind, cost, request id, status, time).

For OpenAI-style streams whose client did not ask for usage, the gateway asks the upstream for it
(`stream_options.include_usage`) and keeps that extra usage-only chunk from the client.
"""

from __future__ import annotations

from billing.ledger import CRASHED, LedgerEntry, LedgerWriter, entry_for
from billing.media import MEDIA_ROUTES, MediaUsageReader
from billing.usage import StreamUsageScanner, generated_tokens, tokens_of, usage_of_body
from plugins.base import Plugin
from plugins.billing_gate import final_cost
from proxy.context import RequestContext, Usage

_USAGE_ROUTES = frozenset({"chat_completions", "completions"})
_USAGE_ONLY_MARKERS = (b'"choices":[]', b'"choices": []')


class UsageOnlyChunkFilter:
    """Drops the usage-only SSE event the client did not ask for; passes every other event unchanged."""

    __slots__ = ("_carry",)

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._carry + chunk if self._carry else chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self._carry = data
            return b""
        complete, self._carry = data[: end + 2], data[end + 2 :]
        if b'"usage"' not in complete:
            return complete
        events = complete.split(b"\n\n")[:-1]
        return b"".join(event + b"\n\n" for event in events if not _is_usage_only(event))

    def finish(self) -> bytes:
        tail, self._carry = self._carry, b""
        return tail


def _is_usage_only(event: bytes) -> bool:
    return b'"usage"' in event and any(marker in event for marker in _USAGE_ONLY_MARKERS)


class UsageMetering(Plugin):
    """Reads usage from answers and records every request in the ledger."""

    name = "usage_metering"

    def __init__(self, ledger: LedgerWriter) -> None:
        self._ledger = ledger

    def on_request(self, ctx: RequestContext) -> None:
        if ctx.model is None:
            return
        if ctx.reserved_micros is not None:  # admitted by the billing gate (the step before this one)
            ctx.ledger_row_id = self._ledger.admit(_crash_entry(ctx))
        if ctx.route.name in MEDIA_ROUTES:
            # Media answers are charged per unit (image, second) or per request, never by bytes seen.
            ctx.usage_scanner = MediaUsageReader(ctx.route.name, ctx.payload)
            return
        if ctx.stream:
            ctx.usage_scanner = StreamUsageScanner()
            payload = ctx.payload
            if ctx.route.name in _USAGE_ROUTES:
                options = payload.get("stream_options")
                if not (isinstance(options, dict) and options.get("include_usage") is True):
                    payload["stream_options"] = {
                        **(options if isinstance(options, dict) else {}),
                        "include_usage": True,
                    }
                    ctx.payload_changed = True
                    ctx.chunk_filter = UsageOnlyChunkFilter()

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> None:
        scanner = ctx.usage_scanner
        if scanner is not None:
            scanner.feed(chunk)
            if scanner.usage is not None:
                ctx.usage = scanner.usage
        elif ctx.model is not None and ctx.status == 200:
            ctx.usage = usage_of_body(chunk)
            if ctx.usage is None:  # charged by the text it carries
                ctx.content_tokens = tokens_of(*generated_tokens(chunk))

    def on_complete(self, ctx: RequestContext) -> None:
        if ctx.route.name == "realtime" and ctx.status == 101:  # one row per response, written by the relay
            return
        if ctx.model is None or ctx.key is None:
            return
        cost = final_cost(ctx)
        status = ctx.answered_status or ctx.status
        row_key = ctx.row.key if ctx.row else None
        self._ledger.add(
            entry_for(ctx, ctx.usage, cost, status, _outcome(ctx), row_key=row_key, row_id=ctx.ledger_row_id)
        )


def _crash_entry(ctx: RequestContext) -> LedgerEntry:
    """The row of an admitted request whose process dies before it completes: the prompt, which the
    provider surely billed (about 4 bytes a token), at most the reservation."""
    usage = Usage(input_tokens=len(ctx.body) // 4)
    return entry_for(ctx, usage, min(ctx.model.prices.cost(usage), ctx.reserved_micros), 0, CRASHED)


def _outcome(ctx: RequestContext) -> str:
    """How the request ended, for its ledger row."""
    if ctx.answered_status:
        return ctx.outcome
    # Answered by the gateway itself (a realtime secret, a video list): complete, and free.
    return "completed" if 0 < ctx.status < 400 else "refused"
