"""A guarded multipart upload as a real upstream receives it: sent with aiohttp as the provider client sends
one (`modelgate/proxy/upstream/providers.py`), to the fake's multipart reader. Redacted fields arrive
redacted, the file whole; a refusal mid-body breaks the upload off before the refused field is out."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from modelgate.domain.errors import PolicyBlocked
from modelgate.proxy.http.multipart import MultipartLimits, StreamedMultipart
from tests.fakes import FakeUpstream
from tests.integration.media.conftest import MULTIPART, MiB, multipart

# aiohttp's own multipart reader (the fake's) uses a deprecated call of its stream internally.
pytestmark = pytest.mark.filterwarnings("ignore:unread_data:DeprecationWarning")

LIMITS = MultipartLimits(total=32 * MiB, part=25 * MiB)


class ChunkSource:
    """A client's body arriving chunk by chunk."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks

    async def readany(self) -> bytes:
        return next(self._chunks, b"")


@pytest.fixture(scope="module")
def module_fake() -> Iterator[FakeUpstream]:
    with FakeUpstream("guarded") as fake:
        yield fake


@pytest.fixture
def fake(module_fake: FakeUpstream) -> FakeUpstream:
    module_fake.clear()
    return module_fake


def redact(name: str, value: str) -> str:
    return value.replace("ann@example.test", "[REDACTED:email]")


async def send(fake: FakeUpstream, stream: StreamedMultipart) -> int:
    """POST the stream as the provider client does; the upstream's status."""
    headers = {"content-type": stream.content_type}
    if stream.length is not None:
        headers["content-length"] = str(stream.length)
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{fake.base_url}/v1/images/edits", data=stream, headers=headers) as response,
    ):
        return response.status


async def opened(chunks: Iterator[bytes], total: int) -> StreamedMultipart:
    stream = StreamedMultipart(ChunkSource(chunks), MULTIPART["content-type"], LIMITS, total)
    await stream.read_head()
    stream.rewrite_model("gpt-image-upstream")
    return stream


async def test_a_field_after_the_file_arrives_redacted_and_the_file_whole(fake: FakeUpstream) -> None:
    total, chunks = multipart(
        [("model", "image-test")], [("image", 3 * MiB)], fields_after=[("prompt", "mail ann@example.test")]
    )
    stream = await opened(chunks, total)
    stream.set_text_guard(redact)
    assert await send(fake, stream) == 200
    (upload,) = fake.media.uploads
    assert upload.complete and upload.part("image").size == 3 * MiB
    assert upload.fields == {"model": "gpt-image-upstream", "prompt": "mail [REDACTED:email]"}
    assert upload.content_length is None  # the length could change after the headers: sent chunked


async def test_a_body_whole_before_routing_keeps_its_exact_content_length(fake: FakeUpstream) -> None:
    total, chunks = multipart([("model", "image-test"), ("prompt", "to ann@example.test")], [("image", 1000)])
    stream = await opened(iter([b"".join(chunks)]), total)
    stream.set_text_guard(redact)
    assert await send(fake, stream) == 200
    (upload,) = fake.media.uploads
    assert upload.fields["prompt"] == "to [REDACTED:email]"
    assert upload.content_length == total + len("gpt-image-upstream[REDACTED:email]") - len(
        "image-testann@example.test"
    )


async def test_a_refused_field_breaks_the_upload_off_before_it_is_sent(fake: FakeUpstream) -> None:
    def block(name: str, value: str) -> str:
        if "ann@example.test" in value:
            raise PolicyBlocked("blocked by a content rule")
        return value

    total, chunks = multipart(
        [("model", "image-test")], [("image", 2 * MiB)], fields_after=[("prompt", "mail ann@example.test")]
    )
    stream = await opened(chunks, total)
    stream.set_text_guard(block)
    with pytest.raises(aiohttp.ClientError):
        await send(fake, stream)
    assert isinstance(stream.error, PolicyBlocked)
    assert fake.media.wait_uploads(1)
    (upload,) = fake.media.uploads
    assert not upload.complete and "prompt" not in upload.fields
