"""Translation: an answer from a row that speaks another wire format is turned into the route's format,
and an answer in the route's own format names the model as the client did (a row may call it otherwise
upstream; the client's name is the one it sees).

A whole answer is translated at once; a stream as it passes (modelgate/proxy/translation/), holding back only
an incomplete event. A whole answer that cannot be translated is the provider's fault: 502, and the row is
named in the operator's log.
"""

from __future__ import annotations

import orjson

from modelgate.domain.errors import UpstreamUnavailable
from modelgate.proxy.pipeline.chain import Plugin, StreamStep
from modelgate.proxy.pipeline.context import AnswerHead, PhaseError, RequestContext
from modelgate.proxy.pipeline.failover import log_failed_attempt
from modelgate.proxy.translation.model_name import ModelNameStream, with_model_name


class Translation(Plugin):
    """Turns each answer into the route's wire format, naming the client's model (see the module)."""

    name = "translation"
    requires = frozenset({"answer", "model", "payload", "row"})
    essential = True

    def on_response_head(self, ctx: RequestContext, head: AnswerHead) -> None:
        if not head.streamed:
            return
        if head.translator is not None:
            head.stream_translator = head.translator.stream(ctx.routed_model.name, ctx.json_payload)
        elif ctx.model is not None and head.upstream_headers.get("content-type", "").startswith(
            "text/event-stream"
        ):
            head.stream_translator = ModelNameStream(ctx.model.name)  # relayed as written, but for the model

    def stream_step(self, ctx: RequestContext) -> StreamStep | None:
        stream = ctx.answer_head.stream_translator
        return None if stream is None else stream.feed  # the translator's own, one call a piece

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        answer = ctx.answer  # ctx.answer_head, inline: this runs for every piece of a stream
        if answer is None:
            raise PhaseError("answer", "the forwarder")
        if answer.streamed:
            stream = answer.stream_translator
            return chunk if stream is None else stream.feed(chunk)
        if answer.translator is not None:
            try:
                return answer.translator.response_body(chunk, ctx.routed_model.name, ctx.json_payload)
            except UpstreamUnavailable as exc:
                log_failed_attempt(ctx, ctx.served_row, "answered what could not be translated", exc)
                raise UpstreamUnavailable() from None
        if ctx.model is not None and "json" in answer.upstream_headers.get("content-type", ""):
            return with_model_name(chunk, orjson.dumps(ctx.model.name))
        return chunk

    def on_end(self, ctx: RequestContext, tail: bytes) -> bytes:
        stream = ctx.answer_head.stream_translator
        if stream is None:
            return tail
        finished = stream.finish()
        failure = getattr(stream, "failure", None)
        if failure:
            log_failed_attempt(ctx, ctx.served_row, f"ended its stream with: {failure}")
        return tail + finished if tail else finished
