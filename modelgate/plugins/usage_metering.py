"""Usage metering: token usage is read from the upstream answer as it passes, and every request writes a
ledger row (organization, key, system, model, row, tokens by kind, cost, request id, status, time).

For OpenAI-style streams whose client did not ask for usage, the gateway asks the upstream for it
(`stream_options.include_usage`) and marks it withheld: plugins.usage_filter keeps it from the client.
"""

from __future__ import annotations

import time
from functools import partial

import orjson

from modelgate.domain.background_responses import BackgroundFollow
from modelgate.domain.charges import charge_row, prompt_estimate
from modelgate.domain.counters import Counters
from modelgate.domain.ledger import CRASHED, LedgerWriter
from modelgate.domain.media import MediaUsageReader
from modelgate.domain.overruns import Overrun, OverrunReport
from modelgate.domain.usage import StreamUsageScanner, Usage, generated_tokens, tokens_of, usage_of_body
from modelgate.plugins.billing_gate import final_cost
from modelgate.proxy.pipeline.chain import Plugin, StreamStep
from modelgate.proxy.pipeline.context import Metering, PhaseError, RequestContext, content_action
from modelgate.proxy.state.background_follower import BackgroundFollower
from modelgate.proxy.state.objects import is_object_id


def _usage_read(metering: Metering, usage: Usage) -> None:
    metering.usage = usage


