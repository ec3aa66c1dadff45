"""Content rules on the text fields of multipart uploads (image edits, transcriptions): checked before their
bytes leave the gateway, while file parts stream through."""

from __future__ import annotations

import io

import httpx
import openai
import pytest

from tests.integration.content_policy.conftest import Stack

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64
AUDIO = bytes(range(256)) * 625


def test_an_image_edit_prompt_is_redacted_before_it_leaves(stack: Stack) -> None:
    stack.rule("redact", detectors=["email"])
    with stack.openai() as client:
        client.images.edit(
            model="gpt", image=("photo.png", io.BytesIO(PNG), "image/png"), prompt="sign it carol@example.net"
        )
    (upload,) = stack.oai.media.uploads
    assert upload.complete and upload.part("image").size == len(PNG)
    assert upload.fields["prompt"] == "sign it [REDACTED:email]"


def test_a_blocked_image_edit_prompt_is_403_and_no_upload_completes(stack: Stack) -> None:
    rule = stack.rule("block", phrases=["forbidden logo"])
    with stack.openai() as client, pytest.raises(openai.PermissionDeniedError) as caught:
        client.images.edit(
            model="gpt", image=("photo.png", io.BytesIO(PNG), "image/png"), prompt="draw the Forbidden Logo"
        )
    assert rule["id"] in caught.value.message
    assert not any(upload.complete for upload in stack.oai.media.uploads)


def test_a_transcription_prompt_after_the_file_is_checked_too(stack: Stack) -> None:
    stack.rule("block", phrases=["forbidden logo"])
    body = (
        b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\ngpt\r\n'
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.mp3"\r\n'
        b"Content-Type: audio/mpeg\r\n\r\n" + AUDIO + b"\r\n"
        b'--b\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nthe forbidden logo\r\n--b--\r\n'
    )
    reply = httpx.post(
        f"{stack.base_url}/v1/audio/transcriptions",
        content=body,
        headers={
            "authorization": f"Bearer {stack.tenant.api_key}",
            "content-type": "multipart/form-data; boundary=b",
        },
        timeout=30,
    )
    assert reply.status_code == 403, reply.text
    assert not any(upload.complete for upload in stack.oai.media.uploads)
