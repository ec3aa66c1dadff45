"""Background responses (`POST /v1/responses` with `background: true`) are charged their final usage: the
creation answers `queued` with usage null — issue 32's row, charged 70 µ of a 40,250 µ bill, the client's
later retrieve free — so the gateway keeps the reservation, follows the response on the row that made it
until it ends, and charges what the provider then reports, once: across failed polls, a cancellation, a
client's own retrieves, a SIGKILL and two restarted processes racing for it.

Prices are the issue's: 2.5 USD per million input tokens and 10 per million output tokens (2.5 µ and 10 µ a
token). The fake counts tokens as words (tests/fakes/echo_model.py): an input of w words is w + 3 tokens,
the echo `echo: <input>` w + 1 words, cut at `max_output_tokens`.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from modelgate.storage import open_database
from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import GatewayProcess, Tenant, register_tenant

INPUT_MICROS = 2.5
OUTPUT_MICROS = 10.0
WORDS = 4000
MAX_OUTPUT = 4000
FAST_POLLS = """
background_poll_seconds = 0.05
background_poll_max_seconds = 0.2
background_lease_seconds = 1.0
"""


def priced_responses(upstream: FakeUpstream, first_byte_timeout: float = 30.0) -> str:
    return f"""
[[providers]]
name = "fake-openai"
kind = "openai"
base_url = "{upstream.base_url}/v1"
first_byte_timeout = {first_byte_timeout}

[[models]]
name = "gpt-background"
kinds = ["responses"]
max_context_tokens = 100000
[[models.rows]]
provider = "fake-openai"
[models.prices]
input_per_mtok = {INPUT_MICROS}
cached_input_per_mtok = 1.25
output_per_mtok = {OUTPUT_MICROS}
"""


@pytest.fixture
def upstream() -> FakeUpstream:
    with FakeUpstream("background") as fake:
        yield fake


def bill(input_tokens: int, output_tokens: int) -> int:
    """The provider's bill, by hand."""
    return math.ceil(input_tokens * INPUT_MICROS + output_tokens * OUTPUT_MICROS)


PROMPT = " ".join(f"w{i}" for i in range(WORDS))
FINAL_BILL = bill(WORDS + 3, MAX_OUTPUT)  # 4,003 input tokens, 4,000 output tokens


def sdk(gateway, tenant: Tenant) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)


def create(client: openai.OpenAI, request_id: str):
    return client.responses.create(
        model="gpt-background",
        input=PROMPT,
        background=True,
        max_output_tokens=MAX_OUTPUT,
        extra_headers={"x-request-id": request_id},
    )


async def _rows(storage_url: str, request_id: str) -> list[dict]:
    db = await open_database(storage_url)
    try:
        rows = await db.fetch(
            "SELECT status, outcome, input_tokens, output_tokens, cost_micros, usage_estimated"
            " FROM usage_ledger WHERE request_id = $1 ORDER BY created_at",
            request_id,
        )
        return [dict(row) for row in rows]
    finally:
        await db.close()


def rows_of(storage_url: str, request_id: str) -> list[dict]:
    return asyncio.run(_rows(storage_url, request_id))


