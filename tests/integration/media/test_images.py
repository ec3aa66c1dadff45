"""Images: generations (JSON), edits and variations (multipart, streamed to the row) with the openai SDK,
charged per image."""

from __future__ import annotations

import io

import openai
import pytest

from tests.integration.media.conftest import PER_IMAGE_USD, ledger_row

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64  # 16 KiB of "image"


def test_images_generate_answers_the_sdk_and_names_the_upstream_model(client: openai.OpenAI, alpha) -> None:
    result = client.images.generate(model="image-test", prompt="a lighthouse", n=2)
    assert len(result.data) == 2 and result.data[0].b64_json
    sent = alpha.requests_to("/v1/images/generations")[0].json
    assert sent["model"] == "gpt-image-upstream" and sent["n"] == 2


def test_images_edit_streams_the_multipart_upload_to_the_row(client: openai.OpenAI, alpha) -> None:
    result = client.images.edit(
        model="image-test",
        image=("photo.png", io.BytesIO(PNG), "image/png"),
        mask=("mask.png", io.BytesIO(PNG[:1000]), "image/png"),
        prompt="add a moon",
    )
    assert len(result.data) == 1
    (upload,) = alpha.media.uploads
    assert upload.complete
    assert upload.part("image").size == len(PNG) and upload.part("mask").size == 1000
    # The client's model name never leaves the gateway: the `model` field names the row's model.
    assert upload.fields["model"] == "gpt-image-upstream"
    assert upload.fields["prompt"] == "add a moon"
    assert upload.content_type.startswith("multipart/form-data; boundary=")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK marks variations deprecated
def test_images_create_variation_through_the_sdk(client: openai.OpenAI, alpha) -> None:
    result = client.images.create_variation(
        model="image-test", image=("photo.png", io.BytesIO(PNG), "image/png"), n=3
    )
    assert len(result.data) == 3
    (upload,) = alpha.media.uploads
    assert upload.path == "/v1/images/variations" and upload.fields["n"] == "3"


def test_images_are_charged_per_image_of_the_answer(client: openai.OpenAI, stack) -> None:
    raw = client.images.with_raw_response.generate(model="image-test", prompt="three cats", n=3)
    row = ledger_row(stack.gateway.storage_url, raw.headers["x-request-id"])
    assert row["status"] == 200 and row["units"] == 3
    assert row["cost_micros"] == round(3 * PER_IMAGE_USD * 1_000_000)


def test_image_edit_with_a_model_that_does_not_edit_is_404_before_the_upload(http, alpha) -> None:
    body = b"".join(
        [
            b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-test\r\n',
            b'--b\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n\r\nxxxx\r\n--b--\r\n',
        ]
    )
    response = http.post(
        "/v1/images/edits", content=body, headers={"content-type": "multipart/form-data; boundary=b"}
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    assert alpha.media.uploads == []
