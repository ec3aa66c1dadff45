"""The model API is served ahead of aiohttp's router (proxy.server.GatewayRunner); what must not change."""

from __future__ import annotations

import socket

import httpx
import orjson

_BODY = orjson.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": "continue please"}]})


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"connection closed after {data!r}"
        data += piece
    return data


def test_a_client_expecting_100_continue_gets_it_before_sending_the_body(gateway, tenant, alpha) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + tenant.api_key.encode() + b"\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(_BODY)
        )
        # The body is held back until the gateway says to go on (curl does this for bodies over 1 KiB).
        interim = _read_head(sock)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(_BODY)
        rest = interim.split(b"\r\n\r\n", 1)[1]
        while b"\r\n\r\n" not in rest:
            rest += sock.recv(65536)
        assert rest.startswith(b"HTTP/1.1 200 OK\r\n")
        head, _, body = rest.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        [length] = [int(line[15:]) for line in lines if line.lower().startswith(b"content-length:")]
        while len(body) < length:
            body += sock.recv(65536)
    assert orjson.loads(body)["choices"][0]["message"]["content"] == "echo: continue please"
    assert alpha.requests_to("/v1/chat/completions")[-1].json["model"] == "gpt-upstream-a"


def test_paths_that_only_begin_like_the_model_api_are_not_model_api_paths(gateway, tenant) -> None:
    headers = {"authorization": f"Bearer {tenant.api_key}"}
    # Not under /v1: the router's plain 404, not the model API's `route not supported` envelope.
    outside = httpx.post(f"{gateway.base_url}/v1chat/completions", content=_BODY, headers=headers)
    assert outside.status_code == 404 and "error" not in outside.text
    inside = httpx.post(f"{gateway.base_url}/v1/assistants", content=_BODY, headers=headers)
    assert inside.status_code == 404
    assert inside.json()["error"]["message"] == "route not supported"


def test_the_bare_v1_path_is_the_model_apis(gateway, tenant) -> None:
    response = httpx.get(f"{gateway.base_url}/v1", headers={"authorization": f"Bearer {tenant.api_key}"})
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "route not supported"
