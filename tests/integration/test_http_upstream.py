"""The request heads HttpUpstream writes for a provider, read off the wire by a raw loopback server: the
provider's key and never the client's, Anthropic version and beta headers, line breaks refused, paths
percent-encoded, and transport failures turned into UpstreamFailure.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import pytest
from multidict import CIMultiDict

from modelgate.config import ProviderConfig
from modelgate.proxy.upstream.providers import HttpUpstream, UpstreamFailure
from tests.fakes.loopback_http import (
    PATIENT,
    SHORT,
    LoopbackServer,
    ReceivedRequest,
    ServerConnection,
    answer,
    bounded,
    never_answer,
)

PROVIDER_KEY = "sk-provider-secret"
CLIENT_KEY = "sk-client-of-the-gateway"


async def _echo_request_line(conn: ServerConnection, request: ReceivedRequest) -> None:
    conn.send(answer(request.request_line.encode()))


# HttpUpstream: the request heads it writes


@contextlib.asynccontextmanager
async def _provider(
    server: LoopbackServer, kind: str, base_path: str, **fields: Any
) -> AsyncIterator[HttpUpstream]:
    upstream = HttpUpstream(
        ProviderConfig(
            name="acme",
            kind=kind,
            base_url=f"http://127.0.0.1:{server.port}{base_path}",
            api_key=PROVIDER_KEY,
            **fields,
        )
    )
    try:
        yield upstream
    finally:
        await upstream.close()


async def _send(
    upstream: HttpUpstream, method: str, path: str, body: bytes | None, client_headers: dict[str, str]
) -> bytes:
    reply = await upstream.send(method, path, body, "req_test0001", CIMultiDict(client_headers))
    try:
        return await reply.read()
    finally:
        reply.close()


async def _heads_sent(
    kind: str, sends: list[tuple[str, str, bytes | None, dict[str, str]]], base_path: str = "", **fields: Any
) -> tuple[LoopbackServer, list[list[str]]]:
    """What the provider received for each send, as header lines (request line first)."""
    async with LoopbackServer(_echo_request_line) as server:
        async with _provider(server, kind, base_path, **fields) as upstream:
            for method, path, body, headers in sends:
                await _send(upstream, method, path, body, headers)
    return server, [request.lines for request in server.requests]


@bounded
async def test_an_openai_request_head_carries_the_provider_key_and_nothing_of_the_client() -> None:
    body = b'{"model":"gpt-4o-mini"}'
    client_headers = {
        "Authorization": f"Bearer {CLIENT_KEY}",
        "X-Api-Key": CLIENT_KEY,
        "Cookie": "session=abc",
        "anthropic-beta": "tools-2024-04-04",
        "anthropic-version": "2024-10-22",
    }
    server, heads = await _heads_sent(
        "openai", [("POST", "/v1/chat/completions", body, client_headers)], "/v1"
    )

    assert heads == [
        [
            "POST /v1/chat/completions HTTP/1.1",
            f"host: 127.0.0.1:{server.port}",
            "content-type: application/json",
            "accept-encoding: identity",
            "user-agent: modelgate",
            "x-request-id: req_test0001",
            f"content-length: {len(body)}",
            f"authorization: Bearer {PROVIDER_KEY}",  # per request: a host may have several keys
        ]
    ]
    assert server.requests[0].body == body
    assert CLIENT_KEY.encode() not in server.requests[0].head


@pytest.mark.parametrize(
    ("kind", "base_path", "path", "target"),
    [
        ("openai", "/v1", "/v1/models", "/v1/models"),
        ("openai", "/compat/openai/v1", "/v1/embeddings", "/compat/openai/v1/embeddings"),
        ("anthropic", "", "/v1/messages", "/v1/messages"),
        ("anthropic", "/relay", "/v1/messages/count_tokens", "/relay/v1/messages/count_tokens"),
    ],
)
@bounded
async def test_the_request_target_is_the_base_path_plus_the_route(
    kind: str, base_path: str, path: str, target: str
) -> None:
    _, heads = await _heads_sent(kind, [("POST", path, b"{}", {})], base_path)

    assert heads[0][0] == f"POST {target} HTTP/1.1"


@bounded
async def test_content_length_is_sent_for_bodies_and_bodiless_posts_only() -> None:
    sends = [("GET", "/v1/models", None, {}), ("DELETE", "/v1/responses/r1", None, {})]
    sends.append(("POST", "/v1/responses/r1/cancel", None, {}))
    server, heads = await _heads_sent("openai", sends, "/v1")

    lengths = [request.header("content-length") for request in server.requests]
    assert lengths == [None, None, "0"]
    assert [h[0] for h in heads] == [
        "GET /v1/models HTTP/1.1",
        "DELETE /v1/responses/r1 HTTP/1.1",
        "POST /v1/responses/r1/cancel HTTP/1.1",
    ]


@bounded
async def test_an_anthropic_request_head_uses_x_api_key_and_the_clients_version_and_beta() -> None:
    body = b'{"model":"claude-haiku-4-5"}'
    client_headers = {
        "x-api-key": CLIENT_KEY,
        "authorization": f"Bearer {CLIENT_KEY}",
        "anthropic-version": "2024-10-22",
        "anthropic-beta": "tools-2024-04-04",
    }
    server, heads = await _heads_sent("anthropic", [("POST", "/v1/messages", body, client_headers)])

    assert heads == [
        [
            "POST /v1/messages HTTP/1.1",
            f"host: 127.0.0.1:{server.port}",
            "content-type: application/json",
            "accept-encoding: identity",
            "user-agent: modelgate",
            "x-request-id: req_test0001",
            f"content-length: {len(body)}",
            "anthropic-beta: tools-2024-04-04",
            "anthropic-version: 2024-10-22",
            f"x-api-key: {PROVIDER_KEY}",  # per request: a host may have several keys
        ]
    ]
    assert CLIENT_KEY.encode() not in server.requests[0].head


@bounded
async def test_without_a_client_version_an_anthropic_request_carries_the_configured_one() -> None:
    server, _ = await _heads_sent(
        "anthropic", [("POST", "/v1/messages", b"{}", {})], anthropic_version="2023-01-01"
    )

    request = server.requests[0]
    assert request.header("anthropic-version") == "2023-01-01"
    assert request.header("anthropic-beta") is None
    assert request.header("authorization") is None


@bounded
async def test_an_openai_kind_provider_speaking_messages_gets_anthropic_headers_on_its_messages_paths() -> (
    None
):
    client_headers = {"anthropic-version": "2024-10-22", "anthropic-beta": "tools-2024-04-04"}
    sends = [
        ("POST", "/v1/messages", b"{}", client_headers),
        ("POST", "/v1/chat/completions", b"{}", client_headers),
    ]
    server, _ = await _heads_sent("openai", sends, "/v1", native_messages=True)

    messages, chat = server.requests
    assert (messages.header("anthropic-version"), messages.header("anthropic-beta")) == (
        "2024-10-22",
        "tools-2024-04-04",
    )
    assert (chat.header("anthropic-version"), chat.header("anthropic-beta")) == (None, None)
    assert messages.header("authorization") == chat.header("authorization") == f"Bearer {PROVIDER_KEY}"


@bounded
async def test_a_client_header_value_holding_a_line_break_is_not_injected() -> None:
    client_headers = {
        "anthropic-beta": "tools\r\nx-injected: beta",
        "anthropic-version": "2024-10-22\r\nx-injected: version",
    }
    server, heads = await _heads_sent("anthropic", [("POST", "/v1/messages", b"{}", client_headers)])

    request = server.requests[0]
    assert not any(line.lower().startswith("x-injected") for line in heads[0])
    assert request.header("anthropic-beta") is None
    assert request.header("anthropic-version") == "2023-06-01"  # the configured one, the client's unusable


@bounded
async def test_configured_provider_headers_are_sent_but_cannot_replace_per_request_ones() -> None:
    headers = (("OpenAI-Organization", "org-acme"), ("Host", "evil.example"), ("X-Request-Id", "fixed"))
    server, _ = await _heads_sent("openai", [("POST", "/v1/embeddings", b"{}", {})], "/v1", headers=headers)

    request = server.requests[0]
    assert request.header("openai-organization") == "org-acme"
    assert [line for line in request.lines if line.lower().startswith(("host:", "x-request-id:"))] == [
        f"host: 127.0.0.1:{server.port}",
        "x-request-id: req_test0001",
    ]


def test_a_configured_provider_header_holding_a_line_break_is_refused_when_built() -> None:
    config = ProviderConfig(
        name="acme",
        kind="openai",
        base_url="http://127.0.0.1:9/v1",
        headers=(("x-org", "acme\r\nx-injected: 1"),),
    )

    with pytest.raises(ValueError, match="line break"):
        HttpUpstream(config)


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "anthropic", "anthropic_version": "2023-06-01\r\nx-injected: 1"},
        {"kind": "anthropic", "headers": (("anthropic-version", "2023-06-01\nx-injected: 1"),)},
        {"kind": "openai", "native_messages": True, "anthropic_version": "v\r\nx-injected: 1"},
    ],
)
def test_a_configured_anthropic_version_holding_a_line_break_is_refused_when_built(fields) -> None:
    # Sent per request on Messages paths, so it is checked when the upstream is built, not when sent.
    with pytest.raises(ValueError, match="line break"):
        HttpUpstream(ProviderConfig(name="acme", base_url="http://127.0.0.1:9", **fields))


@pytest.mark.parametrize(
    ("path", "target"),
    [
        # The forwarder quotes object ids itself (safe=""): such a path passes unchanged, not quoted twice.
        (f"/v1/responses/{quote('resp one?two', safe='')}", "/v1/responses/resp%20one%3Ftwo"),
        ("/v1/responses/resp one", "/v1/responses/resp%20one"),
        ("/v1/files/caf\u00e9", "/v1/files/caf%C3%A9"),
        ("/v1/files/a#b", "/v1/files/a%23b"),
        ("/v1/files/a\r\nx-injected: 1", "/v1/files/a%0D%0Ax-injected:%201"),
        # A query the forwarder appends stays a query.
        ("/v1/videos/vid_1/content?variant=thumbnail", "/v1/videos/vid_1/content?variant=thumbnail"),
    ],
)
@bounded
async def test_unsafe_characters_in_the_path_are_percent_encoded(path: str, target: str) -> None:
    _, heads = await _heads_sent("openai", [("GET", path, None, {})], "/v1")

    assert heads[0][0] == f"GET {target} HTTP/1.1"
    assert not any(line.lower().startswith("x-injected") for line in heads[0])


@bounded
async def test_requests_to_a_provider_share_a_kept_alive_connection() -> None:
    sends = [("POST", "/v1/chat/completions", b"{}", {})] * 3
    server, _ = await _heads_sent("openai", sends, "/v1")

    assert len(server.requests) == 3
    assert len(server.connections) == 1


@bounded
async def test_no_answer_within_the_first_byte_timeout_is_an_upstream_failure() -> None:
    async with LoopbackServer(never_answer) as server:
        async with _provider(server, "openai", "/v1", first_byte_timeout=SHORT) as upstream:
            with pytest.raises(UpstreamFailure, match=r"no response within 0\.2s"):
                await _send(upstream, "POST", "/v1/chat/completions", b"{}", {})
        await server.connections[0].ended.wait()

    assert server.connections[0].client_closed


@bounded
async def test_a_provider_that_closes_without_answering_is_an_upstream_failure() -> None:
    async def closes(conn: ServerConnection, request: ReceivedRequest) -> None:
        conn.close()

    async with LoopbackServer(closes) as server:
        async with _provider(server, "openai", "/v1") as upstream:
            with pytest.raises(UpstreamFailure, match="UpstreamBrokeOff"):
                await _send(upstream, "POST", "/v1/chat/completions", b"{}", {})


@bounded
async def test_a_refused_connection_is_an_upstream_failure() -> None:
    async with LoopbackServer(never_answer) as server:
        pass  # closed: its port now refuses connections
    async with _provider(server, "openai", "/v1") as upstream:
        with pytest.raises(UpstreamFailure, match="acme"):
            await _send(upstream, "POST", "/v1/chat/completions", b"{}", {})


@bounded
async def test_no_connection_within_the_connect_timeout_is_an_upstream_failure() -> None:
    # A listening socket that never accepts, its backlog full: the kernel leaves further connects unanswered.
    with socket.create_server(("127.0.0.1", 0), backlog=0) as listener:
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
            upstream = HttpUpstream(
                ProviderConfig(
                    name="acme",
                    kind="openai",
                    base_url=f"http://127.0.0.1:{port}/v1",
                    connect_timeout=SHORT,
                    first_byte_timeout=PATIENT,
                )
            )
            try:
                with pytest.raises(UpstreamFailure, match="no connection within the connect timeout"):
                    await upstream.send("POST", "/v1/chat/completions", b"{}", "req_test0001", CIMultiDict())
            finally:
                await upstream.close()
        finally:
            for filler in fillers:
                filler.close()
