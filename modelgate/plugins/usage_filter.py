"""Usage filter: what the client did not ask for never reaches it. The usage the gateway asked an
OpenAI-style stream for on the client's behalf (plugins.usage_metering marks it withheld) is taken out of
the stream, whatever the chunk carrying it looks like, and a provider's own price (`cost`,
`cost_details`) is taken out of every OpenAI-style answer, whole or streamed
(modelgate/domain/answer_filters.py).
"""

from __future__ import annotations

from modelgate.domain.answer_filters import WHOLE_ANSWER_FILTER, UsageChunkFilter
from modelgate.domain.usage import StreamUsageScanner
from modelgate.proxy.pipeline.chain import Plugin, StreamStep
from modelgate.proxy.pipeline.context import AnswerHead, PhaseError, RequestContext


class UsageFilter(Plugin):
    """Keeps withheld usage and providers' prices from the client (see the module)."""

    name = "usage_filter"
    requires = frozenset({"answer", "metering", "model", "route", "stream"})
    essential = True

    def on_response_head(self, ctx: RequestContext, head: AnswerHead) -> None:
        if ctx.model is None:
            return
        route = ctx.matched_route
        if ctx.stream:
            if route.usage_on_request:  # the OpenAI-style streams that carry usage
                scanner = ctx.metering.scanner
                if head.translator is not None or not isinstance(scanner, StreamUsageScanner):
                    scanner = None  # a translated stream is filtered in the client's format, not the one read
                head.usage_filter = UsageChunkFilter(ctx.metering.usage_withheld, scanner)
        elif route.provider_priced:  # the price is the provider's, never relayed
            head.usage_filter = WHOLE_ANSWER_FILTER

    def stream_step(self, ctx: RequestContext) -> StreamStep | None:
        chunk_filter = ctx.answer_head.usage_filter
        return None if chunk_filter is None else chunk_filter.feed  # the filter's own, one call a piece

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        answer = ctx.answer  # ctx.answer_head, inline: this runs for every piece of a stream
        if answer is None:
            raise PhaseError("answer", "the forwarder")
        chunk_filter = answer.usage_filter
        if chunk_filter is None:
            return chunk
        return chunk_filter.feed(chunk) if answer.streamed else chunk_filter.whole(chunk)

    def on_end(self, ctx: RequestContext, tail: bytes) -> bytes:
        chunk_filter = ctx.answer_head.usage_filter
        if chunk_filter is None:
            return tail
        return chunk_filter.feed(tail) + chunk_filter.finish() if tail else chunk_filter.finish()
