"""The responses route: its own 400 rules, and stored responses that follow-ups find on the row that made
them — for their own organization only."""

from __future__ import annotations

import pytest

from tests.fakes import Fault
from tests.integration.model_api.error_bodies import assert_envelope_a

RESPONSES = "/v1/responses"


def create(http, **fields):
    response = http.post(RESPONSES, json={"model": "gpt-test", "input": "hello", **fields})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"store": "yes"}, id="store-string"),
        pytest.param({"store": 1}, id="store-number"),
        pytest.param({"background": "true"}, id="background-string"),
        pytest.param({"background": True, "store": False}, id="background-without-store"),
        pytest.param({"previous_response_id": 123}, id="previous-number"),
        pytest.param({"previous_response_id": "chatcmpl-abc"}, id="previous-not-a-response-id"),
        pytest.param({"previous_response_id": ""}, id="previous-empty"),
        pytest.param({"previous_response_id": "resp_unknown000000"}, id="previous-unknown"),
        pytest.param({"conversation": 5}, id="conversation-number"),
        pytest.param({"conversation": "resp_abc"}, id="conversation-not-a-conversation-id"),
        pytest.param({"conversation": {"id": 7}}, id="conversation-object-without-id"),
        pytest.param(
            {"conversation": "conv_abc", "previous_response_id": "resp_abc"}, id="conversation-with-previous"
        ),
    ],
)
def test_invalid_responses_parameter_is_400_without_code(http, alpha, fields) -> None:
    response = http.post(RESPONSES, json={"model": "gpt-test", "input": "hello", **fields})
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.requests == []


@pytest.mark.parametrize("flag", ["store", "background"])
def test_null_store_or_background_means_not_given(http, flag) -> None:
    created = create(http, **{flag: None})
    assert created["store"] is True


def test_stored_response_is_retrievable_through_the_gateway(http, alpha) -> None:
    created = create(http)
    response = http.get(f"{RESPONSES}/{created['id']}")
    assert response.status_code == 200, response.text
    assert response.json()["id"] == created["id"]
    assert response.json()["output"][0]["content"][0]["text"] == "echo: hello"
    assert [r.method for r in alpha.requests] == ["POST", "GET"]


def test_stored_response_is_deletable_and_then_gone(http, alpha) -> None:
    created = create(http)
    deleted = http.delete(f"{RESPONSES}/{created['id']}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"id": created["id"], "object": "response.deleted", "deleted": True}
    after = http.get(f"{RESPONSES}/{created['id']}")
    assert_envelope_a(after, 404, "invalid_request_error")


def test_follow_ups_reach_the_row_that_stored_the_response(http, alpha, beta) -> None:
    alpha.add_fault(RESPONSES, Fault(status=500))  # the first answer comes from the priority-1 row
    created = create(http)
    assert len(beta.requests_to(RESPONSES)) == 1
    # alpha is healthy again and first by priority, yet every follow-up must go where the object lives.
    assert http.get(f"{RESPONSES}/{created['id']}").status_code == 200
    follow_up = create(http, previous_response_id=created["id"], input="and then?")
    assert follow_up["previous_response_id"] == created["id"]
    assert http.delete(f"{RESPONSES}/{created['id']}").status_code == 200
    assert [(r.method, r.path) for r in beta.requests] == [
        ("POST", RESPONSES),
        ("GET", f"{RESPONSES}/{created['id']}"),
        ("POST", RESPONSES),
        ("DELETE", f"{RESPONSES}/{created['id']}"),
    ]
    assert beta.requests[2].json["model"] == "gpt-upstream-b"
    assert [r.method for r in alpha.requests] == ["POST"]


def test_streamed_response_is_stored_and_retrievable(http, alpha) -> None:
    with http.stream(
        "POST", RESPONSES, json={"model": "gpt-test", "input": "hi", "stream": True}
    ) as streamed:
        assert streamed.status_code == 200
        body = streamed.read()
    assert b"response.completed" in body
    response_id = "resp_" + body.split(b'"id":"resp_', 1)[1].split(b'"', 1)[0].decode()
    retrieved = http.get(f"{RESPONSES}/{response_id}")
    assert retrieved.status_code == 200, retrieved.text
    assert retrieved.json()["output"][0]["content"][0]["text"] == "echo: hi"


def test_unstored_response_is_not_retrievable(http, alpha) -> None:
    created = create(http, store=False)
    assert_envelope_a(http.get(f"{RESPONSES}/{created['id']}"), 404, "invalid_request_error")
    assert [r.method for r in alpha.requests] == ["POST"]


def test_unknown_response_id_is_404_without_code(http, alpha) -> None:
    response = http.get(f"{RESPONSES}/resp_doesnotexist")
    assert_envelope_a(response, 404, "invalid_request_error")
    assert alpha.requests == []


def test_another_organizations_response_is_404_on_get(http, other_http, alpha) -> None:
    created = create(http)
    response = other_http.get(f"{RESPONSES}/{created['id']}")
    assert_envelope_a(response, 404, "invalid_request_error")
    assert [r.method for r in alpha.requests] == ["POST"]


def test_another_organizations_response_cannot_be_deleted(http, other_http, alpha) -> None:
    created = create(http)
    response = other_http.delete(f"{RESPONSES}/{created['id']}")
    assert_envelope_a(response, 404, "invalid_request_error")
    assert http.get(f"{RESPONSES}/{created['id']}").status_code == 200


def test_another_organizations_response_as_previous_response_id_is_400(http, other_http, alpha) -> None:
    created = create(http)
    response = other_http.post(
        RESPONSES, json={"model": "gpt-test", "input": "x", "previous_response_id": created["id"]}
    )
    assert_envelope_a(response, 400, "invalid_request_error")
    assert len(alpha.requests_to(RESPONSES)) == 1
