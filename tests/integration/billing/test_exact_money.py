"""Exact money through the real gateway: a request is charged for what it delivered however it ended (past
its reservation too when the provider reports more: tests/integration/billing/test_true_charges.py); the
reservation bounds what the provider may generate; calls that generate nothing are free.

Prices are chosen so every expected amount is a whole number of micro-units: the chat model costs 1 µ per
input token and 2 µ per output token, so a request's reservation is `len(body)//2 + 1` (the input estimate)
plus `2 * max_tokens * n`. The fake upstream counts tokens as words (tests/fakes/echo_model.py): a prompt of
w words in one message is w + 3 prompt tokens, and the echo reply `echo: <prompt>` is w + 1 words, cut at
the request's cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import orjson
import pytest

from modelgate.storage import open_database
from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import GatewayProcess, Tenant, register_tenant

CHAT = "/v1/chat/completions"
INPUT_MICROS = 1  # per input token of exact-chat
OUTPUT_MICROS = 2  # per output token of exact-chat
DEFAULT_MAX_TOKENS = 50
MAX_CONTEXT_TOKENS = 1000
LEGACY_COMPLETIONS_DEFAULT = 16  # OpenAI's documented default max_tokens of /v1/completions
AUDIO_SECOND_MICROS = 100  # per_audio_second of exact-transcribe
DEFAULT_MAX_AUDIO_SECONDS = 1500
AUDIO_RESERVATION = AUDIO_SECOND_MICROS * DEFAULT_MAX_AUDIO_SECONDS
AUDIO_BYTES_PER_SECOND = 16_000  # the fake's duration of an upload (tests/fakes/media_routes.py)
STORED_CALL_MICROS = 10_000  # per_request of the stored-response and messages models
LEDGER_TIMEOUT = 15.0


def models_toml(upstream: FakeUpstream) -> str:
    """Providers at the fake upstream and the priced models of this module (appended to billing_toml)."""
    return f"""
[[providers]]
name = "fake-openai"
kind = "openai"
base_url = "{upstream.base_url}/v1"

[[providers]]
name = "fake-anthropic"
kind = "anthropic"
base_url = "{upstream.base_url}"
api_key = "upstream-key-0123456789"

[[models]]
name = "exact-chat"
kinds = ["chat", "completions", "responses", "messages"]
default_max_tokens = {DEFAULT_MAX_TOKENS}
max_context_tokens = {MAX_CONTEXT_TOKENS}
[[models.rows]]
provider = "fake-openai"
[models.prices]
input_per_mtok = {INPUT_MICROS}.0
output_per_mtok = {OUTPUT_MICROS}.0

[[models]]
name = "output-only"
kinds = ["chat"]
[[models.rows]]
provider = "fake-openai"
[models.prices]
output_per_mtok = 1000000.0

[[models]]
name = "exact-transcribe"
kinds = ["audio_transcriptions"]
[[models.rows]]
provider = "fake-openai"
[models.prices]
per_request = 0.0
per_audio_second = {AUDIO_SECOND_MICROS / 1_000_000}

[[models]]
name = "stored-responses"
kinds = ["responses"]
[[models.rows]]
provider = "fake-openai"
[models.prices]
per_request = {STORED_CALL_MICROS / 1_000_000}

