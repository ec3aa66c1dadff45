"""A non-streamed call whose client leaves after it was sent (a client timeout) is read to its end upstream
and charged the usage the provider reports — issue 32's row "0 µ, outcome refused" for a bill of 50,250 µ —
on the lean front and under aiohttp alike, on both storage backends and both counters. With
`[billing] abandoned_calls = "cancel"` the provider is let go at once and the prompt's estimate is charged,
marked estimated. Streams keep their rules: a stream let go of before its first byte costs nothing.

Prices are the issue's: 2.5 USD per million input tokens, 10 per million output tokens, so one token costs
2.5 µ in and 10 µ out. The fake counts tokens as words (tests/fakes/echo_model.py): a prompt of w words in
one message is w + 3 prompt tokens, and the reply `echo: <prompt>` w + 1 words, cut at `max_tokens`.
"""

from __future__ import annotations

import math
import secrets
import socket
import threading
import time
from urllib.parse import urlsplit

import openai
import orjson
import pytest

from tests.fakes import FakeUpstream, Fault
from tests.integration.billing.test_exact_money import ledger_rows, organization
from tests.support.gateway import ThreadedGateway, register_tenant

CHAT = "/v1/chat/completions"
INPUT_MICROS_PER_TOKEN = 2.5
OUTPUT_MICROS_PER_TOKEN = 10.0
WORDS = 4999  # a prompt of 5,002 tokens; the echo's 5,000 words fill max_tokens
MAX_TOKENS = 5000


def priced_model(upstream: FakeUpstream) -> str:
    return f"""
[[providers]]
name = "fake-openai"
kind = "openai"
base_url = "{upstream.base_url}/v1"
read_timeout = 30.0
first_byte_timeout = 30.0

[[models]]
name = "gpt-priced"
kinds = ["chat"]
max_context_tokens = 100000
[[models.rows]]
provider = "fake-openai"
[models.prices]
input_per_mtok = {INPUT_MICROS_PER_TOKEN}
cached_input_per_mtok = 1.25
output_per_mtok = {OUTPUT_MICROS_PER_TOKEN}
"""


@pytest.fixture
def upstream() -> FakeUpstream:
    with FakeUpstream("abandoned") as fake:
        yield fake


def chat_body(stream: bool = False) -> bytes:
    prompt = " ".join(f"w{i}" for i in range(WORDS))
    body = {
        "model": "gpt-priced",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
    }
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


def send_and_leave_later(gateway: ThreadedGateway, api_key: str, body: bytes, *, chunked: bool) -> tuple:
    """Send a chat completion over a raw socket; returns (socket, request id) — the caller closes the socket
    without reading a byte of the answer, as a client that timed out does. A Content-Length body is served by
    the lean front; a chunked one is handed to aiohttp."""
    url = urlsplit(gateway.base_url)
    request_id = f"abandoned-{secrets.token_hex(6)}"
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nx-request-id: {request_id}\r\n"
    )
    if chunked:
        wire = (head + "Transfer-Encoding: chunked\r\n\r\n").encode()
        wire += f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    else:
        wire = (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    sock.sendall(wire)
    return sock, request_id


def barrier(gateway: ThreadedGateway, api_key: str) -> None:
    """A whole request on a new connection: by its answer, the gateway's loop has long since seen the
    earlier connection close (its FIN arrived first), so what the gateway does next is not a race."""
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=api_key, max_retries=0) as client:
        reply = client.chat.completions.create(
            model="gpt-priced", messages=[{"role": "user", "content": "barrier"}], max_tokens=1
        )
    assert reply.choices[0].message.content


def the_bill() -> int:
    """What the provider bills for the call, by hand: 5,002 prompt tokens and 5,000 output tokens."""
    prompt, completion = WORDS + 3, MAX_TOKENS
    return math.ceil(prompt * INPUT_MICROS_PER_TOKEN + completion * OUTPUT_MICROS_PER_TOKEN)


