"""Usage metering: usage is read from the answer as it passes, and every request with a model and a key
writes one ledger row; streams get their usage asked for, and kept from a client that did not ask."""

from __future__ import annotations

import orjson

from modelgate.domain.ledger import CRASHED, LedgerRow
from modelgate.plugins.admission import Admission
from modelgate.plugins.billing_gate import BillingGate
from modelgate.plugins.usage_metering import UsageMetering
from modelgate.proxy.content.redaction import Hit
from modelgate.proxy.pipeline.context import RequestContext, Usage
from modelgate.proxy.translation import translator_for
from tests.support.plugin_context import (
    CHAT,
    PluginServices,
    StoredKey,
    add_policy_rule,
    answer_head,
    answered,
    context_before,
    request_context,
    run_hook,
)

ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }
)


async def _ledger(services: PluginServices) -> list[dict]:
    await services.ledger.flush()
    return await services.db.fetch(
        "SELECT id, organization_id, key_id, model, row_key, request_id, status, input_tokens, output_tokens,"
        " cost_micros, outcome FROM usage_ledger"
    )


async def test_an_answer_writes_one_ledger_row_with_its_usage_and_cost(
    services: PluginServices, key: StoredKey
) -> None:
    plugin = UsageMetering(services.ledger, services.counters)
    ctx = await context_before("usage_metering", services, payload=CHAT, key=key.record)
    plugin.on_request(ctx)
    answered(ctx, body=ANSWER)

    plugin.on_chunk(ctx, ANSWER)
    plugin.on_complete(ctx)

    assert ctx.metering.usage == Usage(input_tokens=12, output_tokens=5)
    (row,) = await _ledger(services)
    assert {
        name: row[name] for name in ("key_id", "model", "row_key", "request_id", "status", "outcome")
    } == {
        "key_id": key.record.id,
        "model": "gpt-test",
        "row_key": "openai/gpt-test-2025@openai.test",
        "request_id": ctx.request_id,
        "status": 200,
        "outcome": "completed",
    }
    assert (row["input_tokens"], row["output_tokens"], row["cost_micros"]) == (12, 5, 12 * 2 + 5 * 10)


