"""The charge is the truth and the reservation bounds it (issue #32), through the real gateway on both storage
backends and both counter backends, with a fake provider that reports the usage it bills.

Prices as the issue's (2.5 USD per million input tokens, 1.25 cached, 10 output): a token is 2.5 / 1.25 /
10 micro-units, a bill `ceil(uncached x 2.5 + cached x 1.25 + output x 10)`. Request bodies are sent raw,
so the reservation is known to the byte: `ceil((len(body) // 2 + 1 + hidden) x 2.5 + cap x n x 10)`, where
`hidden` is what the body names but does not show (docs/billing.md).
"""

from __future__ import annotations

import asyncio
import math
import re
import secrets
from collections.abc import Iterator

import httpx
import orjson
import pytest

from modelgate.storage import open_database
from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import Tenant, register_tenant

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
CONTEXT = 400_000  # max_context_tokens of the model
CAP = 100  # default_max_tokens: the cap sent when a request names none
IMAGE_MOST = 85 + 8 * 170  # OpenAI's tile formula, detail high or unknown: base + 8 tiles
IMAGE_LOW = 85
LEDGER_TIMEOUT = 15.0


def truth_toml(upstream: FakeUpstream) -> str:
    return f"""
[[providers]]
name = "fake-openai"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[models]]
name = "truth"
kinds = ["chat", "responses"]
default_max_tokens = {CAP}
max_context_tokens = {CONTEXT}
[[models.rows]]
provider = "fake-openai"
[models.prices]
input_per_mtok = 2.5
cached_input_per_mtok = 1.25
output_per_mtok = 10.0
"""


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream("truth") as fake:
        yield fake


def bill(input_tokens: int, output_tokens: int, cached: int = 0) -> int:
    """What the provider bills for this usage, by hand from the price sheet."""
    return math.ceil((input_tokens - cached) * 2.5 + cached * 1.25 + output_tokens * 10 - 1e-9)