[[models]]
name = "native-messages"
kinds = ["messages"]
[[models.rows]]
provider = "fake-anthropic"
[models.prices]
per_request = {STORED_CALL_MICROS / 1_000_000}
"""


# -- fixtures and helpers -------------------------------------------------------------------------------


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream("exact") as fake:
        yield fake


class BodySizes:
    """Sizes of the request bodies the SDK sent, by `x-request-id` (the reservation's input estimate)."""

    def __init__(self) -> None:
        self.by_request_id: dict[str, int] = {}

    def __call__(self, request: httpx.Request) -> None:
        request_id = request.headers.get("x-request-id")
        if request_id is not None:
            self.by_request_id[request_id] = len(request.content)


def openai_client(base_url: str, tenant: Tenant, sizes: BodySizes | None = None) -> openai.OpenAI:
    hooks = {"request": [sizes]} if sizes is not None else {}
    return openai.OpenAI(
        base_url=f"{base_url}/v1",
        api_key=tenant.api_key,
        max_retries=0,
        http_client=httpx.Client(timeout=30, event_hooks=hooks),
    )


def new_request_id() -> str:
    return f"exact-{secrets.token_hex(8)}"


def words(count: int, stem: str = "w") -> str:
    return " ".join(f"{stem}{i}" for i in range(count))


def chat_reservation(body_size: int, max_tokens: int, n: int = 1) -> int:
    """The worst case exact-chat reserves for a request body of `body_size` bytes."""
    return (body_size // 2 + 1) * INPUT_MICROS + max_tokens * n * OUTPUT_MICROS


async def _rows(storage_url: str, request_ids: list[str]) -> list[dict]:
    db = await open_database(storage_url)
    try:
        deadline = time.monotonic() + LEDGER_TIMEOUT
        while True:
            rows = []
            for request_id in request_ids:
                rows += await db.fetch(
                    "SELECT request_id, status, outcome, input_tokens, output_tokens, cost_micros,"
                    " usage_estimated FROM usage_ledger WHERE request_id = $1",
                    request_id,
                )
            if {row["request_id"] for row in rows} >= set(request_ids) or time.monotonic() > deadline:
                return [dict(row) for row in rows]
            await asyncio.sleep(0.05)  # polling the flushed ledger, bounded by the deadline
    finally:
        await db.close()


def ledger_rows(storage_url: str, request_ids: list[str]) -> list[dict]:
    """The ledger rows of these requests, once each of them has at least one (bounded wait)."""
    return asyncio.run(_rows(storage_url, request_ids))


def rows_after_barrier(base_url: str, storage_url: str, tenant: Tenant, request_id: str) -> list[dict]:
    """Every ledger row of `request_id`, read after a later request's row was flushed: rows flush in order,
    so a second row written for the same request would be there too."""
    barrier = new_request_id()
    reply = openai_client(base_url, tenant).chat.completions.create(
        model="exact-chat",
        messages=[{"role": "user", "content": "barrier"}],
        max_tokens=1,
        extra_headers={"x-request-id": barrier},
    )
    assert reply.choices[0].message.content
    ledger_rows(storage_url, [request_id, barrier])
    return [row for row in ledger_rows(storage_url, [request_id]) if row["request_id"] == request_id]


async def _organization(storage_url: str, email: str) -> tuple[int, int]:
    """(stored balance, sum of the organization's ledger costs)."""
    db = await open_database(storage_url)
    try:
        row = await db.fetchrow(
            "SELECT o.balance_micros, (SELECT COALESCE(SUM(l.cost_micros), 0) FROM usage_ledger l"
            " WHERE l.organization_id = o.id) AS spent"
            " FROM organizations o JOIN users u ON u.organization_id = o.id WHERE u.email = $1",
            email,
        )
        return int(row["balance_micros"]), int(row["spent"])
    finally:
        await db.close()


def organization(storage_url: str, email: str) -> tuple[int, int]:
    return asyncio.run(_organization(storage_url, email))


# -- 1. a client that goes away is charged for what was delivered ---------------------------------------


def test_a_client_that_closes_a_stream_is_charged_for_what_was_delivered(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=models_toml(upstream))
    tenant = register_tenant(gateway.base_url)
    sizes = BodySizes()
    client = openai_client(gateway.base_url, tenant, sizes)
    # 40 content events, one every 50 ms: the client leaves long before the end.
    upstream.add_fault(CHAT, Fault(chunk_delay=0.05))
    request_id, max_tokens, read = new_request_id(), 40, 3
    stream = client.chat.completions.create(
        model="exact-chat",
        messages=[{"role": "user", "content": words(60)}],
        max_tokens=max_tokens,
        stream=True,
        extra_headers={"x-request-id": request_id},
    )
    contents = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            contents += 1
            if contents == read:
                break
    stream.close()
    assert upstream.wait_cancelled(1, timeout=10), "the gateway did not let go of the upstream stream"

    rows = rows_after_barrier(gateway.base_url, gateway.storage_url, tenant, request_id)
    assert len(rows) == 1, str(rows)
    row = rows[0]
    assert (row["status"], row["outcome"]) == (200, "client_closed"), str(row)
    assert row["cost_micros"] > 0
    assert 1 <= row["output_tokens"] <= max_tokens
    assert row["cost_micros"] <= chat_reservation(sizes.by_request_id[request_id], max_tokens)


def test_a_client_that_leaves_once_the_final_event_reached_it_is_charged_as_completed(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=models_toml(upstream))
    tenant = register_tenant(gateway.base_url)
    # Every event, [DONE] included, is sent; the provider's answer then stays open (never released): the
    # stream can only end by its client leaving.
    upstream.add_fault(CHAT, Fault(hold_after_last_chunk="after-done"))
    request_id = new_request_id()
    body = {"model": "exact-chat", "messages": [{"role": "user", "content": words(5)}], "stream": True}
    headers = {"authorization": f"Bearer {tenant.api_key}", "x-request-id": request_id}
    received = b""
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", f"{gateway.base_url}{CHAT}", json=body, headers=headers) as answer,
    ):
        assert answer.status_code == 200
        for piece in answer.iter_raw():
            received += piece
            if b"data: [DONE]" in received:
                break  # the client has the final event, and leaves before the body's end

    rows = rows_after_barrier(gateway.base_url, gateway.storage_url, tenant, request_id)
    assert len(rows) == 1, str(rows)
    row = rows[0]
    assert (row["status"], row["outcome"]) == (200, "completed"), str(row)
    assert not row["usage_estimated"] and row["output_tokens"] == 6  # the reported usage: `echo: ` + 5 words
    assert row["cost_micros"] == row["input_tokens"] * INPUT_MICROS + 6 * OUTPUT_MICROS


def test_fifty_streams_read_to_the_end_are_completed_and_charged_the_reported_usage(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=models_toml(upstream))
    tenant = register_tenant(gateway.base_url, fund_usd=10.0)
    client = openai_client(gateway.base_url, tenant)
    max_tokens = 20
    expected: dict[str, tuple[int, int]] = {}
    for i in range(50):
        prompt_words = 1 + i % 30  # some replies end naturally, some at the cap
        request_id = new_request_id()
        stream = client.chat.completions.create(
            model="exact-chat",
            messages=[{"role": "user", "content": words(prompt_words, f"s{i}w")}],
            max_tokens=max_tokens,
            stream=True,
            extra_headers={"x-request-id": request_id},
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text.startswith("echo:")
        expected[request_id] = (prompt_words + 3, min(prompt_words + 1, max_tokens))
    rows = ledger_rows(gateway.storage_url, list(expected))
    missing = set(expected) - {row["request_id"] for row in rows}
    assert not missing, f"{len(missing)} of {len(expected)} streams read to the end have no ledger row"
    assert len(rows) == len(expected)
    for row in rows:
        prompt, completion = expected[row["request_id"]]
        assert (row["status"], row["outcome"]) == (200, "completed"), str(row)
        assert (row["input_tokens"], row["output_tokens"]) == (prompt, completion), str(row)
        assert not row["usage_estimated"], str(row)  # the provider reported it
        assert row["cost_micros"] == prompt * INPUT_MICROS + completion * OUTPUT_MICROS, str(row)
    balance, spent = organization(gateway.storage_url, tenant.email)
    assert spent == sum(p * INPUT_MICROS + c * OUTPUT_MICROS for p, c in expected.values())
    assert balance == 10_000_000 - spent


def _process_config(tmp_path: Path, upstream: FakeUpstream, redis_url: str | None) -> Path:
    redis = f'[redis]\nurl = "{redis_url}"\n' if redis_url else ""
    path = tmp_path / "shutdown.toml"
    path.write_text(f"""
[server]
shutdown_grace_seconds = 1.0

[storage]
url = "sqlite:///{tmp_path / "shutdown.db"}"

{redis}
[billing]
ledger_flush_interval_seconds = 0.2

[[plans]]
code = "free"
rpm = 0
tpm = 0
{models_toml(upstream)}
""")
    return path


def test_a_stream_cut_by_a_graceful_shutdown_is_charged_for_what_was_delivered(
    tmp_path: Path, counters_redis: str | None, upstream: FakeUpstream
) -> None:
    config = _process_config(tmp_path, upstream, counters_redis)
    gateway = GatewayProcess(config, cwd=tmp_path).start()
    try:
        tenant = register_tenant(gateway.base_url)
        sizes = BodySizes()
        client = openai_client(gateway.base_url, tenant, sizes)
        # Every content event is sent, then the stream is held open until the shutdown cuts it.
        upstream.add_fault(CHAT, Fault(hold_before_last_chunk="never"))
        request_id, max_tokens = new_request_id(), 8
        stream = client.chat.completions.create(
            model="exact-chat",
            messages=[{"role": "user", "content": words(20)}],
            max_tokens=max_tokens,
            stream=True,
            extra_headers={"x-request-id": request_id},
        )
        contents = 0
        with contextlib.suppress(openai.APIError, httpx.HTTPError):
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    contents += 1
                    if contents == 3:
                        assert upstream.wait_held("never", timeout=10)
                        gateway.terminate()
        assert contents >= 3
        assert gateway.wait(timeout=60) == 0, gateway.output()
    finally:
        gateway.kill()
    # Read while a restarted gateway runs: rows a stop left in the ledger's spool are written at start.
    with GatewayProcess(config, cwd=tmp_path) as restarted:
        rows = ledger_rows(restarted.storage_url, [request_id])
    assert len(rows) == 1, (rows, gateway.output()[-3000:])
    row = rows[0]
    assert (row["status"], row["outcome"]) == (200, "shutdown"), str(row)
    assert row["cost_micros"] > 0
    assert 1 <= row["output_tokens"] <= max_tokens
    assert row["cost_micros"] <= chat_reservation(sizes.by_request_id[request_id], max_tokens)


# -- 2. a stream the provider breaks off ----------------------------------------------------------------


def test_a_stream_the_provider_breaks_off_is_charged_for_the_relayed_content_within_the_reservation(
    single_backend_gateway, upstream: FakeUpstream
) -> None:
    gateway = single_backend_gateway(extra=models_toml(upstream))
    tenant = register_tenant(gateway.base_url)
    sizes = BodySizes()
    client = openai_client(gateway.base_url, tenant, sizes)
    # A provider that overruns the cap and breaks off after 15 content chunks, before any usage.
    upstream.add_fault(CHAT, Fault(disconnect_after_chunks=15, ignore_output_cap=True))
    request_id, max_tokens = new_request_id(), 10
    stream = client.chat.completions.create(
        model="exact-chat",
        messages=[{"role": "user", "content": words(40)}],
        max_tokens=max_tokens,
        stream=True,
        extra_headers={"x-request-id": request_id},
    )
    with pytest.raises(openai.APIError):
        for _ in stream:
            pass

    rows = rows_after_barrier(gateway.base_url, gateway.storage_url, tenant, request_id)
    assert len(rows) == 1, str(rows)
    row = rows[0]
    assert row["outcome"] == "upstream_error", str(row)
    assert 1 <= row["output_tokens"] <= max_tokens, str(row)
    assert row["usage_estimated"], "counted from the relayed text, not reported: the row says so"
    assert 0 < row["cost_micros"] <= chat_reservation(sizes.by_request_id[request_id], max_tokens), str(row)


# -- 3. audio billed per second: reserved up front, settled exactly (also on Redis) ---------------------


def test_transcriptions_are_refused_once_the_balance_cannot_cover_the_reserved_audio_seconds(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=models_toml(upstream))
    opening = AUDIO_RESERVATION + 3_500
    tenant = register_tenant(gateway.base_url, fund_usd=opening / 1_000_000)
    client = openai_client(gateway.base_url, tenant)
    clip_seconds = 10
    clip_cost = clip_seconds * AUDIO_SECOND_MICROS
    audio = bytes(clip_seconds * AUDIO_BYTES_PER_SECOND)
    statuses, expected, served = [], [], []
    for _ in range(8):
        balance = opening - clip_cost * len(served)
        expected.append(200 if balance >= AUDIO_RESERVATION else 402)
        request_id = new_request_id()
        try:
            answer = client.audio.transcriptions.create(
                model="exact-transcribe",
                file=("clip.wav", audio, "audio/wav"),
                response_format="verbose_json",
                extra_headers={"x-request-id": request_id},
            )
        except openai.APIStatusError as refused:
            statuses.append(refused.status_code)
            assert refused.body["code"] == "insufficient_balance"
            continue
        assert answer.duration == clip_seconds
        statuses.append(200)
        served.append(request_id)
    assert statuses == expected, "served while the balance could not cover the reservation"

    rows = ledger_rows(gateway.storage_url, served)
    assert sorted(row["cost_micros"] for row in rows if row["status"] == 200) == [clip_cost] * len(served)
    balance, spent = organization(gateway.storage_url, tenant.email)
    assert spent == clip_cost * len(served)
    assert balance == opening - spent
    assert balance >= 0


def test_transcriptions_never_take_the_balance_below_zero(start_gateway, upstream: FakeUpstream) -> None:
    gateway = start_gateway(extra=models_toml(upstream))
    clip_cost = 10 * AUDIO_SECOND_MICROS
    opening = 2 * clip_cost + clip_cost // 2  # pays for two clips and a half, far from one reservation
    tenant = register_tenant(gateway.base_url, fund_usd=opening / 1_000_000)
    client = openai_client(gateway.base_url, tenant)
    audio = bytes(10 * AUDIO_BYTES_PER_SECOND)
    served = []
    for _ in range(4):
        request_id = new_request_id()
        with contextlib.suppress(openai.APIStatusError):
            client.audio.transcriptions.create(
                model="exact-transcribe",
                file=("clip.wav", audio, "audio/wav"),
                response_format="verbose_json",
                extra_headers={"x-request-id": request_id},
            )
            served.append(request_id)
    ledger_rows(gateway.storage_url, served)
    balance, spent = organization(gateway.storage_url, tenant.email)
    assert balance == opening - spent
    assert balance >= 0, f"{len(served)} transcriptions took the balance to {balance} µ"


# -- 4. the reservation bounds the cost -----------------------------------------------------------------


def test_chat_without_a_cap_is_sent_upstream_with_the_models_default_cap(
    single_backend_gateway, upstream: FakeUpstream
) -> None:
    gateway = single_backend_gateway(extra=models_toml(upstream))
    client = openai_client(gateway.base_url, register_tenant(gateway.base_url))
    client.chat.completions.create(model="exact-chat", messages=[{"role": "user", "content": "hello"}])
    [sent] = upstream.requests_to(CHAT)
    assert sent.json["max_completion_tokens"] == DEFAULT_MAX_TOKENS


def test_legacy_completions_without_a_cap_are_sent_upstream_with_max_tokens_16(
    single_backend_gateway, upstream: FakeUpstream
) -> None:
    gateway = single_backend_gateway(extra=models_toml(upstream))
    client = openai_client(gateway.base_url, register_tenant(gateway.base_url))
    client.completions.create(model="exact-chat", prompt="hello")
    [sent] = upstream.requests_to("/v1/completions")
    assert sent.json["max_tokens"] == LEGACY_COMPLETIONS_DEFAULT


def test_responses_without_a_cap_are_sent_upstream_with_the_models_default_cap(
    single_backend_gateway, upstream: FakeUpstream
) -> None:
    gateway = single_backend_gateway(extra=models_toml(upstream))
    client = openai_client(gateway.base_url, register_tenant(gateway.base_url))
    client.responses.create(model="exact-chat", input="hello")
    [sent] = upstream.requests_to("/v1/responses")
    assert sent.json["max_output_tokens"] == DEFAULT_MAX_TOKENS


def test_n_multiplies_the_reservation(start_gateway, upstream: FakeUpstream) -> None:
    # output-only: 1 USD per output token, nothing else; 5 USD covers exactly one answer of 5 tokens.
    gateway = start_gateway(extra=models_toml(upstream))
    tenant = register_tenant(gateway.base_url, fund_usd=5.0)
    client = openai_client(gateway.base_url, tenant)
    ask = {"model": "output-only", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(**ask, n=3)
    assert refused.value.status_code == 402
    assert refused.value.body["type"] == "insufficient_quota"
    assert refused.value.body["code"] == "insufficient_balance"
    assert upstream.requests_to(CHAT) == []
    assert client.chat.completions.create(**ask, n=1).choices[0].message.content


BAD_CHAT_CAPS = [
    pytest.param({"max_tokens": 10.5}, id="max_tokens-fraction"),
    pytest.param({"max_tokens": 1e30}, id="max_tokens-1e30"),
    pytest.param({"max_tokens": "10"}, id="max_tokens-string"),
    pytest.param({"max_tokens": True}, id="max_tokens-true"),
    pytest.param({"max_tokens": 0}, id="max_tokens-0"),
    pytest.param({"max_tokens": -1}, id="max_tokens-negative"),
    pytest.param({"max_tokens": MAX_CONTEXT_TOKENS + 1}, id="max_tokens-above-context"),
    pytest.param({"max_completion_tokens": 10.5}, id="max_completion_tokens-fraction"),
    pytest.param({"max_completion_tokens": MAX_CONTEXT_TOKENS + 1}, id="max_completion_tokens-above-context"),
    pytest.param({"n": 0}, id="n-0"),
    pytest.param({"n": 1.5}, id="n-fraction"),
    pytest.param({"n": "2"}, id="n-string"),
    pytest.param({"n": 129}, id="n-above-128"),
]


@pytest.mark.parametrize("bad", BAD_CHAT_CAPS)
def test_an_absurd_cap_or_n_is_refused_with_400_before_anything_is_sent_upstream(
    single_backend_gateway, upstream: FakeUpstream, bad: dict
) -> None:
    gateway = single_backend_gateway(extra=models_toml(upstream))
    tenant = register_tenant(gateway.base_url)
    body = {"model": "exact-chat", "messages": [{"role": "user", "content": "hi"}], **bad}
    reply = httpx.post(
        f"{gateway.base_url}{CHAT}",
        content=orjson.dumps(body),
        headers={"authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
        timeout=30,
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_messages_with_a_fractional_max_tokens_are_refused_in_envelope_b(
    single_backend_gateway, upstream: FakeUpstream
) -> None:
    gateway = single_backend_gateway(extra=models_toml(upstream))
    tenant = register_tenant(gateway.base_url)
    reply = httpx.post(
        f"{gateway.base_url}/v1/messages",
        json={"model": "exact-chat", "max_tokens": 10.5, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": tenant.api_key, "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert reply.status_code == 400, reply.text
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


# -- 5. calls that generate nothing are free ------------------------------------------------------------


def _claude(base_url: str, tenant: Tenant) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key=tenant.api_key, max_retries=0)


def test_retrieving_deleting_and_counting_succeed_free_at_a_zero_balance(
    single_backend_gateway, upstream: FakeUpstream
) -> None:
    gateway = single_backend_gateway(extra=models_toml(upstream))
    # Funded with exactly one stored-responses call: the create spends the balance down to 0.
    tenant = register_tenant(gateway.base_url, fund_usd=STORED_CALL_MICROS / 1_000_000)
    client = openai_client(gateway.base_url, tenant)
    created_id = new_request_id()
    created = client.responses.create(
        model="stored-responses", input="keep this", extra_headers={"x-request-id": created_id}
    )
    [create_row] = ledger_rows(gateway.storage_url, [created_id])
    assert create_row["cost_micros"] == STORED_CALL_MICROS
    assert organization(gateway.storage_url, tenant.email)[0] == 0

    free = [new_request_id() for _ in range(3)]
    assert client.responses.retrieve(created.id, extra_headers={"x-request-id": free[0]}).id == created.id
    client.responses.delete(created.id, extra_headers={"x-request-id": free[1]})
    counted = _claude(gateway.base_url, tenant).messages.count_tokens(
        model="native-messages",
        messages=[{"role": "user", "content": "how many"}],
        extra_headers={"x-request-id": free[2]},
    )
    assert counted.input_tokens > 0
    rows = ledger_rows(gateway.storage_url, free)
    assert sorted((row["request_id"], row["cost_micros"]) for row in rows) == sorted((r, 0) for r in free)
    assert organization(gateway.storage_url, tenant.email)[0] == 0


def test_a_create_with_reads_a_delete_and_counts_costs_exactly_the_create(
    single_backend_gateway, upstream: FakeUpstream
) -> None:
    gateway = single_backend_gateway(extra=models_toml(upstream))
    tenant = register_tenant(gateway.base_url, fund_usd=1.0)
    client = openai_client(gateway.base_url, tenant)
    claude = _claude(gateway.base_url, tenant)
    created_id = new_request_id()
    created = client.responses.create(
        model="stored-responses", input="keep this", extra_headers={"x-request-id": created_id}
    )
    others = []
    for _ in range(5):
        others.append(new_request_id())
        client.responses.retrieve(created.id, extra_headers={"x-request-id": others[-1]})
    others.append(new_request_id())
    client.responses.delete(created.id, extra_headers={"x-request-id": others[-1]})
    for _ in range(3):
        others.append(new_request_id())
        claude.messages.count_tokens(
            model="native-messages",
            messages=[{"role": "user", "content": "how many"}],
            extra_headers={"x-request-id": others[-1]},
        )
    rows = ledger_rows(gateway.storage_url, [created_id, *others])
    assert len(rows) == 10
    [create_cost] = [row["cost_micros"] for row in rows if row["request_id"] == created_id]
    assert create_cost == STORED_CALL_MICROS
    balance, spent = organization(gateway.storage_url, tenant.email)
    assert spent == create_cost
    assert balance == 1_000_000 - create_cost
