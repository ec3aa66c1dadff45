"""Content policy: the organization's content rules applied to the texts of a request and of its answer.

Two steps of the chain share this module. `PromptPolicy` runs on the request, right after the access rules and
before anything is reserved: every text the model would see (modelgate/proxy/content/prompt_texts.py;
multipart text fields as they pass) is scanned; a `block` rule refuses the request (403, nothing sent, nothing
charged), a
`redact` rule rewrites the text before it leaves, a `flag` rule only records. `AnswerPolicy` runs on the
answer in the client's wire format (after translation): a whole answer is checked before it is sent; a stream
passes through a guard that holds back only the window the longest rule can span
(modelgate/proxy/content/answer_stream.py), so a match split across chunks is still caught; a block ends the
stream with an error event in the route's format, and the request is charged for what was generated up to
then.

Every finding is recorded on the request (its ledger row says blocked, redacted or flagged), counted in the
metrics by rule, action and where, and written to the audit log — the rule, route, key, system and what kind
of term matched, never the matched text.
"""

from __future__ import annotations

import time
from functools import partial

import orjson

from modelgate.domain.audit_log import Actor, NewAuditEntry
from modelgate.domain.audit_writer import AuditWriter
from modelgate.domain.content_rules import ContentScope
from modelgate.domain.errors import PolicyBlocked
from modelgate.plugins.stream_errors import stream_error_event
from modelgate.proxy.content.answer_stream import AnswerBlocked, AnswerStreamGuard
from modelgate.proxy.content.answer_texts import answer_slots
from modelgate.proxy.content.prompt_texts import prompt_slots
from modelgate.proxy.content.redaction import Hit, redact, strongest
from modelgate.proxy.observability.metrics import GatewayMetrics
from modelgate.proxy.pipeline.chain import Plugin, StreamCut, StreamStep
from modelgate.proxy.pipeline.context import AnswerHead, PhaseError, RequestContext

# The client's stream format of each route whose answers carry text.
_STREAM_WIRES = {
    "chat_completions": "chat",
    "completions": "completions",
    "responses": "responses",
    "messages": "messages",
}
_ANSWER_ROUTES = frozenset({*_STREAM_WIRES, "decisions"})
_EVENTS = {
    "block": "content_policy.blocked",
    "redact": "content_policy.redacted",
    "flag": "content_policy.flagged",
}


def hits_in(scope: ContentScope, text: str) -> list[Hit]:
    """Every match of the scope's rules in `text`, with the action of the rule that matched."""
    actions = scope.actions
    return [Hit(m.start, m.end, actions[m.rule_id], m.rule_id, m.label) for m in scope.matcher.find(text)]


def _record(ctx: RequestContext, where: str, hits: list[Hit]) -> None:
    found = ctx.content_hits
    if found is None:
        found = ctx.content_hits = []
    found.extend((where, hit) for hit in hits)


def _blocked(hit: Hit, what: str) -> PolicyBlocked:
    term = f"detector: {hit.label}" if hit.label not in ("phrase", "pattern") else f"a {hit.label}"
    return PolicyBlocked(f"{what} was blocked by content rule {hit.rule_id} of your organization ({term}).")


def _apply(ctx: RequestContext, scope: ContentScope, where: str, text: str, what: str) -> str | None:
    """The text as it may pass (None: unchanged); PolicyBlocked when a block rule matches it."""
    hits = hits_in(scope, text)
    if not hits:
        return None
    _record(ctx, where, hits)
    strongest_hit = strongest(hits)
    if strongest_hit is None:
        return None
    if strongest_hit.action == "block":
        raise _blocked(strongest_hit, what)
    return redact(text, hits) if strongest_hit.action == "redact" else None


def _scope(ctx: RequestContext, side: str) -> ContentScope | None:
    decision = ctx.decision
    if decision is None or decision.content is None:
        return None
    return getattr(decision.content, side)


class PromptPolicy(Plugin):
    """Applies content rules to the texts of a request before it leaves the gateway (see the module)."""

    name = "prompt_policy"
    essential = True
    # Reads `decision` when the policy step ran (it may be switched off: then no rule applies).
    requires = frozenset({"body_stream", "decision", "key", "payload", "route"})
    provides = frozenset({"content_hits", "payload_changed"})

    def on_request(self, ctx: RequestContext) -> None:
        scope = _scope(ctx, "prompt")
        if scope is None:
            return
        if ctx.body_stream is not None:  # multipart: each text field is checked before its bytes are relayed
            ctx.body_stream.set_text_guard(partial(_multipart_field, ctx, scope))
            return  # its parsed fields are the same texts: the guard sees them
        payload = ctx.payload
        if payload is None:
            return
        slots = prompt_slots(ctx.matched_route.name, payload)
        matcher = scope.matcher
        # Most prompts match nothing: their texts are checked at once, in one pass when they are ASCII.
        if len(slots) > 1 and matcher.joinable and not matcher.any_match("\n".join(s.text for s in slots)):
            return
        for slot in slots:
            text = slot.text
            passed = _apply(ctx, scope, "prompt", text, "The request")
            if passed is not None:
                slot.replace(passed)
                ctx.payload_changed = True