@pytest.mark.parametrize("path", ["front", "aiohttp"])
def test_a_call_whose_client_left_is_read_to_its_end_and_charged_the_providers_usage(
    start_gateway, upstream: FakeUpstream, path: str
) -> None:
    gateway = start_gateway(extra=priced_model(upstream))
    tenant = register_tenant(gateway.base_url)
    upstream.add_fault(CHAT, Fault(hold_before_headers="answer"))
    sock, request_id = send_and_leave_later(gateway, tenant.api_key, chat_body(), chunked=path == "aiohttp")
    assert upstream.wait_held("answer", timeout=10), "the call did not reach the provider"
    sock.close()  # the client times out while the provider works
    barrier(gateway, tenant.api_key)
    upstream.release("answer")  # the provider finishes the call it was sent, and bills it

    (row,) = ledger_rows(gateway.storage_url, [request_id])
    assert the_bill() == 62_505
    assert (row["status"], row["outcome"], row["usage_estimated"]) == (200, "client_closed", False), row
    assert (row["input_tokens"], row["output_tokens"]) == (WORDS + 3, MAX_TOKENS)
    assert row["cost_micros"] == the_bill()
    _balance, spent = organization(gateway.storage_url, tenant.email)
    barrier_bill = math.ceil(
        4 * INPUT_MICROS_PER_TOKEN + 1 * OUTPUT_MICROS_PER_TOKEN
    )  # "barrier": 4 in, 1 out
    assert spent == the_bill() + barrier_bill


def _stopped_listening(gateway: ThreadedGateway, seconds: float = 10.0) -> bool:
    """Whether the gateway refuses connections within `seconds`: its graceful stop has begun."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", gateway.port), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("path", ["front", "aiohttp"])
def test_a_graceful_stop_waits_for_a_call_whose_client_left_and_writes_its_row(
    start_gateway, upstream: FakeUpstream, path: str
) -> None:
    """The server no longer waits for a handler whose client left; the stop still must, or the call's
    settlement reaches the counters after the ledger stopped and its row is lost (the next start then
    charges its admission as a crash, at a cost that is not its tokens')."""
    gateway = start_gateway(extra=priced_model(upstream))
    tenant = register_tenant(gateway.base_url)
    upstream.add_fault(CHAT, Fault(hold_before_headers="answer"))
    sock, request_id = send_and_leave_later(gateway, tenant.api_key, chat_body(), chunked=path == "aiohttp")
    assert upstream.wait_held("answer", timeout=10), "the call did not reach the provider"
    sock.close()
    barrier(gateway, tenant.api_key)
    stopping = threading.Thread(target=gateway.stop, name="stopping")
    stopping.start()
    try:
        assert _stopped_listening(gateway), "the graceful stop did not begin"
    finally:
        upstream.release("answer")  # the provider answers while the stop runs
    stopping.join(60)
    assert not stopping.is_alive()

    (row,) = ledger_rows(gateway.storage_url, [request_id])
    assert (row["status"], row["outcome"], row["usage_estimated"]) == (200, "client_closed", False), row
    assert (row["input_tokens"], row["output_tokens"], row["cost_micros"]) == (
        WORDS + 3,
        MAX_TOKENS,
        the_bill(),
    )


def test_with_cancel_the_provider_is_let_go_and_the_prompt_estimate_is_charged(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=priced_model(upstream), abandoned_calls="cancel")
    tenant = register_tenant(gateway.base_url)
    upstream.add_fault(CHAT, Fault(hold_before_headers="answer"))
    body = chat_body()
    sock, request_id = send_and_leave_later(gateway, tenant.api_key, body, chunked=False)
    assert upstream.wait_held("answer", timeout=10)
    sock.close()
    barrier(gateway, tenant.api_key)
    try:
        (row,) = ledger_rows(gateway.storage_url, [request_id])
    finally:
        upstream.release("answer")
    estimated_prompt = len(body) // 4  # the documented estimate: about 4 bytes a token
    assert (row["outcome"], row["usage_estimated"]) == ("client_closed", True), row
    assert (row["input_tokens"], row["output_tokens"]) == (estimated_prompt, 0)
    assert row["cost_micros"] == math.ceil(estimated_prompt * INPUT_MICROS_PER_TOKEN)


def test_a_stream_let_go_of_before_its_first_byte_still_costs_nothing(
    start_gateway, upstream: FakeUpstream
) -> None:
    gateway = start_gateway(extra=priced_model(upstream))
    tenant = register_tenant(gateway.base_url)
    upstream.add_fault(CHAT, Fault(hold_before_headers="answer"))
    sock, request_id = send_and_leave_later(gateway, tenant.api_key, chat_body(stream=True), chunked=False)
    assert upstream.wait_held("answer", timeout=10)
    sock.close()
    barrier(gateway, tenant.api_key)
    try:
        (row,) = ledger_rows(gateway.storage_url, [request_id])
    finally:
        upstream.release("answer")
    assert (row["outcome"], row["cost_micros"]) == ("refused", 0), row