def reservation(body: bytes, hidden: int = 0, cap: int = CAP) -> int:
    return math.ceil((len(body) // 2 + 1 + hidden) * 2.5 + cap * 10)


def chat_usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def responses_usage(input_tokens: int, output_tokens: int) -> dict:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def body_of(payload: dict) -> bytes:
    return orjson.dumps(payload)


def send(base_url: str, tenant: Tenant, path: str, body: bytes) -> tuple[httpx.Response, str]:
    request_id = f"truth-{secrets.token_hex(8)}"
    reply = httpx.post(
        f"{base_url}{path}",
        content=body,
        headers={
            "authorization": f"Bearer {tenant.api_key}",
            "content-type": "application/json",
            "x-request-id": request_id,
        },
        timeout=30,
    )
    return reply, request_id


async def _row(storage_url: str, request_id: str) -> dict:
    db = await open_database(storage_url)
    try:
        deadline = asyncio.get_running_loop().time() + LEDGER_TIMEOUT
        while True:
            row = await db.fetchrow(
                "SELECT cost_micros, input_tokens, output_tokens, outcome, usage_estimated,"
                " over_reservation_micros, usage_implausible, organization_id FROM usage_ledger"
                " WHERE request_id = $1",
                request_id,
            )
            if row is not None or asyncio.get_running_loop().time() > deadline:
                assert row is not None, f"no ledger row for {request_id}"
                return dict(row)
            await asyncio.sleep(0.05)  # polling the flushed ledger, bounded by the deadline
    finally:
        await db.close()


def ledger_row(storage_url: str, request_id: str) -> dict:
    return asyncio.run(_row(storage_url, request_id))


async def _stored(storage_url: str, organization_id: str, audits: int) -> tuple[int, list[dict]]:
    """(stored balance, the organization's audit entries about billing, once there are `audits` of them)."""
    db = await open_database(storage_url)
    try:
        deadline = asyncio.get_running_loop().time() + LEDGER_TIMEOUT
        while True:
            entries = await db.fetch(
                "SELECT event, target_id, details FROM audit_log WHERE organization_id = $1"
                " AND event LIKE 'billing.%'",
                organization_id,
            )
            if len(entries) >= audits or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)  # polling the batched audit writer, bounded by the deadline
        balance = await db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", organization_id)
        return int(balance), [dict(a) for a in entries]
    finally:
        await db.close()


def stored(storage_url: str, organization_id: str, audits: int = 0) -> tuple[int, list[dict]]:
    return asyncio.run(_stored(storage_url, organization_id, audits))


def metric(base_url: str, name: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    found = re.findall(rf'^{name}\{{model="truth"\}} (\S+)$', text, re.MULTILINE)
    return float(found[0]) if found else 0.0


def usd(micros: int) -> float:
    return micros / 1_000_000


def funded(gateway, micros: int) -> Tenant:
    return register_tenant(gateway.base_url, fund_usd=usd(micros))


def assert_refused_before_sending(
    reply: httpx.Response, upstream: FakeUpstream, path: str, sent: int
) -> None:
    assert reply.status_code == 402, reply.text
    assert reply.json()["error"]["code"] == "insufficient_balance"
    assert len(upstream.requests_to(path)) == sent, "the provider was called for a request refused with 402"


# -- previous_response_id: the context that response carried ---------------------------------------------


FIRST_ID = "resp_truth00000001"


def _first_response(
    gateway, tenant: Tenant, upstream: FakeUpstream, extra: dict, stream: bool = False
) -> tuple[str, int]:
    """A stored response (id FIRST_ID) whose provider bills 8,000 input and 2,000 output tokens (its body
    shows them: 16 KB); returns its id and its charge."""
    fault = Fault(report_usage={"usage": responses_usage(8_000, 2_000)}, object_id=FIRST_ID)
    upstream.add_fault(RESPONSES, fault)
    body = {"model": "truth", "input": "x " * 8_000, "max_output_tokens": 2_000, "stream": stream, **extra}
    reply, request_id = send(gateway.base_url, tenant, RESPONSES, body_of(body))
    assert reply.status_code == 200, reply.text
    assert reply.content.startswith(b"event: response.created") == stream
    row = ledger_row(gateway.storage_url, request_id)
    assert row["cost_micros"] == bill(8_000, 2_000) and not row["over_reservation_micros"], str(row)
    return FIRST_ID, row["cost_micros"]


def test_a_chained_response_below_its_bound_is_refused_before_the_provider_is_called(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=truth_toml(upstream))
    follow_up = body_of({"model": "truth", "input": "and then?", "previous_response_id": FIRST_ID})
    bound = reservation(follow_up, hidden=10_000)  # the 8,000 + 2,000 tokens the first response carried
    tenant = funded(gateway, bill(8_000, 2_000) + bound - 1)  # left after the first: 1 µ short of the bound
    assert _first_response(gateway, tenant, upstream, {})[0] == FIRST_ID

    reply, _ = send(gateway.base_url, tenant, RESPONSES, follow_up)

    assert_refused_before_sending(reply, upstream, RESPONSES, 1)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_chained_response_is_charged_exactly_what_the_provider_bills(
    start_gateway, upstream: FakeUpstream, stream: bool
) -> None:
    gateway = start_gateway(extra=truth_toml(upstream))
    tenant = funded(gateway, 10_000_000)
    response_id, first_cost = _first_response(gateway, tenant, upstream, {}, stream)
    # The follow-up re-reads the 10,000 tokens of context, and its own few.
    upstream.add_fault(RESPONSES, Fault(report_usage={"usage": responses_usage(10_012, 40)}))
    follow_up = body_of({"model": "truth", "input": "and then?", "previous_response_id": response_id})

    reply, request_id = send(gateway.base_url, tenant, RESPONSES, follow_up)

    assert reply.status_code == 200, reply.text
    row = ledger_row(gateway.storage_url, request_id)
    assert row["cost_micros"] == bill(10_012, 40) == 25_430, str(row)
    assert (row["over_reservation_micros"], row["usage_estimated"]) == (0, False), str(row)
    balance, _ = stored(gateway.storage_url, row["organization_id"])
    assert balance == 10_000_000 - first_cost - 25_430


# -- conversation: the context of the last response made in it -------------------------------------------


def test_a_response_in_a_conversation_is_bounded_by_its_context_and_charged_the_bill(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=truth_toml(upstream))
    tenant = funded(gateway, 10_000_000)
    conversation = {"conversation": "conv_truth0001"}
    # Unknown to the gateway until a response is made in it: bounded by the whole context window.
    _, first_cost = _first_response(gateway, tenant, upstream, conversation)
    upstream.add_fault(RESPONSES, Fault(report_usage={"usage": responses_usage(10_012, 40)}))
    follow_up = body_of({"model": "truth", "input": "and then?", **conversation})

    reply, request_id = send(gateway.base_url, tenant, RESPONSES, follow_up)

    assert reply.status_code == 200, reply.text
    row = ledger_row(gateway.storage_url, request_id)
    assert row["cost_micros"] == bill(10_012, 40), str(row)
    assert row["over_reservation_micros"] == 0, str(row)
    # Below the conversation's bound now (10,052 tokens of context): refused before the provider is called.
    balance, _ = stored(gateway.storage_url, row["organization_id"])
    assert balance == 10_000_000 - first_cost - bill(10_012, 40)
    poor = funded(gateway, reservation(follow_up, hidden=CONTEXT) - 1)
    reply, _ = send(gateway.base_url, poor, RESPONSES, follow_up)  # unknown to this organization: a window
    assert_refused_before_sending(reply, upstream, RESPONSES, 2)


# -- stored prompts, files, images: per-model bounds -----------------------------------------------------

STORED_PROMPT = {"model": "truth", "prompt": {"id": "pmpt_0123456789", "version": "2"}, "input": "hi"}
CHAT_FILE = {
    "model": "truth",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Summarise"},
                {"type": "file", "file": {"file_id": "file-0123456789abcdef"}},
            ],
        }
    ],
}
RESPONSES_FILE = {
    "model": "truth",
    "input": [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Summarise"},
                {"type": "input_file", "file_id": "file-0123456789abcdef"},
            ],
        }
    ],
}


