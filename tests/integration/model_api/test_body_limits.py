"""Body limits per route group (the description's Limits table), enforced while reading: 413
`request_too_large` for a declared length, a chunked body and a single multipart part over the limit.

Multipart bodies are streamed to the row as they arrive: the gateway reads only up to the `model` field
before routing, so their limits are checked while the rest flows to a row of a model that serves the route
(the `media_http` gateway), and a body that passes a limit is cut off there.

Bodies are generated lazily from one shared block, so the big cases cost bandwidth on loopback, not memory.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.integration.model_api.error_bodies import assert_envelope_a, assert_envelope_b

# Nothing here fails a row or revokes a key: one gateway serves the whole module. (aiohttp's multipart
# reader, the fake's, uses a deprecated call internally.)
pytestmark = [pytest.mark.shared_gateway, pytest.mark.filterwarnings("ignore:unread_data:DeprecationWarning")]

MiB = 1024 * 1024
BLOCK = b"x" * MiB
BOUNDARY = "modelgate-test-boundary"


def filler(size: int) -> Iterator[bytes]:
    """`size` bytes of filler, in 1 MiB blocks."""
    whole, rest = divmod(size, MiB)
    for _ in range(whole):
        yield BLOCK
    if rest:
        yield BLOCK[:rest]


def json_body(model: str, total: int, field: str = "input") -> Iterator[bytes]:
    """A JSON object of exactly `total` bytes: `{"model": …, "<field>": "xxxx…"}`."""
    head = b'{"model": ' + orjson.dumps(model) + b', "' + field.encode() + b'": "'
    tail = b'"}'
    yield head
    yield from filler(total - len(head) - len(tail))
    yield tail


def multipart_body(parts: list[tuple[str, int]], model: str = "gpt-test") -> tuple[int, Iterator[bytes]]:
    """(total size, chunks) of a multipart/form-data body: a `model` field, then file parts of given sizes."""
    heads = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{model}\r\n'.encode()]
    for name, _size in parts:
        heads.append(
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}.bin"'
            f"\r\nContent-Type: application/octet-stream\r\n\r\n".encode()
        )
    closing = f"--{BOUNDARY}--\r\n".encode()
    total = sum(map(len, heads)) + sum(size + 2 for _, size in parts) + len(closing)

    def chunks() -> Iterator[bytes]:
        yield heads[0]
        for head, (_name, size) in zip(heads[1:], parts, strict=True):
            yield head
            yield from filler(size)
            yield b"\r\n"
        yield closing

    return total, chunks()


MULTIPART = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
JSON = {"content-type": "application/json"}


def cut_off(fake) -> None:
    """The row got the start of the upload as it streamed, and never its end."""
    assert fake.media.wait_uploads(1)
    assert [upload.complete for upload in fake.media.uploads] == [False]


def post(
    http: httpx.Client,
    path: str,
    chunks: Iterator[bytes],
    headers: dict[str, str],
    declared: int | None = None,
) -> httpx.Response:
    """POST a lazily generated body: chunked, or with the Content-Length `declared`."""
    if declared is not None:
        headers = {**headers, "content-length": str(declared)}
    return http.post(path, content=chunks, headers=headers)


def assert_too_large(response: httpx.Response) -> None:
    assert_envelope_a(response, 413, "invalid_request_error", code="request_too_large")


# -- 4 MiB JSON routes -------------------------------------------------------------------------------

JSON_ROUTES = [
    ("/v1/chat/completions", "gpt-test"),
    ("/v1/completions", "gpt-test"),
    ("/v1/responses", "gpt-test"),
    ("/v1/embeddings", "embed-test"),
    ("/v1/decisions", "decider"),
]


@pytest.mark.parametrize(("path", "model"), JSON_ROUTES)
def test_json_body_over_4_mib_is_413(http, alpha, path, model) -> None:
    size = 4 * MiB + 1
    assert_too_large(post(http, path, json_body(model, size), JSON, declared=size))
    assert alpha.requests == []


@pytest.mark.parametrize(("path", "model"), JSON_ROUTES)
def test_chunked_json_body_over_4_mib_is_413(http, alpha, path, model) -> None:
    assert_too_large(post(http, path, json_body(model, 4 * MiB + 1), JSON))
    assert alpha.requests == []


def test_json_body_of_exactly_4_mib_is_accepted(http, alpha) -> None:
    response = post(http, "/v1/embeddings", json_body("embed-test", 4 * MiB), JSON, declared=4 * MiB)
    assert response.status_code == 200, response.text[:300]
    assert len(alpha.requests_to("/v1/embeddings")[0].body) == 4 * MiB


def test_chunked_json_body_of_exactly_4_mib_is_accepted(http, alpha) -> None:
    response = post(http, "/v1/embeddings", json_body("embed-test", 4 * MiB), JSON)
    assert response.status_code == 200, response.text[:300]


def test_messages_body_over_4_mib_is_413_in_envelope_b(gateway, tenant, claude) -> None:
    size = 4 * MiB + 1
    with httpx.Client(base_url=gateway.base_url, timeout=30) as raw:
        response = post(
            raw,
            "/v1/messages",
            json_body("claude-test", size, field="system"),
            {**JSON, "x-api-key": tenant.api_key, "anthropic-version": "2023-06-01"},
        )
    assert_envelope_b(response, 413, "request_too_large")
    assert claude.requests == []


# -- realtime credentials: 1 MiB JSON -------------------------------------------------------------------


def test_realtime_client_secret_body_over_1_mib_is_413(http) -> None:
    size = MiB + 1
    assert_too_large(
        post(
            http,
            "/v1/realtime/client_secrets",
            json_body("gpt-test", size, field="instructions"),
            JSON,
            declared=size,
        )
    )


def test_chunked_realtime_client_secret_body_over_1_mib_is_413(http) -> None:
    assert_too_large(
        post(http, "/v1/realtime/client_secrets", json_body("gpt-test", MiB + 1, field="instructions"), JSON)
    )


# -- image edits and variations: 32 MiB, one part up to 25 MiB ----------------------------------------


@pytest.mark.parametrize("path", ["/v1/images/edits", "/v1/images/variations"])
def test_image_multipart_over_32_mib_is_413(media_http, alpha, path) -> None:
    total, chunks = multipart_body([("image", 16 * MiB), ("mask", 16 * MiB)], model="image-edit-test")
    assert total > 32 * MiB
    assert_too_large(post(media_http, path, chunks, MULTIPART))
    cut_off(alpha)


@pytest.mark.parametrize("path", ["/v1/images/edits", "/v1/images/variations"])
def test_image_multipart_part_over_25_mib_is_413(media_http, alpha, path) -> None:
    total, chunks = multipart_body([("image", 25 * MiB + 1)], model="image-edit-test")
    assert total < 32 * MiB
    assert_too_large(post(media_http, path, chunks, MULTIPART, declared=total))
    cut_off(alpha)


def test_image_multipart_part_of_exactly_25_mib_passes_the_limits(media_http, alpha) -> None:
    total, chunks = multipart_body([("image", 25 * MiB)], model="image-edit-test")
    response = post(media_http, "/v1/images/edits", chunks, MULTIPART, declared=total)
    assert response.status_code == 200, response.text[:300]
    (upload,) = alpha.media.uploads
    assert upload.complete and upload.part("image").size == 25 * MiB


def test_multipart_for_a_model_that_does_not_serve_the_route_is_404_before_the_upload(http, alpha) -> None:
    total, chunks = multipart_body([("image", 25 * MiB)])
    # Routing reads only the `model` field; no configured model of this gateway edits images.
    response = post(http, "/v1/images/edits", chunks, MULTIPART, declared=total)
    assert_envelope_a(response, 404, "invalid_request_error", code="model_not_found")
    assert alpha.requests == []


# -- audio transcription and translation: 25 MiB multipart ----------------------------------------------


@pytest.mark.parametrize("path", ["/v1/audio/transcriptions", "/v1/audio/translations"])
def test_audio_multipart_over_25_mib_is_413(http, path) -> None:
    total, chunks = multipart_body([("file", 25 * MiB)])
    assert total > 25 * MiB
    assert_too_large(post(http, path, chunks, MULTIPART, declared=total))


def test_chunked_audio_multipart_over_25_mib_is_413(media_http, alpha) -> None:
    _total, chunks = multipart_body([("file", 25 * MiB)], model="audio-test")
    assert_too_large(post(media_http, "/v1/audio/transcriptions", chunks, MULTIPART))
    cut_off(alpha)


# -- videos: 4 MiB JSON, 100 MiB multipart -------------------------------------------------------------


def test_video_json_body_over_4_mib_is_413(http) -> None:
    size = 4 * MiB + 1
    assert_too_large(
        post(http, "/v1/videos", json_body("gpt-test", size, field="prompt"), JSON, declared=size)
    )


def test_video_multipart_under_100_mib_is_not_held_to_the_json_limit(media_http, alpha) -> None:
    total, chunks = multipart_body([("input_reference", 8 * MiB)], model="video-test")
    response = post(media_http, "/v1/videos", chunks, MULTIPART, declared=total)
    assert response.status_code == 200, response.text[:300]
    assert alpha.media.uploads[0].part("input_reference").size == 8 * MiB


def test_chunked_video_multipart_over_100_mib_is_413(media_http, alpha) -> None:
    total, chunks = multipart_body([("input_reference", 100 * MiB)], model="video-test")
    assert total > 100 * MiB
    assert_too_large(post(media_http, "/v1/videos", chunks, MULTIPART))
    cut_off(alpha)


# -- a lying Content-Length is refused before the body is read -----------------------------------------


def head_only(gateway, path: str, headers: dict[str, str]) -> tuple[int, dict]:
    """Send only the request head (declaring a huge body), then read the answer; returns (status, JSON)."""
    received, _ = answer_then_eof(gateway, path, headers, b"")
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body)


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/v1/chat/completions", "application/json"),
        ("/v1/realtime/client_secrets", "application/json"),
        ("/v1/images/edits", MULTIPART["content-type"]),
        ("/v1/audio/transcriptions", MULTIPART["content-type"]),
        ("/v1/videos", MULTIPART["content-type"]),
    ],
)
def test_lying_content_length_is_refused_before_the_body_is_read(gateway, tenant, path, content_type) -> None:
    status, body = head_only(
        gateway,
        path,
        {
            "Authorization": f"Bearer {tenant.api_key}",
            "Content-Type": content_type,
            "Content-Length": str(10 * 1024**3),
        },
    )
    assert status == 413
    assert list(body["error"]) == ["message", "type", "code"]
    assert body["error"]["code"] == "request_too_large"


def test_lying_content_length_on_messages_is_refused_in_envelope_b(gateway, tenant) -> None:
    status, body = head_only(
        gateway,
        "/v1/messages",
        {
            "x-api-key": tenant.api_key,
            "anthropic-version": "2023-06-01",
            "Content-Type": "application/json",
            "Content-Length": str(10 * 1024**3),
        },
    )
    assert status == 413
    assert body["type"] == "error" and body["error"]["type"] == "request_too_large"


# -- a 413 refused unread closes the connection at once ---------------------------------------------------


def answer_then_eof(gateway, path: str, headers: dict[str, str], sent_body: bytes) -> tuple[bytes, float]:
    """Send a head declaring a huge body and only `sent_body` of it; read until the gateway closes.
    Returns (everything received, seconds from the end of the answer's head to EOF)."""
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{gateway.port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + sent_body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while the rest was on its way: the answer is still in the receive buffer
        received = b""
        answered_at = None
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if answered_at is None and b"\r\n\r\n" in received + chunk:
                answered_at = time.monotonic()
            if not chunk:
                break
            received += chunk
    assert answered_at is not None, received
    return received, time.monotonic() - answered_at


@pytest.mark.parametrize(
    ("path", "content_type"),
    [("/v1/chat/completions", "application/json"), ("/v1/audio/transcriptions", MULTIPART["content-type"])],
)
def test_connection_closes_right_after_a_413_for_a_body_left_unread(
    gateway, tenant, path, content_type
) -> None:
    received, waited = answer_then_eof(
        gateway,
        path,
        {
            "Authorization": f"Bearer {tenant.api_key}",
            "Content-Type": content_type,
            "Content-Length": str(10 * 1024**3),
        },
        sent_body=b"x" * 100_000,
    )
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), head
    assert b"connection: close" in head.lower()
    assert orjson.loads(body)["error"]["code"] == "request_too_large"
    # aiohttp would read and discard the body for 10 s (its lingering time) before closing.
    assert waited < 5, waited


def test_connection_closes_right_after_a_413_found_while_reading(gateway, tenant) -> None:
    received, waited = answer_then_eof(
        gateway,
        "/v1/chat/completions",
        {
            "Authorization": f"Bearer {tenant.api_key}",
            "Content-Type": "application/json",
            "Transfer-Encoding": "chunked",
        },
        # One chunk declared 5 MiB long, of which only the bytes that pass the limit are sent: the gateway
        # answers once it has them all, so the client is never cut off while still sending.
        sent_body=b"%x\r\n" % (5 * MiB) + b"x" * (4 * MiB + 1),
    )
    assert received.startswith(b"HTTP/1.1 413 "), received[:200]
    assert waited < 5, waited
