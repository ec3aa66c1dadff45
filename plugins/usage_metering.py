"""Usage metering: token usage is read from the upstream answer as it passes, and every request writes a
ledger row (organization, key, system, model, row, tokens by kind, cost, request id, status, time).

For OpenAI-style streams whose client did not ask for usage, the gateway asks the upstream for it
(`stream_options.include_usage`) and keeps that extra usage-only chunk from the client.
"""

from __future__ import annotations

import time

from billing.ledger import CRASHED, LedgerEntry, LedgerWriter
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
        usage = ctx.usage
        key = ctx.key
        self._ledger.add(
            LedgerEntry(
                organization_id=key.organization_id,
                key_id=key.id,
                system_id=key.system_id,
                model=ctx.model.name,
                row_key=ctx.row.key if ctx.row else None,
                request_id=ctx.request_id,
                status=ctx.answered_status or ctx.status,
                input_tokens=usage.input_tokens if usage else 0,
                cached_input_tokens=usage.cached_input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                cost_micros=cost,
                created_at=time.time(),
                budgets=tuple(ctx.budgets),
                units=(usage.images + usage.audio_seconds + usage.video_seconds) if usage else 0.0,
                outcome=_outcome(ctx),
                row_id=ctx.ledger_row_id,
            )
        )


def _crash_entry(ctx: RequestContext) -> LedgerEntry:
    """The row of an admitted request whose process dies before it completes: the prompt, which the
    provider surely billed (about 4 bytes a token), at most the reservation."""
    key = ctx.key
    prompt_tokens = len(ctx.body) // 4
    return LedgerEntry(
        organization_id=key.organization_id,
        key_id=key.id,
        system_id=key.system_id,
        model=ctx.model.name,
        row_key=None,
        request_id=ctx.request_id,
        status=0,
        input_tokens=prompt_tokens,
        cached_input_tokens=0,
        output_tokens=0,
        cost_micros=min(ctx.model.prices.cost(Usage(input_tokens=prompt_tokens)), ctx.reserved_micros),
        created_at=time.time(),
        budgets=tuple(ctx.budgets),
        outcome=CRASHED,
    )


def _outcome(ctx: RequestContext) -> str:
    """How the request ended, for its ledger row."""
    if ctx.answered_status:
        return ctx.outcome
    # Answered by the gateway itself (a realtime secret, a video list): complete, and free.
    return "completed" if 0 < ctx.status < 400 else "refused"