def wait_until(condition: Callable[[], object], timeout: float = 20.0) -> object:
    """Poll `condition` until it holds (bounded): the gateway's follower works on its own clock."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def charged_rows(storage_url: str, request_id: str, count: int = 1) -> list[dict]:
    rows = wait_until(lambda: (found := rows_of(storage_url, request_id)) and len(found) >= count and found)
    assert rows, f"no ledger row for {request_id}"
    return rows


def new_request_id() -> str:
    return f"bg-{os.urandom(5).hex()}"


def test_a_background_response_is_charged_its_final_usage_once(start_gateway, upstream: FakeUpstream) -> None:
    gateway = start_gateway(extra=priced_responses(upstream), billing_extra=FAST_POLLS)
    tenant = register_tenant(gateway.base_url)
    client = sdk(gateway, tenant)
    request_id = new_request_id()
    created = create(client, request_id)
    assert (created.status, created.usage) == ("queued", None)
    # Polled meanwhile, and nothing charged while it runs.
    assert wait_until(lambda: len(upstream.requests_to(f"/v1/responses/{created.id}")) >= 2)
    assert rows_of(gateway.storage_url, request_id) == []

    upstream.finish_background(created.id)
    (row,) = charged_rows(gateway.storage_url, request_id)
    assert FINAL_BILL == 50_008
    assert row == {
        "status": 200,
        "outcome": "completed",
        "input_tokens": WORDS + 3,
        "output_tokens": MAX_OUTPUT,
        "cost_micros": FINAL_BILL,
        "usage_estimated": False,
    }
    # The client's own retrieve is free, and charges nothing twice.
    assert client.responses.retrieve(created.id).usage.output_tokens == MAX_OUTPUT
    time.sleep(0.5)  # a few poll intervals: a second row would have appeared (a bounded look, not a sync)
    assert len(rows_of(gateway.storage_url, request_id)) == 1


def test_the_reservation_is_held_until_the_final_usage_is_known(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=priced_responses(upstream), billing_extra=FAST_POLLS)
    # A creation reserves ~68,750 µ (its ~23 KB body at a token per 2 bytes, and 4,000 output tokens): the
    # balance covers one reservation, not two; and one more once the first is charged its 50,008 µ.
    tenant = register_tenant(gateway.base_url, fund_usd=0.128)
    client = sdk(gateway, tenant)
    first_id = new_request_id()
    first = create(client, first_id)
    with pytest.raises(openai.APIStatusError) as refused:
        create(client, new_request_id())
    assert refused.value.status_code == 402  # the queued response still holds its reservation
    upstream.finish_background(first.id)
    assert charged_rows(gateway.storage_url, first_id)[0]["cost_micros"] == FINAL_BILL
    assert create(client, new_request_id()).status == "queued"


def test_a_cancelled_background_response_is_charged_what_the_provider_reports(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=priced_responses(upstream), billing_extra=FAST_POLLS)
    tenant = register_tenant(gateway.base_url)
    request_id = new_request_id()
    created = create(sdk(gateway, tenant), request_id)
    upstream.finish_background(created.id, "cancelled", output_tokens=1234)
    (row,) = charged_rows(gateway.storage_url, request_id)
    assert (row["outcome"], row["output_tokens"]) == ("cancelled", 1234)
    assert row["cost_micros"] == bill(WORDS + 3, 1234)


def test_a_final_usage_past_the_reservation_is_charged_in_full_and_its_row_says_by_how_much(
    start_gateway, upstream: FakeUpstream
) -> None:
    """The one money path (modelgate/domain/charges.py): a followed response's row is built like any other,
    with the overrun column — a provider that ran past `max_output_tokens` (20,000 of 4,000) is charged the
    truth, and the excess over the ~68,750 µ reservation is on the row."""
    gateway = start_gateway(extra=priced_responses(upstream), billing_extra=FAST_POLLS)
    tenant = register_tenant(gateway.base_url)
    request_id = new_request_id()
    created = create(sdk(gateway, tenant), request_id)
    upstream.finish_background(created.id, output_tokens=20_000)
    (row,) = charged_rows(gateway.storage_url, request_id)
    billed = bill(WORDS + 3, 20_000)
    assert (row["output_tokens"], row["cost_micros"]) == (20_000, billed)
    over = asyncio.run(_over_reservation(gateway.storage_url, request_id))
    reserved = billed - over
    assert 60_000 < reserved < 80_000, (billed, over)  # the creation's reservation, charged past


async def _over_reservation(storage_url: str, request_id: str) -> int:
    db = await open_database(storage_url)
    try:
        value = await db.fetchval(
            "SELECT over_reservation_micros FROM usage_ledger WHERE request_id = $1", request_id
        )
        return int(value)
    finally:
        await db.close()


def test_polls_the_provider_fails_are_retried_until_the_final_usage_arrives(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(
        extra=priced_responses(upstream, first_byte_timeout=1.0), billing_extra=FAST_POLLS
    )
    tenant = register_tenant(gateway.base_url)
    request_id = new_request_id()
    created = create(sdk(gateway, tenant), request_id)
    path = f"/v1/responses/{created.id}"
    upstream.add_fault(path, Fault(status=500), times=2)
    upstream.add_fault(path, Fault(status=200, body={"broken": "not a response"}))
    upstream.add_fault(path, Fault(hang=True))  # a poll that never answers: the read timeout ends it
    upstream.finish_background(created.id)
    (row,) = charged_rows(gateway.storage_url, request_id, 1)
    assert row["cost_micros"] == FINAL_BILL
    assert len(upstream.requests_to(path)) >= 5


def test_a_graceful_stop_charges_the_estimate_and_hands_the_follow_over_at_once(
    start_gateway, upstream: FakeUpstream
) -> None:
    # A lease far longer than the test: only the stop's hand-over lets the next process adopt it in time.
    slow_lease = FAST_POLLS.replace("background_lease_seconds = 1.0", "background_lease_seconds = 3600.0")
    stopping = start_gateway(extra=priced_responses(upstream), billing_extra=slow_lease)
    tenant = register_tenant(stopping.base_url)
    request_id = new_request_id()
    created = create(sdk(stopping, tenant), request_id)
    path = f"/v1/responses/{created.id}"
    assert wait_until(lambda: len(upstream.requests_to(path)) >= 1)
    stopping.stop()
    (handed_over,) = rows_of(stopping.storage_url, request_id)
    assert (handed_over["outcome"], handed_over["usage_estimated"]) == ("background", True)

    following = start_gateway(extra=priced_responses(upstream), billing_extra=slow_lease)
    polls = len(upstream.requests_to(path))
    assert wait_until(lambda: len(upstream.requests_to(path)) > polls), "the next process did not adopt it"
    upstream.finish_background(created.id)
    handed_over, rest = charged_rows(following.storage_url, request_id, 2)
    assert rest["outcome"] == "completed"
    assert handed_over["cost_micros"] + rest["cost_micros"] == FINAL_BILL


def _process_config(tmp_path: Path, storage_url: str, upstream: FakeUpstream) -> Path:
    path = tmp_path / "background.toml"
    path.write_text(f"""
