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
from modelgate.domain.errors import InvalidRequest
from modelgate.domain.hidden_input import hidden_input_tokens, hosted_tools, may_name_parts
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.route_table import CapRule

MAX_CHOICES = 128  # the most `n` the OpenAI API accepts
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


def estimate_input_tokens(body_size: int) -> int:
    """A safe upper estimate of prompt tokens from the body size (a token is at least ~2 bytes of JSON)."""
    return body_size // 2 + 1


def _positive_int(value: object, name: str, most: int) -> int:
    """`value` (the body's `name`, present) as a positive integer of at most `most`, else 400."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(f"Invalid '{name}': expected an integer of at least 1.")
    if value > most:
        raise InvalidRequest(f"Invalid '{name}': at most {most} is allowed here, got {value}.")
    return value


def _bounded_output(ctx: RequestContext, rule: CapRule, payload: dict[str, Any], model: ModelConfig) -> int:
    """The request's output cap times its number of answers; fills in the cap it did not name."""
    # Plain loops and comparisons (no comprehension, generator or max()): this runs on every request.
    cap = 0
    for name in rule.fields:
        value = payload.get(name)
        if value is not None:
            value = _positive_int(value, name, model.max_context_tokens)
            if value > cap:
                cap = value  # a provider honours one of them; reserve for the larger
    if not cap:
        cap = rule.default or model.default_max_tokens
        payload[rule.fields[0]] = cap
        ctx.payload_changed = True
    answers = 1
    for name in rule.choices:
        value = payload.get(name)
        if value is not None:
            value = _positive_int(value, name, MAX_CHOICES)
            if value > answers:
                answers = value
    return cap * answers


def ensure_estimate(ctx: RequestContext) -> None:
    """Fill the request's token estimate once: input from the body size and what the body names but does
    not show (`domain.hidden_input`), output from its bounded cap."""
    admission = ctx.admission
    if admission.max_output_tokens or ctx.model is None:
        return
    admission.estimated_input_tokens = estimate_input_tokens(len(ctx.body))
    route = ctx.matched_route
    rule = route.cap
    if rule is not None and ctx.payload is not None and ctx.body_stream is None:
        payload = ctx.payload
        # Most requests name nothing hidden: dict lookups and a look at each message's content decide it.
        if (
            admission.carried_input_tokens
            or "tools" in payload
            or "prompt" in payload
            or may_name_parts(payload)
        ):
            admission.estimated_input_tokens += hidden_input_tokens(
                payload, ctx.model.config, admission.carried_input_tokens
            )
            admission.hosted_tools = hosted_tools(payload)
        admission.max_output_tokens = _bounded_output(ctx, rule, payload, ctx.model.config)
    elif route.kind in _NO_TOKEN_OUTPUT:
        ctx.admission.max_output_tokens = 1
    else:
        ctx.admission.max_output_tokens = ctx.model.config.default_max_tokens


class OutputCaps(Plugin):
    """400 on an output cap the model cannot honour; fills in the token estimate the later steps reserve."""

    name = "output_caps"
    requires = frozenset({"body", "body_stream", "model", "payload", "route"})
    provides = frozenset({"admission", "payload_changed"})  # the token estimate the asks are sized by
    essential = True

    def on_request(self, ctx: RequestContext) -> None:  # never waits: the chain calls it directly
        ensure_estimate(ctx)
