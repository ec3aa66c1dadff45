"""Videos: create (JSON or multipart), retrieve, list, delete and content with the openai SDK. Each video id
is bound to its organization and row: follow-ups reach the provider that made it, and another organization's
id is 404 without a code (the spec's unknown task identifier). Content is streamed chunk by chunk."""

from __future__ import annotations

import io
import threading

import httpx
import openai
import pytest

from tests.fakes import Fault
from tests.integration.media.conftest import PER_VIDEO_SECOND_USD, MiB, ledger_row
from tests.integration.model_api.error_bodies import assert_envelope_a
from tests.support.gateway import register_tenant

# The SDK marks the whole videos API deprecated (the provider's shutdown date); the calls still work.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_video_lifecycle_through_the_sdk(client: openai.OpenAI, alpha) -> None:
    video = client.videos.create(model="video-test", prompt="a fox in the snow", seconds="8")
    assert video.id.startswith("video_") and video.status == "queued"
    # The SDK sends multipart (no reference file): the fields reached the row, model renamed.
    (upload,) = alpha.media.uploads
    assert upload.fields["model"] == "sora-upstream" and upload.fields["prompt"] == "a fox in the snow"
    assert client.videos.retrieve(video.id).status == "completed"
    assert [v.id for v in client.videos.list()] == [video.id]
    content = client.videos.download_content(video.id)
    assert len(content.read()) == alpha.media.video_content_size
    deleted = client.videos.delete(video.id)
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve(video.id)


def test_video_create_with_a_reference_file_streams_it(client: openai.OpenAI, alpha) -> None:
    reference = bytes(range(256)) * 4096  # 1 MiB
    video = client.videos.create(
        model="video-test",
        prompt="continue this",
        input_reference=("ref.png", io.BytesIO(reference), "image/png"),
    )
    assert video.id.startswith("video_")
    (upload,) = alpha.media.uploads
    assert upload.part("input_reference").size == len(reference)


def test_video_create_in_json_is_bound_and_charged_per_second(http, alpha, stack) -> None:
    response = http.post("/v1/videos", json={"model": "video-test", "prompt": "waves", "seconds": "12"})
    assert response.status_code == 200, response.text
    assert alpha.requests_to("/v1/videos")[0].json["model"] == "sora-upstream"
    row = ledger_row(stack.gateway.storage_url, response.headers["x-request-id"])
    assert row["units"] == 12 and row["cost_micros"] == round(12 * PER_VIDEO_SECOND_USD * 1_000_000)
    video_id = response.json()["id"]
    follow_up = http.get(f"/v1/videos/{video_id}")
    assert follow_up.status_code == 200 and follow_up.json()["model"] == "video-test"  # never the row's
    assert ledger_row(stack.gateway.storage_url, follow_up.headers["x-request-id"])["cost_micros"] == 0


def test_follow_ups_reach_the_row_that_made_the_video(http, alpha, beta) -> None:
    # video-failover prefers beta; beta fails, so alpha makes the video (JSON bodies fail over)...
    beta.add_fault("/v1/videos", Fault(status=503))
    created = http.post("/v1/videos", json={"model": "video-failover", "prompt": "x"})
    assert created.status_code == 200, created.text
    video_id = created.json()["id"]
    # ...and every follow-up goes to alpha, though beta is healthy again.
    assert http.get(f"/v1/videos/{video_id}").status_code == 200
    assert http.get(f"/v1/videos/{video_id}/content").status_code == 200
    assert http.delete(f"/v1/videos/{video_id}").status_code == 200
    assert [r.method for r in alpha.requests if r.path.startswith(f"/v1/videos/{video_id}")] == [
        "GET",
        "GET",
        "DELETE",
    ]
    assert not [r for r in beta.requests if r.path.startswith("/v1/videos/")]


@pytest.mark.parametrize(
    ("method", "suffix"), [("GET", ""), ("GET", "/content"), ("DELETE", "")], ids=["get", "content", "delete"]
)
def test_another_organizations_video_is_404_without_a_code(http, other_http, alpha, method, suffix) -> None:
    video_id = http.post("/v1/videos", json={"model": "video-test", "prompt": "mine"}).json()["id"]
    response = other_http.request(method, f"/v1/videos/{video_id}{suffix}")
    assert_envelope_a(response, 404, "invalid_request_error")
    assert alpha.requests_to(f"/v1/videos/{video_id}{suffix}") == []