def chat_with_images(count: int, detail: str | None = None) -> dict:
    parts: list[dict] = [{"type": "text", "text": "What is in these?"}]
    for i in range(count):
        image = {"url": f"https://images.example.com/{i}.png"}
        if detail is not None:
            image["detail"] = detail
        parts.append({"type": "image_url", "image_url": image})
    return {"model": "truth", "messages": [{"role": "user", "content": parts}]}


# (route, body, hidden tokens it names, usage the provider bills: input, output)
HIDDEN = {
    "stored prompt": (RESPONSES, STORED_PROMPT, CONTEXT, (20_000, 200)),
    "chat file_id": (CHAT, CHAT_FILE, CONTEXT, (50_000, 100)),
    "responses input_file": (RESPONSES, RESPONSES_FILE, CONTEXT, (50_000, 100)),
    "1 image_url": (CHAT, chat_with_images(1), IMAGE_MOST, (1_300, 1)),
    "10 image_url": (CHAT, chat_with_images(10), 10 * IMAGE_MOST, (11_250, 1)),
    "10 image_url, detail low": (CHAT, chat_with_images(10, "low"), 10 * IMAGE_LOW, (870, 1)),
}


def _usage_for(path: str, input_tokens: int, output_tokens: int) -> dict:
    return (
        chat_usage(input_tokens, output_tokens)
        if path == CHAT
        else responses_usage(input_tokens, output_tokens)
    )


