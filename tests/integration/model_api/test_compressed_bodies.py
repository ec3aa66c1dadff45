"""Request bodies sent with `Content-Encoding` (gzip, deflate, br, zstd) are decoded as they are read: the
route's limit applies to the decoded bytes, a body that expands past it (a zip bomb) is refused with 413 as
soon as it does, undecodable data is 400 and an encoding the gateway does not know is 415, all in the route's
envelope. The upstream gets the decoded body, without the client's `Content-Encoding`.
"""

from __future__ import annotations

import gzip
import os
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import brotli
import httpx
import openai
import orjson
import pytest
from backports import zstd

from tests.integration.model_api.error_bodies import assert_envelope_a, assert_envelope_b
from tests.integration.model_api.test_body_limits import MULTIPART, head_only, multipart_body

pytestmark = [pytest.mark.shared_gateway, pytest.mark.filterwarnings("ignore:unread_data:DeprecationWarning")]

MiB = 1024 * 1024
CHAT = "/v1/chat/completions"
JSON_TYPE = {"content-type": "application/json"}
CHAT_BODY = orjson.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": "hello " * 50}]})

ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,  # HTTP's "deflate" is the zlib format (RFC 9110 8.4.1.2)
    "br": brotli.compress,
    "zstd": zstd.compress,
}


def encoded(encoding: str, body: bytes) -> tuple[bytes, dict[str, str]]:
    return ENCODERS[encoding](body), {"content-type": "application/json", "content-encoding": encoding}


@pytest.mark.parametrize("encoding", list(ENCODERS))
def test_compressed_chat_request_is_decoded_and_forwarded_plain(http, alpha, encoding) -> None:
    body, headers = encoded(encoding, CHAT_BODY)
    response = http.post(CHAT, content=body, headers=headers)
    assert response.status_code == 200, response.text
    (forwarded,) = alpha.requests_to(CHAT)
    assert forwarded.json["messages"] == orjson.loads(CHAT_BODY)["messages"]
    assert forwarded.json["model"] == "gpt-upstream-a"
    assert "content-encoding" not in forwarded.headers
    assert int(forwarded.headers["content-length"]) == len(forwarded.body)


def test_raw_deflate_without_the_zlib_header_is_accepted(http, alpha) -> None:
    packer = zlib.compressobj(wbits=-15)
    body = packer.compress(CHAT_BODY) + packer.flush()
    response = http.post(
        CHAT, content=body, headers={"content-type": "application/json", "content-encoding": "deflate"}
    )
    assert response.status_code == 200, response.text


def test_chunked_compressed_request_is_decoded(http, alpha) -> None:
    body, headers = encoded("gzip", CHAT_BODY)
    response = http.post(CHAT, content=iter([body[:10], body[10:]]), headers=headers)
    assert response.status_code == 200, response.text
    assert alpha.requests_to(CHAT)[0].json["model"] == "gpt-upstream-a"


