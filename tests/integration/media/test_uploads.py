"""Multipart uploads are streamed: counted part by part as they pass (413 the moment a limit is passed, the
upstream request aborted), forwarded unchanged to one row while the client is still sending, and routed on a
`model` field that must come before the file parts. Bodies are generated lazily."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import Fault
from tests.integration.media.conftest import (
    MULTIPART,
    MiB,
    file_head,
    filler,
    multipart,
)
from tests.integration.model_api.error_bodies import assert_envelope_a

# aiohttp's own multipart reader (the fake's) uses a deprecated call of its stream internally.
pytestmark = pytest.mark.filterwarnings("ignore:unread_data:DeprecationWarning")


def assert_too_large(response) -> None:
    assert_envelope_a(response, 413, "invalid_request_error", code="request_too_large")


def aborted_upload(fake, part: str, at_least: int) -> None:
    """The row received the upload as it came, up to about the limit, then the gateway broke it off."""
    assert fake.media.wait_uploads(1)
    (upload,) = fake.media.uploads
    assert not upload.complete
    assert at_least <= upload.part(part).size <= at_least + MiB


# -- limits, counted while streaming -------------------------------------------------------------------


def test_a_26_mib_image_part_is_413_and_the_upload_is_aborted(http, alpha) -> None:
    total, chunks = multipart([("model", "image-test"), ("prompt", "x")], [("image", 26 * MiB)])
    assert total < 32 * MiB
    assert_too_large(http.post("/v1/images/edits", content=chunks, headers=MULTIPART))
    aborted_upload(alpha, "image", 24 * MiB)


def test_a_33_mib_image_request_is_413_and_the_upload_is_aborted(http, alpha) -> None:
    _total, chunks = multipart([("model", "image-test")], [("image", 17 * MiB), ("mask", 16 * MiB)])
    assert_too_large(http.post("/v1/images/variations", content=chunks, headers=MULTIPART))
    aborted_upload(alpha, "mask", 14 * MiB)


def test_a_declared_33_mib_image_request_is_413_before_anything_is_read(http, alpha) -> None:
    total, chunks = multipart([("model", "image-test")], [("image", 17 * MiB), ("mask", 16 * MiB)])
    response = http.post(
        "/v1/images/edits", content=chunks, headers={**MULTIPART, "content-length": str(total)}
    )
    assert_too_large(response)
    assert alpha.media.uploads == []


def test_a_25_mib_part_in_a_32_mib_request_passes_whole(http, alpha) -> None:
    total, chunks = multipart([("model", "image-test")], [("image", 25 * MiB), ("mask", 6 * MiB)])
    assert total <= 32 * MiB
    response = http.post("/v1/images/edits", content=chunks, headers=MULTIPART)
    assert response.status_code == 200, response.text
    (upload,) = alpha.media.uploads
    assert (upload.part("image").size, upload.part("mask").size) == (25 * MiB, 6 * MiB)


def test_a_26_mib_audio_upload_is_413(http, alpha) -> None:
    _total, chunks = multipart([("model", "whisper-test")], [("file", 26 * MiB)])
    assert_too_large(http.post("/v1/audio/transcriptions", content=chunks, headers=MULTIPART))
    aborted_upload(alpha, "file", 24 * MiB)


def test_a_101_mib_multipart_video_is_413_and_the_upload_is_aborted(http, alpha) -> None:
    _total, chunks = multipart([("model", "video-test"), ("prompt", "x")], [("input_reference", 101 * MiB)])
    assert_too_large(http.post("/v1/videos", content=chunks, headers=MULTIPART))
    aborted_upload(alpha, "input_reference", 99 * MiB)


def test_a_99_mib_multipart_video_passes(http, alpha) -> None:
    total, chunks = multipart([("model", "video-test"), ("prompt", "x")], [("input_reference", 99 * MiB)])
    response = http.post("/v1/videos", content=chunks, headers={**MULTIPART, "content-length": str(total)})
    assert response.status_code == 200, response.text
    (upload,) = alpha.media.uploads
    assert upload.complete and upload.part("input_reference").size == 99 * MiB
    # The body went through unchanged but for the model's name, so the length sent was adjusted to match.
    assert upload.content_length == total + len("sora-upstream") - len("video-test")


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_5_mib_json_video_request_is_413(http, alpha, declared) -> None:
    head = b'{"model": "video-test", "prompt": "'
    size = 5 * MiB

    def body() -> Iterator[bytes]:
        yield head
        yield from (
            chunk.replace(b"\x00", b"a").replace(b"\x01", b"b") for chunk in filler(size - len(head) - 2)
        )
        yield b'"}'

    headers = {"content-type": "application/json"}
    if declared:
        headers["content-length"] = str(size)
    assert_too_large(http.post("/v1/videos", content=body(), headers=headers))
    assert alpha.requests_to("/v1/videos") == []


# -- chunked uploads, field order, streaming -----------------------------------------------------------


def test_a_chunked_upload_without_content_length_is_streamed_chunked(http, alpha) -> None:
    _total, chunks = multipart([("model", "whisper-test")], [("file", 3 * MiB)])
    response = http.post("/v1/audio/transcriptions", content=chunks, headers=MULTIPART)
    assert response.status_code == 200, response.text
    (upload,) = alpha.media.uploads
    assert upload.complete and upload.part("file").size == 3 * MiB
    assert upload.content_length is None  # relayed chunked too: nothing waited for the whole body


def test_model_after_the_file_is_400(http, alpha) -> None:
    _total, chunks = multipart([("prompt", "x")], [("image", MiB)], fields_after=[("model", "image-test")])
    response = http.post("/v1/images/edits", content=chunks, headers=MULTIPART)
    assert_envelope_a(
        response,
        400,
        "invalid_request_error",
        message="the `model` field must come before file parts in multipart bodies",
    )
    assert alpha.media.uploads == []


def test_fields_after_the_file_still_reach_the_row(http, alpha) -> None:
    _total, chunks = multipart([("model", "image-test")], [("image", MiB)], fields_after=[("n", "2")])
    response = http.post("/v1/images/edits", content=chunks, headers=MULTIPART)
    assert response.status_code == 200 and len(response.json()["data"]) == 2
    assert alpha.media.uploads[0].fields["n"] == "2"


def test_a_malformed_multipart_body_is_400(http, alpha) -> None:
    response = http.post("/v1/images/edits", content=b"not multipart at all", headers=MULTIPART)
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.media.uploads == []


def test_an_upload_missing_its_closing_boundary_is_400_and_aborted(http, alpha) -> None:
    body = [b'--media-test-boundary\r\nContent-Disposition: form-data; name="model"\r\n\r\nimage-test\r\n']
    body += [file_head("image"), b"x" * (2 * MiB)]
    assert_envelope_a(
        http.post("/v1/images/edits", content=iter(body), headers=MULTIPART), 400, "invalid_request_error"
    )
    aborted_upload(alpha, "image", MiB)


def test_the_upstream_receives_the_upload_before_the_client_finished_sending(http, alpha) -> None:
    seen_midway: list[bool] = []

    def body() -> Iterator[bytes]:
        _total, chunks = multipart([("model", "image-test")], [("image", 8 * MiB)])
        for index, chunk in enumerate(chunks):
            yield chunk
            if index == 4:  # model, image head, 3 MiB of the image sent; 5 MiB still to come
                # Bounded wait: the fake counts part bytes as they arrive; a buffering gateway would
                # send it nothing before the last byte left this generator.
                seen_midway.append(alpha.media.wait_receiving(2 * MiB, timeout=10))

    response = http.post("/v1/images/edits", content=body(), headers=MULTIPART)
    assert response.status_code == 200, response.text
    assert seen_midway == [True]
    assert alpha.media.uploads[0].part("image").size == 8 * MiB


def test_a_streamed_upload_is_not_failed_over(http, alpha, beta) -> None:
    # video-failover prefers beta: a JSON body would fail over to alpha, a streamed one cannot be replayed.
    beta.add_fault("/v1/images/edits", Fault(status=503))
    _total, chunks = multipart([("model", "video-failover")], [("image", MiB)])
    response = http.post("/v1/images/edits", content=chunks, headers=MULTIPART)
    assert_envelope_a(response, 502, "server_error", code="upstream_unavailable")
    assert alpha.media.uploads == [] and alpha.requests_to("/v1/images/edits") == []