[storage]
url = "{storage_url}"

[billing]
ledger_flush_interval_seconds = 0.2
{FAST_POLLS}
{priced_responses(upstream)}

[[plans]]
code = "free"
rpm = 0
tpm = 0
""")
    return path


async def _balance(storage_url: str, email: str) -> int:
    db = await open_database(storage_url)
    try:
        return int(
            await db.fetchval(
                "SELECT o.balance_micros FROM organizations o JOIN users u ON u.organization_id = o.id"
                " WHERE u.email = $1",
                email,
            )
        )
    finally:
        await db.close()


def test_a_killed_follower_is_charged_its_journal_estimate_and_one_of_two_restarted_processes_the_rest(
    tmp_path: Path, storage_url: str
) -> None:
    """SIGKILL while the response runs: the next start replays the journal (the prompt estimate, as for any
    request in flight), and of the two processes started then, exactly one adopts the follow and charges
    the rest — the two rows add up to the provider's bill, to the micro-unit."""
    with FakeUpstream("background") as upstream:
        config = _process_config(tmp_path, storage_url, upstream)
        first = GatewayProcess(config, cwd=tmp_path).start()
        second = third = None
        try:
            tenant = register_tenant(first.base_url)
            request_id = new_request_id()
            created = create(sdk(first, tenant), request_id)
            path = f"/v1/responses/{created.id}"
            assert wait_until(lambda: len(upstream.requests_to(path)) >= 1), "the follower never polled"
            first.kill()
            polls = len(upstream.requests_to(path))
            assert rows_of(storage_url, request_id) == []

            second = GatewayProcess(config, cwd=tmp_path).start()
            third = GatewayProcess(config, cwd=tmp_path).start()
            assert wait_until(lambda: len(upstream.requests_to(path)) > polls), "no process adopted it"
            upstream.finish_background(created.id)
            rows = charged_rows(storage_url, request_id, 2)
            time.sleep(1.0)  # several poll intervals of both processes: a third row would be here by now
            rows = rows_of(storage_url, request_id)
            assert [row["outcome"] for row in rows] == ["crashed", "completed"], rows
            crashed, rest = rows
            assert crashed["cost_micros"] > 0  # the journal's crash row: the prompt estimate
            assert crashed["cost_micros"] + rest["cost_micros"] == FINAL_BILL
            # The rest row counts the tokens beyond the crash row's estimate: here it estimated more, and the
            # rest corrects it, so the two rows count what the provider reported.
            assert crashed["input_tokens"] > WORDS + 3
            assert crashed["input_tokens"] + rest["input_tokens"] == WORDS + 3
            assert rest["output_tokens"] == MAX_OUTPUT
            opening = 1000 * 1_000_000
            assert wait_until(
                lambda: asyncio.run(_balance(storage_url, tenant.email)) == opening - FINAL_BILL
            )
            for process in (second, third):
                process.terminate()
                assert process.wait(timeout=30) == 0
            assert "Traceback" not in first.output() + second.output() + third.output()
        finally:
            for process in (first, second, third):
                if process is not None:
                    process.kill()
