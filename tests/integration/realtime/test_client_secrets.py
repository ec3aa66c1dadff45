"""POST /v1/realtime/client_secrets: a short-lived secret for one realtime session, minted for the calling
key and a model that serves realtime, in OpenAI's shape (the openai SDK parses it)."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.integration.model_api.error_bodies import assert_envelope_a
from tests.integration.realtime.conftest import RealtimeStack


@pytest.fixture
def sdk(stack: RealtimeStack):
    with openai.OpenAI(
        base_url=f"{stack.gateway.base_url}/v1", api_key=stack.tenant().api_key, max_retries=0
    ) as client:
        yield client


def _post(stack: RealtimeStack, body: dict, key: str | None = None) -> httpx.Response:
    key = key or stack.tenant().api_key
    return httpx.post(
        f"{stack.gateway.base_url}/v1/realtime/client_secrets",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_the_sdk_mints_a_secret_in_openais_session_shape(sdk: openai.OpenAI) -> None:
    before = int(time.time())
    secret = sdk.realtime.client_secrets.create(
        session={"type": "realtime", "model": "realtime-test", "instructions": "be brief"},
        expires_after={"anchor": "created_at", "seconds": 30},
    )
    assert secret.value.startswith("ek_") and len(secret.value) > 40
    assert before + 30 <= secret.expires_at <= int(time.time()) + 30
    assert secret.session.type == "realtime"
    assert secret.session.model == "realtime-test"
    assert secret.session.instructions == "be brief"


def test_the_flat_shape_mints_too_and_lives_at_most_60_seconds(stack: RealtimeStack) -> None:
    reply = _post(
        stack,
        {
            "model": "realtime-test",
            "voice": "alloy",
            "expires_after": {"anchor": "created_at", "seconds": 3600},
        },
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"value", "expires_at", "session"}
    assert body["expires_at"] <= int(time.time()) + 60
    assert body["session"]["voice"] == "alloy" and body["session"]["model"] == "realtime-test"


def test_each_mint_is_a_new_secret(stack: RealtimeStack) -> None:
    values = {_post(stack, {"model": "realtime-test"}).json()["value"] for _ in range(3)}
    assert len(values) == 3


@pytest.mark.parametrize("model", ["no-such-model", "chat-only"])
def test_a_model_that_does_not_serve_realtime_is_404(stack: RealtimeStack, model: str) -> None:
    assert_envelope_a(_post(stack, {"model": model}), 404, "invalid_request_error", code="model_not_found")


def test_a_session_of_another_type_is_400(stack: RealtimeStack) -> None:
    reply = _post(stack, {"session": {"type": "transcription", "model": "realtime-test"}})
    assert_envelope_a(reply, 400, "invalid_request_error")


@pytest.mark.parametrize(
    "expires_after", [{"seconds": 0}, {"seconds": "ten"}, {"anchor": "now", "seconds": 10}, 5]
)
def test_an_invalid_expiry_is_400(stack: RealtimeStack, expires_after) -> None:
    reply = _post(stack, {"model": "realtime-test", "expires_after": expires_after})
    assert_envelope_a(reply, 400, "invalid_request_error")


def test_minting_needs_a_model_key(stack: RealtimeStack) -> None:
    reply = httpx.post(
        f"{stack.gateway.base_url}/v1/realtime/client_secrets", json={"model": "realtime-test"}, timeout=30
    )
    assert_envelope_a(reply, 401, "invalid_request_error")


def test_an_unpaid_organization_cannot_mint(stack: RealtimeStack) -> None:
    unpaid = stack.tenant(plan="pro", fund_usd=None)
    reply = _post(stack, {"model": "realtime-test"}, key=unpaid.api_key)
    assert_envelope_a(reply, 402, "insufficient_quota", code="insufficient_balance")
