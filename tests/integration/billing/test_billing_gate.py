"""402 rules: the unpaid first invoice, the enterprise credit limit, and no overspend under concurrency."""

from __future__ import annotations

import asyncio

import anthropic
import httpx
import openai
import pytest

from modelgate.storage import open_database
from tests.support.gateway import register_tenant

CHAT = {"model": "metered", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def _client(gateway, tenant) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)


async def _org_state(storage_url: str, email: str) -> dict:
    db = await open_database(storage_url)
    try:
        return await db.fetchrow(
            "SELECT o.id, o.balance_micros, (SELECT COUNT(*) FROM usage_ledger l"
            " WHERE l.organization_id = o.id"
            " AND l.status = 200) AS served FROM organizations o JOIN users u ON u.organization_id = o.id"
            " WHERE u.email = $1",
            email,
        )
    finally:
        await db.close()


def test_an_unpaid_first_invoice_blocks_model_requests_in_envelope_a(start_gateway) -> None:
    gateway = start_gateway(per_request_usd=0.01)
    tenant = register_tenant(gateway.base_url, plan="pro", fund_usd=None)
    with pytest.raises(openai.APIStatusError) as caught:
        _client(gateway, tenant).chat.completions.create(**CHAT)
    assert caught.value.status_code == 402
    assert caught.value.body == {
        "message": caught.value.body["message"],
        "type": "insufficient_quota",
        "code": "insufficient_balance",
    }
    assert "invoice is not paid" in caught.value.body["message"]


def test_an_unpaid_first_invoice_blocks_messages_in_envelope_b(single_backend_gateway) -> None:
    gateway = single_backend_gateway(per_request_usd=0.01)
    tenant = register_tenant(gateway.base_url, plan="pro", fund_usd=None)
    response = httpx.post(
        f"{gateway.base_url}/v1/messages",
        headers={"x-api-key": tenant.api_key},
        json={"model": "metered", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 402
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "balance" in body["error"]["message"]
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="metered", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 402


def test_a_credit_plan_spends_up_to_its_limit_before_payment_then_gets_402(start_gateway) -> None:
    gateway = start_gateway(per_request_usd=1.0, credit_limit=5.0)
    tenant = register_tenant(gateway.base_url, plan="enterprise", fund_usd=None)
    client = _client(gateway, tenant)
    for _ in range(5):
        assert client.chat.completions.create(**CHAT).choices[0].message.content
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(**CHAT)
    assert caught.value.status_code == 402
    assert caught.value.body["code"] == "insufficient_balance"


def test_fifty_concurrent_requests_against_a_balance_for_ten_never_overspend(start_gateway) -> None:
    gateway = start_gateway(per_request_usd=1.0)
    tenant = register_tenant(gateway.base_url, fund_usd=10.0)

    async def burst() -> list[int]:
        async with httpx.AsyncClient(
            base_url=gateway.base_url, timeout=30, limits=httpx.Limits(max_connections=50)
        ) as client:
            replies = await asyncio.gather(
                *(
                    client.post(
                        "/v1/chat/completions",
                        json=CHAT,
                        headers={"authorization": f"Bearer {tenant.api_key}"},
                    )
                    for _ in range(50)
                )
            )
        return [r.status_code for r in replies]

    statuses = asyncio.run(burst())
    assert statuses.count(200) == 10
    assert statuses.count(402) == 40
    storage_url = gateway.storage_url
    gateway.stop()  # graceful: the ledger is flushed
    state = asyncio.run(_org_state(storage_url, tenant.email))
    assert state["balance_micros"] == 0
    assert state["served"] == 10


def test_real_cost_is_settled_not_the_worst_case(start_gateway) -> None:
    # 1 USD per output token, max_tokens 5 reserves 5 USD; "echo: hi" costs 2 output tokens = 2 USD.
    gateway = start_gateway(output_per_mtok=1_000_000.0)
    tenant = register_tenant(gateway.base_url, fund_usd=6.0)
    client = _client(gateway, tenant)
    assert client.chat.completions.create(**CHAT).usage.completion_tokens == 2
    # 4 USD left: another 5 USD worst case does not fit although its real cost would.
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(**CHAT)
    assert caught.value.status_code == 402
    assert client.chat.completions.create(**{**CHAT, "max_tokens": 2}).usage.completion_tokens == 2
    storage_url = gateway.storage_url
    gateway.stop()
    assert asyncio.run(_org_state(storage_url, tenant.email))["balance_micros"] == 2_000_000