class UsageMetering(Plugin):
    """Reads usage from answers and records every request in the ledger."""

    name = "usage_metering"
    requires = frozenset(
        {
            "admission",
            "answer",
            "answered_status",
            "body",
            "body_stream",
            "bytes_sent",
            "content_hits",
            "key",
            "model",
            "outcome",
            "payload",
            "route",
            "row",
            "status",
            "stream",
        }
    )
    provides = frozenset({"metering", "payload_changed"})

    def __init__(
        self,
        ledger: LedgerWriter,
        counters: Counters,
        overruns: OverrunReport | None = None,
        background: BackgroundFollower | None = None,
    ) -> None:
        self._ledger = ledger
        self._counters = counters
        self._overruns = overruns
        self._background = background

    def on_request(self, ctx: RequestContext) -> None:
        if ctx.model is None:
            return
        route = ctx.matched_route
        reserved = ctx.admission.reserved_micros
        if reserved is not None:  # admitted by the billing gate (the step before this one)
            ctx.metering.ledger_row_id = self._admit(ctx, reserved)
            if route.creates == "response" and not ctx.stream and self._background is not None:
                if ctx.json_payload.get("background") is True:
                    ctx.metering.background_id = ""  # its answer says whether it is still to run
        if route.media is not None:
            # Media answers are charged per unit (image, second) or per request, never by bytes seen.
            upload = ctx.body_stream.file_probe if ctx.body_stream is not None else None
            ctx.metering.scanner = MediaUsageReader(route.media, ctx.payload, upload)
            return
        if ctx.stream:
            ctx.metering.scanner = StreamUsageScanner(route.final_events)
            if route.usage_on_request:
                payload = ctx.json_payload
                options = payload.get("stream_options")
                asked = isinstance(options, dict) and options.get("include_usage") is True
                if not asked:
                    payload["stream_options"] = {
                        **(options if isinstance(options, dict) else {}),
                        "include_usage": True,
                    }
                    ctx.payload_changed = True
                    ctx.metering.usage_withheld = True

    def stream_step(self, ctx: RequestContext) -> StreamStep | None:
        metering = ctx.metering
        scanner = metering.scanner
        if not isinstance(scanner, StreamUsageScanner):
            return partial(self.on_chunk, ctx)
        # The scanner's own feed is the step; what `on_chunk` looks at after each piece, it tells once.
        on_final = partial(self._final_event_passes, ctx) if metering.final_after < 0 else None
        scanner.watch(partial(_usage_read, metering), on_final)
        return scanner.feed

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        metering = ctx.metering
        scanner = metering.scanner
        if scanner is not None:
            scanner.feed(chunk)
            if scanner.usage is not None:
                metering.usage = scanner.usage
            if metering.final_after < 0 and isinstance(scanner, StreamUsageScanner) and scanner.final:
                self._final_event_passes(ctx)
        elif ctx.model is not None and ctx.status == 200:
            ctx.metering.usage = usage_of_body(chunk)
            if ctx.metering.background_id == "":
                ctx.metering.background_id = pending_background_id(chunk)
            if ctx.metering.usage is None:  # charged by the text it carries
                ctx.metering.content_tokens = tokens_of(*generated_tokens(chunk))
        return chunk  # read, never changed: the upstream's own bytes

    @staticmethod
    def _final_event_passes(ctx: RequestContext) -> None:
        """The piece carrying the stream's final event goes on to the client: once it is written, the stream
        is complete whatever the client does next (`Metering.outcome_when_left`). Only a stream relayed in
        its provider's own format: a translated one ends with the translator's final event, not the
        provider's."""
        answer = ctx.answer
        if answer is not None and answer.translator is None:
            ctx.metering.final_after = ctx.bytes_sent

    def on_complete(self, ctx: RequestContext) -> None:
        scanner = ctx.metering.scanner
        if isinstance(scanner, StreamUsageScanner):
            scanner.unwatch()  # a stream that ended before its usage or final event: no cycle left behind
        if ctx.model is None or ctx.key is None:  # refused before a model was known: nothing was used
            return
        if ctx.matched_route.websocket and ctx.status == 101:  # one row per response, written by the relay
            return
        if ctx.metering.background_id and ctx.answered_status == 200:
            self._follow_background(ctx)  # its row is written once its final usage is known
            return
        cost = final_cost(ctx)
        usage = ctx.metering.usage  # final_cost settles it
        key = ctx.key
        now = time.time()
        row_id = ctx.metering.ledger_row_id
        admitted = row_id is not None
        if not admitted:
            row_id = self._ledger.new_row_id(now)
        metering = ctx.metering
        row = charge_row(
            row_id,
            key.organization_id,
            key.id,
            key.system_id,
            ctx.model.name,
            ctx.row.key if ctx.row else None,
            ctx.request_id,
            ctx.answered_status or ctx.status,
            _outcome(ctx),
            usage,
            cost,
            now,
            tuple(ctx.admission.charged_budgets),
            content_action(ctx.content_hits) if ctx.content_hits else "",
            metering.over_reservation_micros,
            metering.usage_implausible,
        )
        if ctx.metering.over_reservation_micros or ctx.metering.usage_implausible:
            self._report_overrun(ctx, cost)
        if ctx.admission.reservations:
            # Spooled once its settlement is in the live counter (a crash in between is recovered by row id).
            self._counters.after_written(partial(self._ledger.add_row, row, admitted))
        else:
            self._ledger.add_row(row, admitted)

    def _report_overrun(self, ctx: RequestContext, cost: int) -> None:
        if self._overruns is None:
            return
        key, metering = ctx.api_key, ctx.metering
        self._overruns.report(
            Overrun(
                key.organization_id,
                key.id,
                key.system_id,
                ctx.matched_route.name,
                ctx.routed_model.name,
                ctx.request_id,
                ctx.admission.reserved_micros or 0,
                cost,
                metering.over_reservation_micros,
                metering.usage_implausible,
                metering.reported_cost_micros,
            )
        )

    def _follow_background(self, ctx: RequestContext) -> None:
        """Hand a queued background response to the follower, with the reservations it keeps and what its
        journal admission charges should this process die first (as `_admit` computed it)."""
        key, model, metering, admission = ctx.api_key, ctx.routed_model, ctx.metering, ctx.admission
        follower, response_id, row_id = self._background, metering.background_id, metering.ledger_row_id
        reserved = admission.reserved_micros
        # Only an admitted background response (a ledger row id and a reservation) is marked to follow.
        if follower is None or not response_id or row_id is None or reserved is None:
            raise PhaseError("metering.background_id", "an admitted background response")
        crash_input = prompt_estimate(len(ctx.body))
        follower.follow(
            BackgroundFollow(
                response_id,
                row_id,
                key.organization_id,
                key.id,
                key.system_id,
                model.name,
                ctx.served_row.key,
                ctx.request_id,
                tuple(admission.charged_budgets),
                model.prices.prompt_cost(crash_input),
                crash_input,
                time.time(),
                reserved,
                0 if admission.hosted_tools else admission.max_output_tokens,
                list(admission.reservations),
            )
        )

    def _admit(self, ctx: RequestContext, reserved: int) -> str:
        """Journal the request before it is forwarded; returns its row id. The row charged should the
        process die before the request completes is the estimate of its prompt, which the provider surely
        billed (domain.charges.prompt_estimate), said estimated on the row and, like any charge, not capped
        at the reservation (the excess recorded). A free route (a realtime secret's mint, a retrieve) costs
        nothing, and its crash row nothing either."""
        key = ctx.api_key
        model = ctx.routed_model
        now = time.time()
        row_id = self._ledger.new_row_id(now)
        free = ctx.matched_route.free
        input_tokens = 0 if free else prompt_estimate(len(ctx.body))
        cost = 0 if free else model.prices.prompt_cost(input_tokens)
        self._ledger.admit_row(
            charge_row(
                row_id,
                key.organization_id,
                key.id,
                key.system_id,
                model.name,
                None,
                ctx.request_id,
                0,
                CRASHED,
                None,
                cost,
                now,
                tuple(ctx.admission.charged_budgets),
                content_action(ctx.content_hits) if ctx.content_hits else "",
                cost - reserved if cost > reserved else 0,
                False,
                input_tokens,
            )
        )
        return row_id


def pending_background_id(answer: bytes) -> str | None:
    """The id of a background response whose creation answer says it is still to run, else None."""
    try:
        document = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict) or document.get("status") not in ("queued", "in_progress"):
        return None
    response_id = document.get("id")
    return response_id if is_object_id(response_id) else None


def _outcome(ctx: RequestContext) -> str:
    """How the request ended, for its ledger row."""
    if ctx.answered_status or ctx.metering.abandoned:
        return ctx.outcome
    # Answered by the gateway itself (a realtime secret, a video list): complete, and free.
    return "completed" if 0 < ctx.status < 400 else "refused"
