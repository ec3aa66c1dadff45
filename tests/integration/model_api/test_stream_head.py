"""The head of a streamed answer goes out with its first bytes, never held for the provider: a provider whose
first bytes are only part of an event still lets the client see the head (status, headers) at once."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.integration.model_api.conftest import UPSTREAM_KEY

CHAT = "/v1/chat/completions"
WAIT = 10.0  # bound of every wait here; a loopback step takes milliseconds
EVENT = b'data: {"id":"c1","object":"chat.completion.chunk","model":"held-upstream","choices":[]}\n\n'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class HalfEventProvider:
    """A raw provider: answers the first request with a head and half an event, the rest once released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.rest_sent = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(WAIT)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self._listener, self._listener.accept()[0] as conn:
            conn.settimeout(WAIT)
            received = b""
            while b"\r\n\r\n" not in received:  # the body is not needed
                received += conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            conn.sendall(head + _chunk(EVENT[:30]))
            self.release.wait(WAIT)
            self.rest_sent.set()
            conn.sendall(_chunk(EVENT[30:]) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")

    def close(self) -> None:
        self.release.set()
        self._thread.join(WAIT)


@pytest.fixture
def half_event_provider() -> Iterator[HalfEventProvider]:
    provider = HalfEventProvider()
    yield provider
    provider.close()


def test_the_head_reaches_the_client_while_the_first_event_is_still_incomplete(
    gateway_with, tenant_on, half_event_provider
) -> None:
    extra = f"""
[[providers]]
name = "halting"
kind = "openai"
base_url = "http://127.0.0.1:{half_event_provider.port}/v1"
api_key = "{UPSTREAM_KEY}"

[[models]]
name = "halting-model"
kinds = ["chat"]
[[models.rows]]
provider = "halting"
upstream_model = "held-upstream"
"""
    http = tenant_on(gateway_with(extra=extra))
    body = {"model": "halting-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}

    with http.stream("POST", CHAT, json=body, timeout=WAIT) as response:
        status, content_type = response.status_code, response.headers["content-type"]
        rest_sent_before_head = half_event_provider.rest_sent.is_set()
        half_event_provider.release.set()
        text = response.read()

    assert (status, content_type, rest_sent_before_head) == (200, "text/event-stream", False)
    assert text.startswith(EVENT.replace(b'"held-upstream"', b'"halting-model"'))
    assert text.endswith(b"data: [DONE]\n\n")