def _multipart_field(ctx: RequestContext, scope: ContentScope, name: str, value: str) -> str:
    if name == "model":  # names the model, which the access rules decide on
        return value
    passed = _apply(ctx, scope, "prompt", value, "The request")
    return value if passed is None else passed


class AnswerPolicy(Plugin):
    """Applies content rules to the answer as the client gets it (see the module); audits every finding."""

    name = "answer_policy"
    essential = True
    requires = frozenset({"answer", "decision", "envelope", "key", "model", "outcome", "route"})
    provides = frozenset({"content_hits", "outcome"})

    def __init__(self, audit: AuditWriter, metrics: GatewayMetrics) -> None:
        self._audit = audit
        self._metrics = metrics

    def on_response_head(self, ctx: RequestContext, head: AnswerHead) -> None:
        if not head.streamed or head.status >= 400:
            return
        scope = _scope(ctx, "answer")
        wire = _STREAM_WIRES.get(ctx.matched_route.name)
        if scope is None or wire is None:
            return
        if not head.upstream_headers.get("content-type", "").startswith("text/event-stream"):
            return
        head.content_guard = AnswerStreamGuard(
            wire, partial(hits_in, scope), scope.window, scope.hold, partial(_seen, ctx)
        )

    def stream_step(self, ctx: RequestContext) -> StreamStep | None:
        if ctx.answer_head.content_guard is None:  # no rule on this stream's answer: never called for it
            return None
        return partial(self.on_chunk, ctx)

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> bytes:
        answer = ctx.answer  # ctx.answer_head, inline: this runs for every piece of a stream
        if answer is None:
            raise PhaseError("answer", "the forwarder")
        guard = answer.content_guard
        if guard is not None:
            try:
                return guard.feed(chunk)
            except AnswerBlocked as blocked:
                raise self._cut(ctx, blocked) from None
        if answer.streamed or answer.status >= 400 or ctx.matched_route.name not in _ANSWER_ROUTES:
            return chunk
        scope = _scope(ctx, "answer")
        if scope is None:
            return chunk
        return self._whole_answer(ctx, scope, chunk)

    def on_end(self, ctx: RequestContext, tail: bytes) -> bytes:
        guard = ctx.answer_head.content_guard
        if guard is None:
            return tail
        try:
            return (guard.feed(tail) if tail else b"") + guard.finish()
        except AnswerBlocked as blocked:
            raise self._cut(ctx, blocked) from None

    def _cut(self, ctx: RequestContext, blocked: AnswerBlocked) -> StreamCut:
        """End the stream: what the guard released before the blocked text, then the error event."""
        ctx.outcome = "blocked"
        return StreamCut(blocked.tail + stream_error_event(ctx.envelope, _blocked(blocked.hit, "The answer")))

    def _whole_answer(self, ctx: RequestContext, scope: ContentScope, body: bytes) -> bytes:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
        if not isinstance(document, dict):
            return body
        changed = False
        for slot in answer_slots(ctx.matched_route.name, document):
            try:
                passed = _apply(ctx, scope, "answer", slot.text, "The answer")
            except PolicyBlocked:
                ctx.outcome = "blocked"  # charged: the provider generated it
                raise
            if passed is not None:
                slot.replace(passed)
                changed = True
        return orjson.dumps(document) if changed else body

    def on_complete(self, ctx: RequestContext) -> None:
        found = ctx.content_hits
        if not found or ctx.key is None:
            return
        key, at = ctx.key, time.time()
        actor = Actor("api_key", key.id, None)
        model = ctx.model.name if ctx.model is not None else None
        written: set[tuple[str, str, str, str]] = set()
        for where, hit in found:
            mark = (where, hit.rule_id, hit.action, hit.label)
            if mark in written:  # one entry per rule, action and kind of term on each side of the request
                continue
            written.add(mark)
            self._metrics.content_actions.labels(hit.rule_id, hit.action, where).inc()
            self._audit.add(
                NewAuditEntry(
                    organization_id=key.organization_id,
                    event=_EVENTS[hit.action],
                    actor=actor,
                    at=at,
                    target_id=hit.rule_id,
                    details={"where": where, "label": hit.label, "requestId": ctx.request_id, "model": model},
                    key_id=key.id,
                    system_id=key.system_id,
                    route=ctx.matched_route.name,
                )
            )


def _seen(ctx: RequestContext, hit: Hit) -> None:
    _record(ctx, "answer", [hit])
