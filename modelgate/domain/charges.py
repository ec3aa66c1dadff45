"""The money of a request, in one place: what it may cost, what it did cost, and the ledger row that says so.

Used alike by the HTTP pipeline (plugins.output_caps, billing_gate, usage_metering), realtime sessions
(proxy.realtime.billing), the background follower (proxy.state.background_follower) and the admission journal.

- **The reservation bound** (`reservation`): every prompt token the request can be billed — the body's own
  (`estimate_input_tokens`, 2 bytes a token) plus what it names but does not show (domain.hidden_input) —
  and its output allowance (the cap sent upstream x `n`: `output_cap`, `answers`), all at the dearest rates
  of the model's sheet; a media request by its units (domain.media).
- **The charge** (`charge_usage`): the usage the provider reports, priced by the sheet, never capped at the
  reservation (the truth rule, docs/billing.md). The excess over the reservation is recorded; usage beyond
  the physical bound (the context window plus the output allowance) is implausible and charged at that bound.
- **The estimate** when no usage arrives (`delivered_usage`, `prompt_estimate`): the prompt at ~4 bytes a
  token, the generated text relayed; the row says it is estimated. The crash row an admission journals is
  that prompt estimate too, whatever the reservation.
- **The ledger row** (`charge_row`): the one builder of the one row type (`domain.ledger.LedgerRow`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from modelgate.config import ModelConfig
from modelgate.domain.errors import InvalidRequest
from modelgate.domain.hidden_input import hidden_input_tokens, may_name_parts
from modelgate.domain.ledger import LedgerRow
from modelgate.domain.media import MediaKind, media_worst_case
from modelgate.domain.prices import ModelPrices
from modelgate.domain.usage import BYTES_PER_TOKEN, Usage, usage_detail

MAX_CHOICES = 128  # the most `n` the OpenAI API accepts


# -- what a request may cost ------------------------------------------------------------------------------


def estimate_input_tokens(body_size: int) -> int:
    """A safe upper estimate of prompt tokens from the body size (a token is at least ~2 bytes of JSON)."""
    return body_size // 2 + 1


def input_bound(body_size: int, payload: dict[str, Any], model: ModelConfig, carried: int) -> int:
    """The most prompt tokens a request can be billed: the body's own plus what it names but does not show
    (with hosted tools, `domain.hidden_input.hosted_tools`, its usage has no physical bound)."""
    tokens = body_size // 2 + 1  # estimate_input_tokens, inlined: this runs on every request
    # Most requests name nothing hidden: dict lookups and a look at each message's content decide it.
    if carried or "tools" in payload or "prompt" in payload or may_name_parts(payload):
        return tokens + hidden_input_tokens(payload, model, carried)
    return tokens


def _positive_int(value: object, name: str, most: int) -> int:
    """`value` (the body's `name`, present) as a positive integer of at most `most`, else 400."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(f"Invalid '{name}': expected an integer of at least 1.")
    if value > most:
        raise InvalidRequest(f"Invalid '{name}': at most {most} is allowed here, got {value}.")
    return value


def output_cap(payload: dict[str, Any], fields: tuple[str, ...], most: int) -> int:
    """The largest output cap the body names among `fields` (a provider honours one of them), 0 for none;
    400 for one that is not a positive integer of at most `most` (the model's context window)."""
    # Plain loops and comparisons (no comprehension, generator or max()): this runs on every request.
    cap = 0
    for name in fields:
        value = payload.get(name)
        if value is not None:
            value = _positive_int(value, name, most)
            if value > cap:
                cap = value
    return cap


def answers(payload: dict[str, Any], choices: tuple[str, ...]) -> int:
    """How many answers the body asks for (`n`, `best_of`, at most MAX_CHOICES): each is allowed the whole
    output cap; 1 when it names none."""
    return output_cap(payload, choices, MAX_CHOICES) or 1


def reservation(
    prices: ModelPrices,
    input_tokens: int,
    output_allowance: int,
    media: MediaKind | None = None,
    payload: dict[str, Any] | None = None,
) -> int:
    """What to reserve: the most the request can cost (a media call by its units, else by its tokens)."""
    worst = None if media is None else media_worst_case(media, payload, prices)
    return prices.worst_case(input_tokens, output_allowance) if worst is None else worst


# Appended realtime audio is counted in units of 1/48,000 s (one byte of 24 kHz mono PCM16; a byte of 8 kHz
# G.711 is 6 units) and billed as input audio tokens at 1 token per 100 ms (OpenAI gpt-4o-realtime,
# gpt-realtime).
AUDIO_UNITS_PER_SECOND = 48_000
AUDIO_INPUT_TOKENS_PER_SECOND = 10


def audio_input_tokens(audio_units: int) -> int:
    """The input audio tokens `audio_units` of appended audio are billed, rounded up."""
    return -(-audio_units * AUDIO_INPUT_TOKENS_PER_SECOND // AUDIO_UNITS_PER_SECOND)


def realtime_reservation(
    prices: ModelPrices, cap: int | None, context_tokens: int, text_bytes: int, audio_units: int = 0
) -> int:
    """The most one realtime response can cost: it re-reads the conversation (the tokens the previous
    response reported, plus the text sent since at 2 bytes a token, the audio appended since at its token rate
    (`audio_input_tokens`), plus `default_max_tokens` for the turn's speech) and generates at most its cap
    (else `default_max_tokens`)."""
    default = prices.default_max_tokens
    tokens = context_tokens + text_bytes // 2 + default
    if audio_units:
        tokens += audio_input_tokens(audio_units)
    return prices.worst_case(tokens, cap or default)


# -- what a request did cost ------------------------------------------------------------------------------


class ChargeRecord(Protocol):
    """Where a charge is written (a request's `Metering`, a realtime response's `Charge`)."""

    cost_micros: int | None
    over_reservation_micros: int
    usage_implausible: bool
    reported_cost_micros: int


@dataclass(slots=True)
class Charge:
    """The charge of one realtime response or followed background response (see `charge_usage`)."""

    cost_micros: int | None = None
    over_reservation_micros: int = 0
    usage_implausible: bool = False
    reported_cost_micros: int = 0  # the reported usage priced, when implausible (the charge is the bound)


def charge_usage(
    record: ChargeRecord,
    prices: ModelPrices,
    usage: Usage,
    reserved: int | None,
    context_window: int,
    most_output: int,
) -> int:
    """Price `usage` by the sheet into `record`, and return the cost: the truth, even past `reserved` (the
    excess recorded), except usage beyond the physical bound — more than `context_window` prompt tokens plus
    `most_output` generated (0: no bound, as for hosted tools and media) — which is charged at that bound."""
    cost = prices.cost(usage)
    if most_output and usage.input_tokens + usage.output_tokens > context_window + most_output:
        bound = prices.worst_case(context_window, most_output)
        if cost > bound:
            record.reported_cost_micros = cost
            record.usage_implausible = True
            cost = bound
    if reserved is not None and cost > reserved:
        record.over_reservation_micros = cost - reserved
    record.cost_micros = cost
    return cost


def delivered_usage(usage: Usage | None, body_size: int, relayed_tokens: int, output_allowance: int) -> Usage:
    """The usage to charge for an answer cut short or unreported (a complete one is charged the provider's
    own): at least the generated text relayed (up to the output allowance the provider was held to: one that
    ignores it reports its usage, which is then charged in full) and the prompt from the body size when
    unreported — marked estimated."""
    if output_allowance and relayed_tokens > output_allowance:
        relayed_tokens = output_allowance
    if usage is None:
        return Usage(input_tokens=body_size // BYTES_PER_TOKEN, output_tokens=relayed_tokens, estimated=True)
    if not usage.input_tokens:
        usage.input_tokens = body_size // BYTES_PER_TOKEN
        usage.estimated = True
    if relayed_tokens > usage.output_tokens:
        usage.output_tokens = relayed_tokens
        usage.estimated = True
    return usage


def prompt_estimate(body_size: int) -> int:
    """Prompt tokens the provider surely billed for a body of this size (~4 bytes a token): what a request
    charges when it ends with no usage known (the admission journal's crash row, a follow given up)."""
    return body_size // BYTES_PER_TOKEN


# -- the ledger row --------------------------------------------------------------------------------------


def charge_row(
    row_id: str,
    organization_id: str,
    key_id: str | None,
    system_id: str | None,
    model: str,
    row_key: str | None,
    request_id: str,
    status: int,
    outcome: str,
    usage: Usage | None,
    cost_micros: int,
    created_at: float,
    budgets: tuple[tuple[str, float], ...],
    content_action: str = "",
    over_reservation_micros: int = 0,
    usage_implausible: bool = False,
    estimated_input_tokens: int = 0,
) -> LedgerRow:
    """The ledger row of a request (or of one realtime response), as the spool and the writer take it: the
    token columns, media units, estimate flag and usage detail all read from `usage`; without one, a row of
    `estimated_input_tokens` prompt tokens (marked estimated when there are any) or of nothing.

    Positional, with no object in between: this runs for every request. The tuple's trailing columns are
    written only when set (see domain.ledger)."""
    if usage is not None:
        input_tokens, cached, output = usage.input_tokens, usage.cached_input_tokens, usage.output_tokens
        units = usage.images + usage.audio_seconds + usage.video_seconds
        estimated = usage.estimated
        detail = usage_detail(usage)
    else:
        input_tokens, cached, output, units, detail = estimated_input_tokens, 0, 0, 0.0, ""
        estimated = estimated_input_tokens > 0
    row = (
        row_id,
        organization_id,
        key_id,
        system_id,
        model,
        row_key,
        request_id,
        status,
        input_tokens,
        cached,
        output,
        cost_micros,
        created_at,
        units,
        outcome,
        budgets,
    )
    if detail:
        return (*row, content_action, estimated, over_reservation_micros, usage_implausible, detail)
    if over_reservation_micros or usage_implausible:
        return (*row, content_action, estimated, over_reservation_micros, usage_implausible)
    if estimated:
        return (*row, content_action, True)
    return (*row, content_action) if content_action else row