async def test_a_stream_whose_client_did_not_ask_for_usage_asks_for_it_and_hides_it(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("usage_metering", services, payload={**CHAT, "stream": True}, key=key.record)

    UsageMetering(services.ledger, services.counters).on_request(ctx)

    assert orjson.loads(ctx.upstream_body())["stream_options"] == {"include_usage": True}
    assert ctx.metering.usage_withheld  # plugins.usage_filter keeps it from the client


async def test_a_stream_whose_client_asked_for_usage_is_left_as_sent(
    services: PluginServices, key: StoredKey
) -> None:
    payload = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    ctx = await context_before("usage_metering", services, payload=payload, key=key.record)

    UsageMetering(services.ledger, services.counters).on_request(ctx)

    assert not ctx.payload_changed
    assert not ctx.metering.usage_withheld


async def test_an_admitted_request_is_journaled_and_its_row_takes_that_id(
    services: PluginServices, key: StoredKey
) -> None:
    plugin = UsageMetering(services.ledger, services.counters)
    ctx = await context_before("billing_gate", services, payload=CHAT, key=key.record)
    await run_hook(BillingGate(services.accounts).on_request(ctx))
    await run_hook(Admission(services.counters).on_request(ctx))

    plugin.on_request(ctx)
    assert ctx.metering.ledger_row_id is not None and services.ledger.admitted == 1
    answered(ctx, body=ANSWER)
    plugin.on_chunk(ctx, ANSWER)
    plugin.on_complete(ctx)

    assert services.ledger.admitted == 0
    assert [row["id"] for row in await _ledger(services)] == [ctx.metering.ledger_row_id]


async def test_a_request_refused_before_any_answer_is_recorded_free(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("usage_metering", services, payload=CHAT, key=key.record)
    plugin = UsageMetering(services.ledger, services.counters)
    plugin.on_request(ctx)
    ctx.status = 429  # a later step refused it

    plugin.on_complete(ctx)

    ((status, outcome, cost),) = [
        (r["status"], r["outcome"], r["cost_micros"]) for r in await _ledger(services)
    ]
    assert (status, outcome, cost) == (429, "refused", 0)


async def test_a_request_that_never_named_a_model_writes_no_row(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("usage_metering", services, method="GET", path="/v1/models", key=key.record)
    plugin = UsageMetering(services.ledger, services.counters)
    plugin.on_request(ctx)
    ctx.status = 200

    plugin.on_complete(ctx)

    assert await _ledger(services) == []


async def test_a_request_outside_the_reference_completes_without_a_ledger_row(
    services: PluginServices,
) -> None:
    ctx = request_context("POST", "/v1/assistants", body={"model": "gpt-test"})
    ctx.status = 404  # route support refused it: no route, no key, no model

    UsageMetering(services.ledger, services.counters).on_complete(ctx)

    await services.ledger.flush()
    assert await services.db.fetch("SELECT id FROM usage_ledger") == []


async def _admitted(services: PluginServices, key: StoredKey) -> RequestContext:
    """A request admitted with a budget charged and a content rule's hit in its prompt."""
    await add_policy_rule(services, key.record, budget_usd=1.0, budget_period="month")
    ctx = await context_before("billing_gate", services, payload=CHAT, key=key.record)
    await run_hook(BillingGate(services.accounts).on_request(ctx))
    await run_hook(Admission(services.counters).on_request(ctx))
    ctx.content_hits = [("prompt", Hit(0, 4, "flag", "pol_1", "phrase"))]
    return ctx


def _spied(services: PluginServices) -> tuple[list[LedgerRow], list[LedgerRow]]:
    """The rows the ledger is handed (admissions, completed rows), as it is handed them."""
    admissions: list[LedgerRow] = []
    rows: list[LedgerRow] = []
    ledger = services.ledger
    admit_row, add_row = ledger.admit_row, ledger.add_row
    ledger.admit_row = lambda row: (admissions.append(row), admit_row(row))[1]  # type: ignore[method-assign]
    ledger.add_row = lambda row, admitted: (rows.append(row), add_row(row, admitted))[1]  # type: ignore[method-assign]
    return admissions, rows


def _line(row: LedgerRow) -> bytes:
    """A row as its spool line: equal rows of unequal types (0 and 0.0, 1 and True) differ here."""
    return orjson.dumps(row)


async def test_an_admission_journals_the_estimate_of_its_prompt_as_its_crash_row(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _admitted(services, key)
    admissions, _ = _spied(services)

    UsageMetering(services.ledger, services.counters).on_request(ctx)

    (row,) = admissions
    tokens = len(ctx.body) // 4
    assert ctx.admission.charged_budgets and row[0] == ctx.metering.ledger_row_id
    # status, tokens (input, cached, output), cost, outcome; said estimated, within the reservation
    assert (row[7], row[8], row[9], row[10], row[11], row[14]) == (
        0,
        tokens,
        0,
        0,
        ctx.model.prices.prompt_cost(tokens),
        CRASHED,
    )
    assert row[15] == tuple(ctx.admission.charged_budgets) and row[16:] == ("flagged", True)


async def test_a_free_route_journals_a_crash_row_that_costs_nothing(
    services: PluginServices, key: StoredKey
) -> None:
    """A realtime secret's mint costs nothing, and so does its crash row (the conservation audit found a
    mint cut by a SIGKILL charged its prompt's estimate)."""
    ctx = await context_before(
        "billing_gate",
        services,
        path="/v1/realtime/client_secrets",
        payload={"model": "gpt-test", "session": {"type": "realtime", "model": "gpt-test"}},
        key=key.record,
    )
    await run_hook(BillingGate(services.accounts).on_request(ctx))
    await run_hook(Admission(services.counters).on_request(ctx))
    admissions, _ = _spied(services)

    UsageMetering(services.ledger, services.counters).on_request(ctx)

    (row,) = admissions
    assert ctx.matched_route.free and row[0] == ctx.metering.ledger_row_id
    # status, tokens (input, cached, output), cost, outcome
    assert (row[7], row[8], row[9], row[10], row[11], row[14]) == (0, 0, 0, 0, 0, CRASHED)


async def test_a_completed_row_carries_its_usage_cost_budgets_and_content_action(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _admitted(services, key)
    plugin = UsageMetering(services.ledger, services.counters)
    _, rows = _spied(services)
    plugin.on_request(ctx)
    answered(ctx, body=ANSWER)
    ctx.outcome = "completed"

    plugin.on_chunk(ctx, ANSWER)
    plugin.on_complete(ctx)

    (row,) = rows
    assert row[0] == ctx.metering.ledger_row_id and row[5] == ctx.row.key
    assert (row[7], row[8], row[9], row[10], row[11], row[14]) == (
        200,
        12,
        0,
        5,
        ctx.metering.cost_micros,
        "completed",
    )
    assert row[15] and row[16:] == ("flagged",)  # a budget charged, and the content rule's action


async def test_a_row_of_estimated_usage_says_so(services: PluginServices, key: StoredKey) -> None:
    ctx = await context_before("usage_metering", services, payload=CHAT, key=key.record)
    plugin = UsageMetering(services.ledger, services.counters)
    _, rows = _spied(services)
    plugin.on_request(ctx)
    answered(ctx, body=b"{}")
    ctx.outcome = "client_closed"  # cut short, with no usage reported: estimated

    plugin.on_complete(ctx)

    (row,) = rows
    assert ctx.metering.usage.estimated
    assert (row[8], row[14], row[16:]) == (len(ctx.body) // 4, "client_closed", ("", True))


# -- the stream's final event: where it passed, and how a stream its client left ends -------------------

_CONTENT = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
_DONE = b"data: [DONE]\n\n"


async def _streaming(services: PluginServices, key: StoredKey, translated: bool = False) -> RequestContext:
    ctx = await context_before("usage_metering", services, payload={**CHAT, "stream": True}, key=key.record)
    UsageMetering(services.ledger, services.counters).on_request(ctx)
    head = answer_head(ctx, content_type="text/event-stream", streamed=True)
    if translated:
        head.translator = translator_for("messages", "openai", False)
    return ctx


async def test_a_stream_left_before_its_final_event_was_written_is_client_closed(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _streaming(services, key)
    plugin = UsageMetering(services.ledger, services.counters)
    plugin.on_chunk(ctx, _CONTENT)
    ctx.bytes_sent += len(_CONTENT)  # written
    plugin.on_chunk(ctx, _DONE)  # the final event passes the metering; its write then fails

    assert ctx.metering.final_after == len(_CONTENT)
    assert ctx.metering.outcome_when_left(ctx.bytes_sent, "client_closed") == "client_closed"


async def test_a_stream_left_once_its_final_event_was_written_is_completed(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _streaming(services, key)
    plugin = UsageMetering(services.ledger, services.counters)
    plugin.on_chunk(ctx, _CONTENT + _DONE)
    ctx.bytes_sent += len(_CONTENT + _DONE)  # written: the client has the final event, then leaves

    assert ctx.metering.outcome_when_left(ctx.bytes_sent, "client_closed") == "completed"
    assert ctx.metering.outcome_when_left(ctx.bytes_sent, "shutdown") == "completed"


async def test_a_translated_stream_is_not_completed_by_the_providers_final_event(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _streaming(services, key, translated=True)
    plugin = UsageMetering(services.ledger, services.counters)
    plugin.on_chunk(
        ctx, _CONTENT + _DONE
    )  # the provider's final event; the client's comes from the translator
    ctx.bytes_sent += len(_CONTENT)

    assert ctx.metering.final_after == -1
    assert ctx.metering.outcome_when_left(ctx.bytes_sent, "client_closed") == "client_closed"
