"""The typed request context every plugin and the forwarder share for one model API request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from modelgate.domain.counters import MoneyAsk, WindowAsk
from modelgate.domain.usage import Usage
from modelgate.proxy.content.redaction import strongest
from modelgate.proxy.pipeline.envelopes import Envelope

if TYPE_CHECKING:
    from modelgate.domain.answer_filters import ProviderPriceFilter
    from modelgate.domain.media import MediaUsageReader
    from modelgate.domain.policy_decisions import CompiledPolicy, Decision, PolicyRule
    from modelgate.domain.usage import StreamUsageScanner
    from modelgate.proxy.content.answer_stream import AnswerStreamGuard
    from modelgate.proxy.content.redaction import Hit
    from modelgate.proxy.http.front_request import FrontRequest
    from modelgate.proxy.http.multipart import StreamedMultipart
    from modelgate.proxy.pipeline.route_table import Route
    from modelgate.proxy.realtime.secrets import RealtimeClaim
    from modelgate.proxy.state.keys import KeyRecord
    from modelgate.proxy.translation.base import StreamTranslator, Translator
    from modelgate.proxy.upstream.model_rows import ModelEntry, RoutingRow


@dataclass(slots=True)
class AnswerHead:
    """An upstream answer as the response phase sees it (`ctx.answer`): the status and headers going to the
    client (plugins may change both in `on_response_head`), the provider's own headers, whether it is
    relayed piece by piece, and the translator of a row that speaks another wire format."""

    status: int
    headers: dict[str, str]
    upstream_headers: Mapping[str, str]
    streamed: bool  # relayed piece by piece (a stream or media); else one whole body
    translator: Translator | None = None
    # The response steps' own state for this answer:
    stream_translator: StreamTranslator | None = None  # plugins.translation, for a streamed answer
    usage_filter: ProviderPriceFilter | None = None  # plugins.usage_filter
    content_guard: AnswerStreamGuard | None = None  # plugins.content_policy, for a streamed answer


@dataclass(slots=True)
class AdmissionState:
    """What a request asks of the shared counters and what it holds once admitted.

    The request id, rate-limit and billing steps record the asks (`plugins.admission.pending`); the
    admission step takes them all at once (in Redis: one script) and records what is held, which the
    completion phase gives back or settles.
    """

    claim: str | None = None  # the shared request id claim
    windows: list[WindowAsk] = field(default_factory=list)  # the key's and organization's RPM, then TPM
    first_tpm: int = 0  # index of the first token window in `windows`
    key_rpm: int = 0  # the key's own limits, reported on the answer (0: none)
    key_tpm: int = 0
    money: list[MoneyAsk] = field(default_factory=list)  # the balance, then one per budget
    budgets: list[tuple[PolicyRule, float]] = field(default_factory=list)  # (rule, period) per budget
    taken: bool = False  # admitted: everything asked is held until the request completes
    claimed_request_id: bool = False  # the request id, claimed in this process (plugins.request_id)
    # The token estimate the asks were sized by (plugins.output_caps).
    estimated_input_tokens: int = 0  # the body's own, plus the input it names but does not show
    max_output_tokens: int = 0
    # The context a `previous_response_id` or `conversation` re-reads (plugins.object_binding): the tokens
    # its last response reported, else the model's context window; 0 when the request names none.
    carried_input_tokens: int = 0
    # The request lets the provider run tools that feed the prompt (web search, ...): the usage it can bill
    # has no physical bound (domain.charges.charge_usage).
    hosted_tools: bool = False
    # Held once taken:
    reservations: list[tuple[str, int]] = field(default_factory=list)  # (money counter, amount)
    reserved_micros: int | None = None  # the balance reservation: the most this request may be charged
    charged_budgets: list[tuple[str, float]] = field(default_factory=list)  # (rule id, period start)
    token_windows: list[tuple[str, int, int]] = field(default_factory=list)  # corrected to the real usage

    @property
    def asked(self) -> bool:
        """A step recorded an ask: the admission step has something to take."""
        return bool(self.claim or self.windows or self.money)


@dataclass(slots=True)
class Metering:
    """What the request used and costs (plugins.usage_metering reads it; plugins.billing_gate prices it)."""

    usage: Usage | None = None
    scanner: StreamUsageScanner | MediaUsageReader | None = None  # reads usage from the answer as it passes
    # Usage the gateway asked the provider for on the client's behalf (stream_options.include_usage):
    # withheld from the client (plugins.usage_filter).
    usage_withheld: bool = False
    content_tokens: int = 0  # estimated output of a whole answer that reported no usage
    cost_micros: int | None = None
    ledger_row_id: str | None = None  # the id its ledger row takes, given when its admission was journaled
    # Set by `plugins.billing_gate.final_cost`: charged past the reservation by this much; the reported usage
    # was beyond the physical bound (charged at the bound) and what it would have cost.
    over_reservation_micros: int = 0
    usage_implausible: bool = False
    reported_cost_micros: int = 0
    # A non-streamed call let go of after it was sent, before its answer came (its client left with
    # `[billing] abandoned_calls = "cancel"`, or a graceful stop cut it): charged the estimate of its prompt.
    abandoned: bool = False
    # A background response (`background: true`, not streamed): "" while its answer is awaited, then the id
    # of one still queued or in progress, which is followed to its final usage and charged then
    # (modelgate/proxy/state/background_follower.py); None for every other request.
    background_id: str | None = None
    # What the client had been sent (`ctx.bytes_sent`) when the piece carrying a stream's final event
    # passed the metering (plugins.usage_metering; -1: not yet). Once more than that went out, the final
    # event reached the client: the stream is complete, whatever the client does next.
    final_after: int = -1

    def outcome_when_left(self, bytes_sent: int, otherwise: str) -> str:
        """How a request whose client left after `bytes_sent` bytes of its answer ended: `completed` if the
        stream's final event had reached the client, else `otherwise`."""
        return "completed" if 0 <= self.final_after < bytes_sent else otherwise


