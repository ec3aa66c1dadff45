"""Stored response and video ids are the provider's and opaque: whatever their length (up to 256 bytes) and
alphabet (any character a URL path segment carries as it is), the gateway binds them, so retrieve, delete
and `previous_response_id` reach the row that made them. An id no URL path could carry is left unbound.
"""

from __future__ import annotations

import logging

import pytest

from tests.fakes import Fault
from tests.integration.model_api.error_bodies import assert_envelope_a

pytestmark = pytest.mark.shared_gateway

RESPONSES = "/v1/responses"
LONG_ID = "resp_" + "Ab9_-" * 40 + "=="  # 207 bytes, with base64 padding
FOREIGN_ID = "gen-1718000000-AbC+dEf~x.y:z=="  # another provider's scheme, no resp_ prefix


def _create(http, alpha, object_id: str, **fields) -> dict:
    alpha.add_fault(RESPONSES, Fault(object_id=object_id))
    reply = http.post(RESPONSES, json={"model": "gpt-test", "input": "hello", **fields})
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize("object_id", [LONG_ID, FOREIGN_ID], ids=["long-with-padding", "not-resp-prefixed"])
def test_a_response_id_of_any_shape_can_be_retrieved_followed_up_and_deleted(
    client, http, alpha, object_id
) -> None:
    created = _create(http, alpha, object_id)
    retrieved = client.responses.retrieve(object_id)
    follow_up = http.post(
        RESPONSES, json={"model": "gpt-test", "input": "and then?", "previous_response_id": object_id}
    )
    deleted = http.delete(f"{RESPONSES}/{object_id}")
    after = http.get(f"{RESPONSES}/{object_id}")

    assert created["id"] == retrieved.id == object_id
    assert follow_up.status_code == 200, follow_up.text
    assert alpha.requests_to(RESPONSES)[-1].json["previous_response_id"] == object_id
    assert deleted.status_code == 200, deleted.text
    assert_envelope_a(after, 404, "invalid_request_error")


def test_a_streamed_response_with_a_foreign_id_is_bound_too(client, alpha) -> None:
    alpha.add_fault(RESPONSES, Fault(object_id=FOREIGN_ID))
    with client.responses.stream(model="gpt-test", input="hello") as stream:
        final = stream.get_final_response()
    assert final.id == FOREIGN_ID
    assert client.responses.retrieve(FOREIGN_ID).id == FOREIGN_ID


def test_a_video_id_of_another_shape_can_be_retrieved(media_http, alpha) -> None:
    video_id = "vid.01J2XYZ=" + "k" * 100
    alpha.add_fault("/v1/videos", Fault(object_id=video_id))
    created = media_http.post("/v1/videos", json={"model": "video-test", "prompt": "waves", "seconds": "4"})
    retrieved = media_http.get(f"/v1/videos/{video_id}")

    assert created.status_code == 200, created.text
    assert created.json()["id"] == video_id
    assert retrieved.status_code == 200, retrieved.text
    assert retrieved.json()["id"] == video_id


@pytest.mark.parametrize(
    "object_id",
    ["resp_" + "a" * 252, "resp_with/slash", "resp_with space", "resp_\u0001control", "resp_caf\u00e9"],
    ids=["over-256-bytes", "slash", "space", "control-byte", "non-ascii"],
)
def test_an_id_no_url_path_can_carry_is_relayed_but_left_unbound(
    http, alpha, caplog: pytest.LogCaptureFixture, object_id
) -> None:
    caplog.set_level(logging.WARNING, logger="modelgate.objects")
    created = _create(http, alpha, object_id)
    follow_up = http.post(
        RESPONSES, json={"model": "gpt-test", "input": "and then?", "previous_response_id": object_id}
    )

    assert created["id"] == object_id  # the answer itself is the provider's
    assert_envelope_a(follow_up, 400, "invalid_request_error")
    assert "cannot be bound" in caplog.text


def test_a_path_id_no_object_can_have_is_404_without_reaching_a_provider(http, alpha) -> None:
    reply = http.get(f"{RESPONSES}/resp_%20spaced")
    assert_envelope_a(reply, 404, "invalid_request_error")
    assert alpha.requests == []
