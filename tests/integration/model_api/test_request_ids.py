"""Request ids and idempotency: a double submit of one `x-request-id` in one organization is 409
`request_in_progress`; a client `Idempotency-Key` is not supported — not forwarded, and without effect."""

from __future__ import annotations

import openai
import pytest

from tests.fakes import Fault
from tests.integration.model_api.error_bodies import assert_envelope_a

CHAT = "/v1/chat/completions"
BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "only once"}]}
STREAM = {**BODY, "stream": True}


def test_second_request_with_an_in_flight_request_id_is_409(http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="g"))
    with http.stream("POST", CHAT, json=STREAM, headers={"x-request-id": "submit-1"}) as first:
        assert first.status_code == 200
        assert alpha.wait_held("g")
        second = http.post(CHAT, json=BODY, headers={"x-request-id": "submit-1"})
        assert_envelope_a(second, 409, "invalid_request_error", code="request_in_progress")
        alpha.release("g")
        assert first.read().endswith(b"data: [DONE]\n\n")
    assert len(alpha.requests_to(CHAT)) == 1


def test_request_id_is_free_again_once_its_request_finished(http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="g"))
    with http.stream("POST", CHAT, json=STREAM, headers={"x-request-id": "submit-2"}) as first:
        assert alpha.wait_held("g")
        alpha.release("g")
        first.read()
    assert http.post(CHAT, json=BODY, headers={"x-request-id": "submit-2"}).status_code == 200


def test_same_request_id_from_another_organization_is_not_refused(http, other_http, alpha) -> None:
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="g"))
    with http.stream("POST", CHAT, json=STREAM, headers={"x-request-id": "shared-id"}) as first:
        assert alpha.wait_held("g")
        other = other_http.post(CHAT, json=BODY, headers={"x-request-id": "shared-id"})
        assert other.status_code == 200, other.text
        alpha.release("g")
        first.read()
    assert len(alpha.requests_to(CHAT)) == 2


def test_double_submit_surfaces_as_a_conflict_error_in_the_sdk(http, client, alpha) -> None:
    alpha.add_fault(CHAT, Fault(hold_before_last_chunk="g"))
    with http.stream("POST", CHAT, json=STREAM, headers={"x-request-id": "submit-3"}):
        assert alpha.wait_held("g")
        with pytest.raises(openai.ConflictError) as raised:
            client.chat.completions.create(**BODY, extra_headers={"x-request-id": "submit-3"})
        alpha.release("g")
    assert raised.value.status_code == 409
    assert raised.value.code == "request_in_progress"


def test_request_id_is_echoed_and_sent_upstream(http, alpha) -> None:
    response = http.post(CHAT, json=BODY, headers={"x-request-id": "trace-abc"})
    assert response.headers["x-request-id"] == "trace-abc"
    assert alpha.requests_to(CHAT)[0].headers["x-request-id"] == "trace-abc"


def test_idempotency_key_is_not_forwarded_upstream(http, alpha) -> None:
    assert http.post(CHAT, json=BODY, headers={"Idempotency-Key": "idem-1"}).status_code == 200
    sent = alpha.requests_to(CHAT)[0]
    assert "idempotency-key" not in sent.headers
    assert b"idem-1" not in sent.body


def test_idempotency_key_has_no_effect(http, alpha) -> None:
    first = http.post(CHAT, json=BODY, headers={"Idempotency-Key": "idem-2"})
    second = http.post(CHAT, json=BODY, headers={"Idempotency-Key": "idem-2"})
    assert first.status_code == second.status_code == 200
    assert first.json()["id"] != second.json()["id"]  # not a replay: the upstream answered twice
    assert len(alpha.requests_to(CHAT)) == 2


def test_sdk_idempotency_header_is_not_forwarded(client, alpha) -> None:
    client.chat.completions.create(**BODY, extra_headers={"Idempotency-Key": "idem-3"})
    assert "idempotency-key" not in alpha.requests_to(CHAT)[0].headers