class PhaseError(RuntimeError):
    """A field of the request context read before the step that fills it ran: a bug in the chain's order or
    in a step's `requires`, never the client's doing (the request is answered 500 internal_error)."""

    def __init__(self, field_name: str, filled_by: str) -> None:
        super().__init__(f"ctx.{field_name} read before {filled_by} filled it in")


@dataclass(slots=True)
class RequestContext:
    """What the chain knows about one request; filled in phase by phase.

    A field an earlier phase fills in is None until then (a refused request's completion phase sees
    which ones were). A step that runs after that phase reads it through its checked accessor instead
    (`matched_route`, `api_key`, `routed_model`, `json_payload`, `served_row`, `answer_head`): typed
    without None, raising PhaseError if read too early.
    """

    request: web.Request | FrontRequest  # aiohttp's, or the lean front's (modelgate/proxy/http/front.py)
    request_id: str
    started: float
    route: Route | None = None
    object_id: str | None = None
    envelope: Envelope = Envelope.A
    key: KeyRecord | None = None
    body: bytes = b""
    body_stream: StreamedMultipart | None = None  # a multipart body relayed as it arrives; `body` stays b""
    payload: dict[str, Any] | None = None
    payload_changed: bool = False
    model: ModelEntry | None = None
    rows: list[RoutingRow] = field(default_factory=list)
    stream: bool = False
    row: RoutingRow | None = None
    # the fingerprint of the provider key that served it (modelgate/proxy/upstream/key_ring.py)
    credential: str = ""
    status: int = 0
    bytes_sent: int = 0
    error: Exception | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    policy: CompiledPolicy | None = None  # the organization's rules (plugins.policy)
    decision: Decision | None = None  # what they say for this key, system and model
    admission: AdmissionState = field(default_factory=AdmissionState)
    metering: Metering = field(default_factory=Metering)
    # The success status of an upstream answer whose relay began (0: none): such a request is charged for
    # what it delivered, however it ended.
    answered_status: int = 0
    # How it ended once answered: completed (read to its end, or its final event reached the client:
    # `Metering.final_after`), client_closed,
    # upstream_error (the provider broke off), shutdown (cut by a graceful stop), internal_error (a step of
    # the gateway's failed mid-stream).
    outcome: str = ""
    answer: AnswerHead | None = None  # set once a row answered (proxy.pipeline.forward)
    bound_object: str | None = None
    scan_tail: bytes = b""
    attempts: int = 0
    realtime: RealtimeClaim | None = None  # the client secret a realtime connect claimed
    # Observability: when the first byte of an upstream answer went to the client (perf_counter), and
    # each row that failed during this request with why ("unreachable", "http_503", ...).
    first_byte_at: float | None = None
    row_failures: list[tuple[RoutingRow, str]] = field(default_factory=list)
    # What content rules found (plugins.content_policy): (where, hit) with where "prompt" or "answer"; None
    # until the first one, so a request no rule touches allocates nothing.
    content_hits: list[tuple[str, Hit]] | None = None

    # The checked accessors: one attribute read and one comparison, no allocation (they are on the hot path).
    @property
    def matched_route(self) -> Route:
        """`route`, for the steps after route_support (which refuses a request no route serves)."""
        route = self.route
        if route is None:
            raise PhaseError("route", "route_support")
        return route

    @property
    def api_key(self) -> KeyRecord:
        """`key`, for the steps after auth (which refuses a request without a valid key)."""
        key = self.key
        if key is None:
            raise PhaseError("key", "auth")
        return key

    @property
    def routed_model(self) -> ModelEntry:
        """`model`, for what runs only once model_routing (or object_binding) named it: a route without a
        model leaves it None, and the steps that read it check that first."""
        model = self.model
        if model is None:
            raise PhaseError("model", "model_routing")
        return model

    @property
    def json_payload(self) -> dict[str, Any]:
        """`payload`, for a route whose body is JSON: body_limits parsed it (or refused the request). A
        multipart body or a route without one leaves it None."""
        payload = self.payload
        if payload is None:
            raise PhaseError("payload", "body_limits")
        return payload

    @property
    def served_row(self) -> RoutingRow:
        """`row`, for the response phase and what follows an answer: the row that answered."""
        row = self.row
        if row is None:
            raise PhaseError("row", "the forwarder")
        return row

    @property
    def answer_head(self) -> AnswerHead:
        """`answer`, for the response phase (the forwarder sets it before the first response hook)."""
        answer = self.answer
        if answer is None:
            raise PhaseError("answer", "the forwarder")
        return answer

    def upstream_body(self) -> bytes:
        """The body to send upstream: the client's bytes unless a plugin changed the payload."""
        if self.payload_changed and self.payload is not None:
            return orjson.dumps(self.payload)
        return self.body


_CONTENT_ACTIONS = {"block": "blocked", "redact": "redacted", "flag": "flagged"}


def content_action(hits: list[tuple[str, Hit]]) -> str:
    """What content rules did to a request (its ledger row): the strongest of blocked, redacted, flagged"""
    found = strongest([hit for _, hit in hits])
    return _CONTENT_ACTIONS[found.action] if found else ""
