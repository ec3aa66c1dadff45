"""Output caps: what a request may generate, sent upstream and reserved for, so the reservation bounds it;
and the input estimate, with what the body names but does not show (`domain.hidden_input`).

A request that names no cap gets one: the model's `default_max_tokens` (16 on legacy completions, the
OpenAI default), written into the body the provider receives, so the provider can never generate more than
the gateway reserved. `n` (and `best_of` on completions) multiplies the allowance. A cap that is not a
positive integer, or exceeds the model's `max_context_tokens`, is refused with 400 before anything is
reserved or sent. This step is essential: the check holds also where the rate-limit and billing plugins,
which reserve by the cap (`ensure_estimate`), are switched off.
"""

from __future__ import annotations

from typing import Any

from modelgate.config import ModelConfig
from modelgate.domain.charges import answers, estimate_input_tokens, input_bound, output_cap
from modelgate.domain.hidden_input import hosted_tools
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.route_table import CapRule

# Request kinds whose answer is not generated text: no output-token allowance is reserved for them.
_NO_TOKEN_OUTPUT = frozenset(
    {
        "embeddings",
        "images",
        "image_edits",
        "audio_transcriptions",
        "audio_translations",
        "audio_speech",
        "videos",
    }
)


def _bounded_output(ctx: RequestContext, payload: dict[str, Any], model: ModelConfig, rule: CapRule) -> int:
    """The request's output cap times its number of answers (domain.charges); fills in the cap it did not
    name, so the provider is held to what was reserved."""
    cap = output_cap(payload, rule.fields, model.max_context_tokens)
    if not cap:
        cap = rule.default or model.default_max_tokens
        payload[rule.fields[0]] = cap
        ctx.payload_changed = True
    for name in rule.choices:  # most requests ask for one answer: no call then
        if name in payload:
            return cap * answers(payload, rule.choices)
    return cap


def ensure_estimate(ctx: RequestContext) -> None:
    """Fill the request's token estimate once (domain.charges): input from the body size and what the body
    names but does not show, output from its bounded cap."""
    admission, model, route, payload = ctx.admission, ctx.model, ctx.route, ctx.payload
    if admission.max_output_tokens or model is None or route is None:
        return
    config = model.config
    rule = route.cap
    if rule is not None and payload is not None and ctx.body_stream is None:
        admission.estimated_input_tokens = input_bound(
            len(ctx.body), payload, config, admission.carried_input_tokens
        )
        if "tools" in payload:  # the provider may run tools that feed the prompt: no physical bound
            admission.hosted_tools = hosted_tools(payload)
        admission.max_output_tokens = _bounded_output(ctx, payload, config, rule)
        return
    admission.estimated_input_tokens = estimate_input_tokens(len(ctx.body))
    if route.kind in _NO_TOKEN_OUTPUT:
        admission.max_output_tokens = 1
    else:
        admission.max_output_tokens = config.default_max_tokens


class OutputCaps(Plugin):
    """400 on an output cap the model cannot honour; fills in the token estimate the later steps reserve."""

    name = "output_caps"
    requires = frozenset({"body", "body_stream", "model", "payload", "route"})
    provides = frozenset({"admission", "payload_changed"})  # the token estimate the asks are sized by
    essential = True

    def on_request(self, ctx: RequestContext) -> None:  # never waits: the chain calls it directly
        ensure_estimate(ctx)
