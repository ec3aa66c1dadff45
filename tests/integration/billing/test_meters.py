"""GET /api/meters tells the truth about budgets while the gateway spends them: what is spent, what requests
in flight hold, and "refusing" when the next request could not fit (issue 38: a key budget of $0.00005 a day
showed "0% used" while every request of the key got 402); and the plan's limits with this minute's use. On
both storage backends, with in-process and Redis counters."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import openai
import pytest

from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant

CHAT = "/v1/chat/completions"
HELD_PRICE_MICROS = 20_000  # per request; tokens are free, so a request reserves exactly this


def held_model(upstream: FakeUpstream) -> str:
    return f"""
[[providers]]
name = "fake-openai"
kind = "openai"
base_url = "{upstream.base_url}/v1"
read_timeout = 30.0
first_byte_timeout = 30.0

[[models]]
name = "slow"
kinds = ["chat"]
[[models.rows]]
provider = "fake-openai"
[models.prices]
per_request = {HELD_PRICE_MICROS / 1_000_000}
"""


@pytest.fixture
def upstream() -> Any:
    with FakeUpstream("meters") as fake:
        yield fake


def cabinet(gateway: ThreadedGateway, tenant: Tenant, method: str, path: str, body: Any = None) -> Any:
    reply = httpx.request(
        method,
        f"{gateway.base_url}/api{path}",
        json=body,
        headers={"authorization": f"Bearer {tenant.session_token}"},
        timeout=30,
    )
    assert reply.status_code < 300, reply.text
    return reply.json()


def add_budget(gateway: ThreadedGateway, tenant: Tenant, amount: int, **subject: Any) -> str:
    body = {
        "subjectType": "organization",
        "effect": "allow",
        "models": ["*"],
        "budget": {"amountMicros": amount, "period": "day"},
        **subject,
    }
    return cabinet(gateway, tenant, "POST", "/policy-rules", body)["id"]


def meter(gateway: ThreadedGateway, tenant: Tenant, rule_id: str) -> dict[str, Any]:
    (found,) = [b for b in cabinet(gateway, tenant, "GET", "/meters")["budgets"] if b["ruleId"] == rule_id]
    return found


def chat_status(gateway: ThreadedGateway, tenant: Tenant, model: str = "metered") -> int:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0)
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def figures(found: dict[str, Any]) -> tuple[int, int, int, bool]:
    return found["spentMicros"], found["heldMicros"], found["availableMicros"], found["refusing"]


def test_a_budget_below_one_requests_reservation_says_refusing_while_nothing_is_spent(start_gateway) -> None:
    gateway = start_gateway(per_request_usd=0.01)  # each request reserves 10,000 µ
    tenant = register_tenant(gateway.base_url)
    rule_id = add_budget(gateway, tenant, 5_000, subjectType="key", subjectId=tenant.key_id)

    before = meter(gateway, tenant, rule_id)
    status = chat_status(gateway, tenant)
    after = meter(gateway, tenant, rule_id)

    assert figures(before) == (0, 0, 5_000, False)
    assert before["lastReservation"] is None
    assert status == 402
    assert figures(after) == (0, 0, 5_000, True)
    assert (after["lastReservation"]["askedMicros"], after["lastReservation"]["refused"]) == (10_000, True)
    assert (after["limitMicros"], after["subjectType"], after["subjectId"]) == (5_000, "key", tenant.key_id)


def test_a_budget_with_room_for_the_refused_request_no_longer_refuses(start_gateway) -> None:
    gateway = start_gateway(per_request_usd=0.01)
    tenant = register_tenant(gateway.base_url)
    rule_id = add_budget(gateway, tenant, 5_000)
    assert chat_status(gateway, tenant) == 402

    cabinet(
        gateway,
        tenant,
        "PATCH",
        f"/policy-rules/{rule_id}",
        {"budget": {"amountMicros": 25_000, "period": "day"}},
    )
    raised = meter(gateway, tenant, rule_id)
    served = [chat_status(gateway, tenant) for _ in range(2)]
    spent = meter(gateway, tenant, rule_id)

    assert figures(raised) == (0, 0, 25_000, False)  # the edited rule is a new counter: no refusal yet
    assert served == [200, 200]
    assert figures(spent) == (20_000, 0, 5_000, True)
    # Nothing refused yet, but the last request reserved 10,000 µ and 5,000 µ is all that is left…
    assert (spent["lastReservation"]["askedMicros"], spent["lastReservation"]["refused"]) == (10_000, False)
    assert chat_status(gateway, tenant) == 402  # …and indeed the next request does not fit


def test_a_request_in_flight_is_held_then_counted_as_spent(start_gateway, upstream: FakeUpstream) -> None:
    gateway = start_gateway(extra=held_model(upstream))
    tenant = register_tenant(gateway.base_url)
    rule_id = add_budget(gateway, tenant, 100_000)
    upstream.add_fault(CHAT, Fault(hold_before_headers="answer"))
    statuses: list[int] = []
    request = threading.Thread(target=lambda: statuses.append(chat_status(gateway, tenant, "slow")))
    request.start()
    try:
        assert upstream.wait_held("answer", timeout=10), "the request did not reach the provider"
        in_flight = meter(gateway, tenant, rule_id)
    finally:
        upstream.release("answer")
        request.join(timeout=30)
    settled = meter(gateway, tenant, rule_id)
    deadline = time.monotonic() + 10
    while settled["heldMicros"] and time.monotonic() < deadline:  # settled just after the answer is sent
        settled = meter(gateway, tenant, rule_id)

    assert figures(in_flight) == (0, HELD_PRICE_MICROS, 100_000 - HELD_PRICE_MICROS, False)
    assert statuses == [200]
    assert figures(settled) == (HELD_PRICE_MICROS, 0, 100_000 - HELD_PRICE_MICROS, False)


def test_the_plan_limits_and_this_minutes_use_of_the_organization_are_shown(start_gateway) -> None:
    gateway = start_gateway(rpm=100, tpm=50_000)
    tenant = register_tenant(gateway.base_url)
    idle = cabinet(gateway, tenant, "GET", "/meters")
    served = [chat_status(gateway, tenant) for _ in range(3)]
    busy = cabinet(gateway, tenant, "GET", "/meters")

    assert idle["plan"] == {"code": "free", "name": "free", "rpm": 100, "tpm": 50_000, "creditLimitMicros": 0}
    assert idle["currentMinute"] == {"requests": 0, "tokens": 0}
    assert served == [200, 200, 200]
    assert busy["currentMinute"]["requests"] == 3
    assert busy["currentMinute"]["tokens"] > 0
    assert busy["budgets"] == []


def test_meters_show_only_the_callers_organization_and_need_a_session(single_backend_gateway) -> None:
    gateway = single_backend_gateway()
    ours, theirs = register_tenant(gateway.base_url), register_tenant(gateway.base_url)
    their_rule = add_budget(gateway, theirs, 1_000)

    our_budgets = cabinet(gateway, ours, "GET", "/meters")["budgets"]
    anonymous = httpx.get(f"{gateway.base_url}/api/meters", timeout=30)

    assert their_rule not in [b["ruleId"] for b in our_budgets]
    assert our_budgets == []
    assert anonymous.status_code == 401
    assert "error" in anonymous.json()
