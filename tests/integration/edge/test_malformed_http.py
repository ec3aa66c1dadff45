"""Requests that are not valid HTTP get envelope A JSON (400, or 431 for a head over the limits) that never
echoes their bytes, then the connection closes; every answer of the gateway says `Server: modelgate`."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.integration.edge.conftest import SLACK, edge_toml
from tests.integration.edge.malformed_requests import malformed_requests
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config
from tests.support.raw_http import RawAnswer, connect, exchange, parse_answer, read_until_closed

SECRET = "sk-" + "S3cr3t" * 8  # looks like an API key; must never come back
CLIENT_SECRET = "ek_" + "R3alt1me" * 4
PROMPT = "PROMPT-MARKER-" + "p" * 200
MALFORMED = malformed_requests(SECRET, CLIENT_SECRET, PROMPT)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedGateway]:
    tmp = tmp_path_factory.mktemp("malformed")
    config = write_config(
        tmp / "edge.toml", edge_toml(f"sqlite:///{tmp / 'edge.db'}", header=30.0, keepalive=30.0)
    )
    with ThreadedGateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def tenant(gateway: ThreadedGateway) -> Tenant:
    return register_tenant(gateway.base_url)


def _is_envelope_a(answer: RawAnswer) -> bool:
    body = answer.json()
    assert isinstance(body, dict) and set(body) == {"error"}
    error = body["error"]
    return error["type"] == "invalid_request_error" and error["message"].startswith(
        "malformed HTTP request: "
    )


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_request_gets_envelope_a_without_its_bytes_and_is_closed(
    gateway: ThreadedGateway, case: str
) -> None:
    request, status = MALFORMED[case]
    answer, closed_after = exchange(gateway.port, request, within=SLACK)
    assert answer.status == status
    assert answer.headers["content-type"].startswith("application/json")
    assert _is_envelope_a(answer)
    for secret in (SECRET, CLIENT_SECRET, "PROMPT-MARKER"):
        assert secret.encode() not in answer.body
    assert answer.headers["server"] == "modelgate"
    assert closed_after is not None


def test_a_chunk_gone_bad_inside_a_body_being_read_is_answered_and_closed(
    gateway: ThreadedGateway, tenant: Tenant
) -> None:
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {tenant.api_key}\r\nTransfer-Encoding: chunked\r\n"
        "Expect: 100-continue\r\n\r\n"
    )
    with connect(gateway.port) as sock:
        sock.sendall(head.encode())
        sock.settimeout(SLACK)
        assert sock.recv(65536).startswith(b"HTTP/1.1 100")  # the handler is reading the body now
        sock.sendall(f'5\r\n{{"mod\r\nzz\r\n{PROMPT}\r\n0\r\n\r\n'.encode())
        data, closed_after = read_until_closed(sock, SLACK)
    answer = parse_answer(data)
    assert closed_after is not None
    assert answer.status == 400 and _is_envelope_a(answer)
    assert answer.headers["server"] == "modelgate"
    assert b"PROMPT-MARKER" not in answer.body


def test_every_kind_of_answer_names_the_server_without_versions(
    gateway: ThreadedGateway, tenant: Tenant
) -> None:
    base = gateway.base_url
    auth = {"authorization": f"Bearer {tenant.api_key}"}
    chat = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=base, timeout=SLACK) as client:
        answers = {
            "health": client.get("/healthz"),
            "readiness": client.get("/readyz"),
            "model list": client.get("/v1/models", headers=auth),
            "chat": client.post("/v1/chat/completions", json=chat, headers=auth),
            "stream": client.post("/v1/chat/completions", json={**chat, "stream": True}, headers=auth),
            "wrong key": client.post(
                "/v1/chat/completions", json=chat, headers={"authorization": "Bearer sk-x"}
            ),
            "unknown route": client.get("/v1/nothing-here", headers=auth),
            "messages error": client.post("/v1/messages", json={}, headers=auth),
            "cabinet error": client.get("/api/organization"),
            "not found": client.get("/no-such-page"),
        }
    for name, answer in answers.items():
        assert answer.headers.get("server") == "modelgate", name
    sdk = openai.OpenAI(base_url=f"{base}/v1", api_key=tenant.api_key, max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(model="echo", messages=chat["messages"])
    assert raw.headers["server"] == "modelgate"