def test_unknown_video_id_is_404_without_a_code(http) -> None:
    assert_envelope_a(http.get("/v1/videos/video_doesnotexist"), 404, "invalid_request_error")
    assert_envelope_a(http.get("/v1/videos/video_doesnotexist/content"), 404, "invalid_request_error")


def test_video_list_shows_only_this_organizations_videos(http, other_http) -> None:
    mine = [
        http.post("/v1/videos", json={"model": "video-test", "prompt": str(i)}).json()["id"] for i in range(3)
    ]
    theirs = other_http.post("/v1/videos", json={"model": "video-test", "prompt": "x"}).json()["id"]
    listed = http.get("/v1/videos", params={"order": "asc", "limit": 100}).json()
    ids = [v["id"] for v in listed["data"]]
    assert set(mine) <= set(ids) and theirs not in ids
    assert all(v["object"] == "video" and v["model"] == "video-test" for v in listed["data"])
    assert [v["id"] for v in other_http.get("/v1/videos").json()["data"]] == [theirs]


def test_video_list_pages_with_after(other_http) -> None:
    made = [
        other_http.post("/v1/videos", json={"model": "video-test", "prompt": str(i)}).json()["id"]
        for i in range(3)
    ]
    first = other_http.get("/v1/videos", params={"limit": 2, "order": "asc"}).json()
    assert first["has_more"] is True
    second = other_http.get(
        "/v1/videos", params={"limit": 2, "order": "asc", "after": first["last_id"]}
    ).json()
    listed = [v["id"] for v in first["data"] + second["data"]]
    assert listed[-3:] == made and second["has_more"] is False


def test_video_content_is_streamed_chunk_by_chunk(http, alpha) -> None:
    alpha.media.video_content_size = 8 * MiB
    video_id = http.post("/v1/videos", json={"model": "video-test", "prompt": "long"}).json()["id"]
    alpha.add_fault(f"/v1/videos/{video_id}/content", Fault(hold_before_last_chunk="content-end"))
    releaser = threading.Timer(10, alpha.release, args=("content-end",))  # a safety net, never the path
    releaser.start()
    try:
        with http.stream("GET", f"/v1/videos/{video_id}/content", params={"variant": "video"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "video/mp4"
            chunks = response.iter_bytes(MiB)
            first = next(chunks)
            # Most of the video reached the client while the upstream still holds its last chunk.
            assert alpha.wait_held("content-end", timeout=5)
            assert len(first) == MiB
            alpha.release("content-end")
            total = len(first) + sum(len(c) for c in chunks)
        assert total == 8 * MiB
        assert alpha.requests_to(f"/v1/videos/{video_id}/content")[0].query == {"variant": "video"}
    finally:
        releaser.cancel()


def test_video_bindings_and_pages_on_postgresql(media_gateway, pg_server_url, alpha) -> None:
    own = media_gateway(storage_url=pg_server_url)
    owner, other = register_tenant(own.base_url), register_tenant(own.base_url)
    with (
        httpx.Client(base_url=own.base_url, headers={"authorization": f"Bearer {owner.api_key}"}) as mine,
        httpx.Client(base_url=own.base_url, headers={"authorization": f"Bearer {other.api_key}"}) as theirs,
    ):
        made = [
            mine.post("/v1/videos", json={"model": "video-test", "prompt": str(i)}).json()["id"]
            for i in range(3)
        ]
        first = mine.get("/v1/videos", params={"limit": 2}).json()
        second = mine.get("/v1/videos", params={"limit": 2, "after": first["last_id"]}).json()
        assert [v["id"] for v in first["data"] + second["data"]] == made[::-1]
        assert theirs.get("/v1/videos").json()["data"] == []
        assert_envelope_a(theirs.get(f"/v1/videos/{made[0]}"), 404, "invalid_request_error")
        assert mine.delete(f"/v1/videos/{made[0]}").status_code == 200
        assert [v["id"] for v in mine.get("/v1/videos").json()["data"]] == made[:0:-1]