class CompressingTransport(httpx.BaseTransport):
    """Sends every request body gzip-compressed, as a client with request compression switched on does."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = gzip.compress(request.read())
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        headers["content-encoding"] = "gzip"
        return self._inner.handle_request(
            httpx.Request(request.method, request.url, headers=headers, content=body)
        )

    def close(self) -> None:
        self._inner.close()


def test_openai_sdk_with_gzip_request_bodies_gets_its_answer(gateway, tenant, alpha) -> None:
    with (
        httpx.Client(transport=CompressingTransport()) as compressing,
        openai.OpenAI(
            base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0, http_client=compressing
        ) as sdk,
    ):
        answer = sdk.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content
    assert alpha.requests_to(CHAT)[0].json["messages"] == [{"role": "user", "content": "hi"}]


def test_encoding_names_are_case_insensitive(http, alpha) -> None:
    response = http.post(
        CHAT,
        content=gzip.compress(CHAT_BODY),
        headers={"content-type": "application/json", "content-encoding": "GZip"},
    )
    assert response.status_code == 200, response.text


def test_identity_encoding_is_a_plain_body(http, alpha) -> None:
    response = http.post(
        CHAT, content=CHAT_BODY, headers={"content-type": "application/json", "content-encoding": "identity"}
    )
    assert response.status_code == 200, response.text


# -- limits apply to the decoded bytes ------------------------------------------------------------------


def zeros_gzip(size: int, model: str = "embed-test") -> bytes:
    """An embeddings request with `size` MiB-rounded zeros as input, gzip-compressed (about 1000:1)."""
    packer = zlib.compressobj(9, wbits=31)
    zeros = b"0" * MiB
    parts = [packer.compress(b'{"model": "' + model.encode() + b'", "input": "')]
    parts += [packer.compress(zeros) for _ in range(size // MiB)]
    parts.append(packer.compress(b'"}') + packer.flush())
    return b"".join(parts)


BOMB = zeros_gzip(10 * MiB)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_gzip_bomb_is_413_without_holding_the_decoded_body(http, alpha, chunked) -> None:
    assert len(BOMB) < 64 * 1024
    content = iter([BOMB]) if chunked else BOMB
    tracemalloc.start()
    try:
        response = http.post(
            "/v1/embeddings", content=content, headers={"content-encoding": "gzip", **JSON_TYPE}
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_envelope_a(response, 413, "invalid_request_error", code="request_too_large")
    # The gateway holds at most the 4 MiB the route allows (and its copy as bytes), never the 10 MiB.
    assert peak < 9 * MiB, peak
    assert alpha.requests == []


def test_compressed_body_is_measured_decoded_not_compressed(http, alpha) -> None:
    # A few KiB on the wire, 3 MiB decoded: under the 4 MiB limit, forwarded whole.
    response = http.post(
        "/v1/embeddings", content=zeros_gzip(3 * MiB), headers={"content-encoding": "gzip", **JSON_TYPE}
    )
    assert response.status_code == 200, response.text
    assert len(alpha.requests_to("/v1/embeddings")[0].json["input"]) == 3 * MiB


def test_compressed_body_declaring_more_than_the_limit_is_413_before_reading(gateway, tenant) -> None:
    status, body = head_only(
        gateway,
        CHAT,
        {
            "Authorization": f"Bearer {tenant.api_key}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Content-Length": str(10 * 1024**3),
        },
    )
    assert status == 413
    assert body["error"]["code"] == "request_too_large"


# -- undecodable data and unknown encodings ------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", b"this is not gzip at all"),
        ("gzip", gzip.compress(CHAT_BODY)[:-12]),
        ("deflate", b"\x78\x9c garbage"),
        ("br", b"\xff\xff\xff garbage"),
        ("br", brotli.compress(CHAT_BODY)[:-4]),
        ("zstd", b"not zstd"),
        ("zstd", zstd.compress(CHAT_BODY)[:-4]),
        ("gzip", gzip.compress(CHAT_BODY) + b"trailing junk"),
    ],
    ids=[
        "garbage-gzip",
        "truncated-gzip",
        "garbage-deflate",
        "garbage-br",
        "truncated-br",
        "garbage-zstd",
        "truncated-zstd",
        "gzip-trailing-junk",
    ],
)
def test_undecodable_body_is_400(http, alpha, encoding, body) -> None:
    response = http.post(CHAT, content=body, headers={"content-encoding": encoding, **JSON_TYPE})
    error = assert_envelope_a(response, 400, "invalid_request_error")
    assert error["message"].startswith("request body could not be decoded: "), error
    assert alpha.requests == []


def post_messages(gateway, tenant, body: bytes, encoding: str) -> httpx.Response:
    """POST /v1/messages the way the anthropic SDK authenticates, with the body in `encoding`."""
    headers = {"x-api-key": tenant.api_key, "anthropic-version": "2023-06-01", "content-encoding": encoding}
    return httpx.post(f"{gateway.base_url}/v1/messages", content=body, headers={**headers, **JSON_TYPE})


def test_undecodable_body_on_messages_is_400_in_envelope_b(gateway, tenant, claude) -> None:
    assert_envelope_b(
        post_messages(gateway, tenant, b"this is not gzip", "gzip"), 400, "invalid_request_error"
    )
    assert claude.requests == []


@pytest.mark.parametrize("encoding", ["compress", "x-unknown", "gzip, br", "gzip, gzip"])
def test_unknown_or_stacked_encoding_is_415(http, alpha, encoding) -> None:
    response = http.post(CHAT, content=CHAT_BODY, headers={"content-encoding": encoding, **JSON_TYPE})
    assert_envelope_a(response, 415, "invalid_request_error")
    assert alpha.requests == []


def test_unknown_encoding_on_messages_is_415_in_envelope_b(gateway, tenant, claude) -> None:
    assert_envelope_b(post_messages(gateway, tenant, CHAT_BODY, "compress"), 415, "invalid_request_error")
    assert claude.requests == []


# -- multipart uploads -------------------------------------------------------------------------------


def gzip_chunks(chunks: Iterator[bytes]) -> Iterator[bytes]:
    packer = zlib.compressobj(6, wbits=31)
    for chunk in chunks:
        yield packer.compress(chunk)
    yield packer.flush()


def test_gzip_compressed_audio_upload_reaches_the_row_decoded(media_http, alpha) -> None:
    _total, chunks = multipart_body([("file", 3 * MiB)], model="audio-test")
    response = media_http.post(
        "/v1/audio/transcriptions",
        content=gzip_chunks(chunks),
        headers={**MULTIPART, "content-encoding": "gzip"},
    )
    assert response.status_code == 200, response.text[:300]
    (upload,) = alpha.media.uploads
    assert upload.complete and upload.part("file").size == 3 * MiB
    assert upload.content_length is None  # the decoded length is not known before it is relayed


def test_gzip_compressed_audio_upload_over_25_mib_decoded_is_413(media_http, alpha) -> None:
    _total, chunks = multipart_body([("file", 26 * MiB)], model="audio-test")
    response = media_http.post(
        "/v1/audio/transcriptions",
        content=gzip_chunks(chunks),
        headers={**MULTIPART, "content-encoding": "gzip"},
    )
    assert_envelope_a(response, 413, "invalid_request_error", code="request_too_large")


def test_garbage_in_a_compressed_upload_is_400(media_http, alpha) -> None:
    _total, chunks = multipart_body([("file", 1 * MiB)], model="audio-test")
    compressed = b"".join(gzip_chunks(chunks))
    response = media_http.post(
        "/v1/audio/transcriptions",
        content=compressed[:-100] + b"\x00" * 100,
        headers={**MULTIPART, "content-encoding": "gzip"},
    )
    assert response.status_code == 400, response.text[:300]
    assert_envelope_a(response, 400, "invalid_request_error")


# -- the cabinet API reads compressed JSON bodies the same way -------------------------------------------


def register_body() -> bytes:
    return orjson.dumps(
        {
            "legalName": "Gzip Ltd",
            "email": f"gzip-{os.urandom(4).hex()}@example.com",
            "password": "correct horse battery",
            "planCode": "free",
        }
    )


@pytest.mark.parametrize("encoding", list(ENCODERS))
def test_cabinet_takes_a_compressed_json_body(gateway, encoding) -> None:
    body, headers = encoded(encoding, register_body())
    response = httpx.post(f"{gateway.base_url}/api/auth/register", content=body, headers=headers)
    assert response.status_code == 201, response.text
    assert response.json()["token"]


@pytest.mark.parametrize(
    ("body", "encoding", "status", "message"),
    [
        (b"not gzip", "gzip", 400, "request body could not be decoded: "),
        (gzip.compress(b"{}")[:-3], "gzip", 400, "request body could not be decoded: the compressed data is"),
        (b"{}", "compress", 415, "content-encoding 'compress' is not supported"),
        (BOMB, "gzip", 413, "request body is larger than 64 KiB"),
    ],
    ids=["garbage", "truncated", "unknown-encoding", "bomb"],
)
def test_cabinet_refuses_a_body_it_cannot_decode_with_a_4xx(gateway, body, encoding, status, message) -> None:
    response = httpx.post(
        f"{gateway.base_url}/api/auth/register",
        content=body,
        headers={"content-encoding": encoding, **JSON_TYPE},
    )
    assert response.status_code == status, response.text
    assert list(response.json()) == ["error"]
    assert response.json()["error"].startswith(message)