@pytest.mark.parametrize("case", list(HIDDEN))
def test_input_the_body_only_names_is_reserved_and_charged_as_billed(
    start_gateway, upstream: FakeUpstream, case: str
) -> None:
    path, payload, hidden, (input_tokens, output_tokens) = HIDDEN[case]
    gateway = start_gateway(extra=truth_toml(upstream))
    body = body_of(payload)
    bound = reservation(body, hidden=hidden)
    assert bound > reservation(body) + 100  # what the body alone would have reserved

    # Below the bound (but above what the body shows): 402 before anything is sent.
    poor = funded(gateway, bound - 1)
    reply, _ = send(gateway.base_url, poor, path, body)
    assert_refused_before_sending(reply, upstream, path, 0)

    # Enough for the bound: charged exactly the provider's bill.
    tenant = funded(gateway, bound)
    upstream.add_fault(path, Fault(report_usage={"usage": _usage_for(path, input_tokens, output_tokens)}))
    reply, request_id = send(gateway.base_url, tenant, path, body)
    assert reply.status_code == 200, reply.text
    row = ledger_row(gateway.storage_url, request_id)
    assert row["cost_micros"] == bill(input_tokens, output_tokens), str(row)
    assert (row["input_tokens"], row["output_tokens"]) == (input_tokens, output_tokens), str(row)
    assert (row["over_reservation_micros"], row["usage_implausible"]) == (0, False), str(row)
    balance, _ = stored(gateway.storage_url, row["organization_id"])
    assert balance == bound - bill(input_tokens, output_tokens)


# -- a provider ignoring max_tokens: charged in full, the overrun visible --------------------------------


def test_a_provider_ignoring_its_cap_is_charged_in_full_and_the_overrun_is_visible(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=truth_toml(upstream))
    body = body_of({"model": "truth", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10})
    reserved = reservation(body, cap=10)
    tenant = funded(gateway, reserved + 1_000)
    before = metric(gateway.base_url, "modelgate_charge_over_reservation_total")
    upstream.add_fault(CHAT, Fault(ignore_output_cap=True, report_usage={"usage": chat_usage(10, 4_000)}))

    reply, request_id = send(gateway.base_url, tenant, CHAT, body)

    assert reply.status_code == 200, reply.text
    row = ledger_row(gateway.storage_url, request_id)
    truth = bill(10, 4_000)
    assert row["cost_micros"] == truth == 40_025, str(row)
    assert row["over_reservation_micros"] == truth - reserved, str(row)
    assert not row["usage_implausible"], str(row)
    # The balance fell below its floor by the excess; storage and the live counter agree on it: the next
    # request, which its (negative) balance cannot cover, is refused before the provider is called.
    balance, audits = stored(gateway.storage_url, row["organization_id"], audits=1)
    assert balance == reserved + 1_000 - truth < 0
    assert [(a["event"], a["target_id"]) for a in audits] == [("billing.over_reservation", request_id)]
    assert orjson.loads(audits[0]["details"])["overMicros"] == truth - reserved
    assert metric(gateway.base_url, "modelgate_charge_over_reservation_total") == before + 1
    assert metric(gateway.base_url, "modelgate_charge_over_reservation_micros_total") >= truth - reserved
    reply, _ = send(gateway.base_url, tenant, CHAT, body)
    assert_refused_before_sending(reply, upstream, CHAT, 1)


def test_usage_no_model_could_produce_is_charged_at_the_physical_bound_and_flagged(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=truth_toml(upstream))
    body = body_of({"model": "truth", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10})
    tenant = funded(gateway, 10_000_000)
    # Beyond the context window plus the cap sent: a faulty upstream, which must not drain the tenant.
    upstream.add_fault(
        CHAT, Fault(ignore_output_cap=True, report_usage={"usage": chat_usage(CONTEXT, 1_000_000)})
    )

    reply, request_id = send(gateway.base_url, tenant, CHAT, body)

    assert reply.status_code == 200, reply.text
    row = ledger_row(gateway.storage_url, request_id)
    physical = bill(CONTEXT, 10)
    assert row["cost_micros"] == physical, str(row)
    assert row["usage_implausible"], str(row)
    assert row["over_reservation_micros"] == physical - reservation(body, cap=10), str(row)
    _, audits = stored(gateway.storage_url, row["organization_id"], audits=1)
    assert [a["event"] for a in audits] == ["billing.implausible_usage"]
