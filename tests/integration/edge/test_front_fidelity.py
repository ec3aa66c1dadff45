"""A client cannot tell whether the lean HTTP front (modelgate/proxy/http/front.py) or aiohttp served its
model API request: two gateways, alike but for `[server] model_api_front` (true and false), get the same raw
HTTP/1.1 requests and give the same answers — the same status line, the same set of header names, the same
header values, the same body (an event stream's de-chunked payload), and the same fate of the connection after
(it serves one more request, or it is closed).

Only what legitimately differs between two answers is normalised before comparing: the `Date` value (which
must be an IMF-fixdate on both), request ids the gateway generates (`req_…`, in headers and bodies; a
client's own `X-Request-Id` is compared as it is), and the ids and timestamps the mock model makes up
(`chatcmpl-…`, `msg_…`, `"created"`). Ids are numbered by their first appearance in an answer, so an id
that recurs (the `x-request-id` and `request-id` of envelope B, the id of every chunk of a stream) must
recur alike on both paths. Header order and the casing of header names are not compared.

The front gateway is checked to have served every request on the front (none handed to aiohttp), so the
comparison is between the two paths and not between aiohttp and itself.

Not covered: a body over a route's JSON limit yet within the front's 1 MiB. No POST route has a JSON limit
under 1 MiB (route_table.py: 4 MiB, and 1 MiB for realtime client secrets) and no config key changes them.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from modelgate.proxy.http import front
from tests.integration.edge.conftest import edge_server
from tests.integration.edge.test_connection_reuse import ANSWER_TIMEOUT, AnswerReader, WireAnswer
from tests.integration.ops.conftest import ops_toml
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config
from tests.support.raw_http import connect

MiB = 1024 * 1024
# Generous deadlines: the comparison is about answers, not about slow clients on a busy machine.
DEADLINE_SECONDS = 30.0
# Besides `echo` (chat only, from ops_toml): mock-provider models for the Messages and Embeddings routes.
EXTRA_MODELS = """
[[models]]
name = "claude-echo"
kinds = ["messages"]
[[models.rows]]
provider = "mock"
[models.prices]
per_request = 0.01

[[models]]
name = "embed"
kinds = ["embeddings"]
[[models.rows]]
provider = "mock"
[models.prices]
per_request = 0.01
"""

# What is made up per request; numbered by first appearance so recurrences must match.
_MADE_UP_ID = re.compile(rb"\b(?:req_|msg_|resp_|dec_|chatcmpl-|cmpl-)[0-9a-f]{16,32}\b")
_TIMESTAMP = re.compile(rb'"(created|created_at)":\d+')
_IMF_FIXDATE = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")
_CLOSED = "closed"


# -- the two gateways --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Side:
    """One of the two gateways and the tenant that calls it."""

    gateway: ThreadedGateway
    tenant: Tenant


def _start(directory: Path, name: str, model_api_front: bool) -> ThreadedGateway:
    url = f"sqlite:///{directory / f'{name}.db'}"
    server = (
        edge_server(header=DEADLINE_SECONDS, body=DEADLINE_SECONDS, keepalive=DEADLINE_SECONDS)
        + f"model_api_front = {str(model_api_front).lower()}\n"
    )
    toml = ops_toml(url, server=server, per_request_usd=0.01, models=EXTRA_MODELS)
    config = write_config(directory / f"{name}.toml", toml)
    assert config.server.model_api_front is model_api_front
    return ThreadedGateway(config).start()


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:
    """(the gateway with the front, the gateway without it), each with a funded tenant."""
    directory = tmp_path_factory.mktemp("front-fidelity")
    started: list[ThreadedGateway] = []
    try:
        for name, on in (("front", True), ("aiohttp", False)):
            started.append(_start(directory, name, on))
        with_front, without = started
        yield (
            Side(with_front, register_tenant(with_front.base_url)),
            Side(without, register_tenant(without.base_url)),
        )
    finally:
        for gateway in started:
            gateway.stop()


class FrontSpy:
    """The local ports of the connections whose requests the front served, and of those it handed over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.served: list[int] = []
        self.handed_over: list[int] = []

    def record(self, into: list[int], connection: front.FrontConnection) -> None:
        transport = connection.transport
        if transport is not None:
            with self._lock:
                into.append(transport.get_extra_info("sockname")[1])


@pytest.fixture
def front_spy(monkeypatch: pytest.MonkeyPatch) -> FrontSpy:
    spy = FrontSpy()
    serve, hand_over = front.FrontConnection._serve, front.FrontConnection._hand_over

    async def spied_serve(self: front.FrontConnection, request: front.FrontRequest) -> None:
        spy.record(spy.served, self)
        await serve(self, request)

    def spied_hand_over(self: front.FrontConnection) -> None:
        spy.record(spy.handed_over, self)
        hand_over(self)

    monkeypatch.setattr(front.FrontConnection, "_serve", spied_serve)
    monkeypatch.setattr(front.FrontConnection, "_hand_over", spied_hand_over)
    return spy


# -- requests ----------------------------------------------------------------------------------------------


def _post(path: str, body: bytes, headers: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: gateway\r\n{headers}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _bearer(key: str) -> str:
    return f"Authorization: Bearer {key}\r\n"


def _anthropic(key: str) -> str:
    return f"x-api-key: {key}\r\nanthropic-version: 2023-06-01\r\n"


def _chat_body(model: str = "echo", **extra: object) -> bytes:
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hello"}], **extra})


def _messages_body(model: str = "claude-echo", **extra: object) -> bytes:
    return orjson.dumps(
        {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}], **extra}
    )


def _padded_chat(size: int) -> bytes:
    """A chat body of exactly `size` bytes: JSON followed by whitespace, which JSON allows."""
    body = _chat_body()
    return body + b" " * (size - len(body))


Build = Callable[[str], bytes]  # the API key of the side -> the raw request


@dataclass(frozen=True, slots=True)
class Case:
    build: Build
    status: int  # what both sides must answer (besides answering alike)
    on_front: bool = True  # whether the front gateway serves it on its front (else it hands it to aiohttp)


def _case(case_id: str, build: Build, status: int, *, on_front: bool = True) -> object:
    return pytest.param(Case(build, status, on_front), id=case_id)


CASES = [
    _case("chat", lambda key: _post("/v1/chat/completions", _chat_body(), _bearer(key)), 200),
    _case(
        "chat-stream",
        lambda key: _post("/v1/chat/completions", _chat_body(stream=True), _bearer(key)),
        200,
    ),
    _case(
        "chat-stream-with-usage",
        lambda key: _post(
            "/v1/chat/completions",
            _chat_body(stream=True, stream_options={"include_usage": True}),
            _bearer(key),
        ),
        200,
    ),
    _case(
        "chat-wrong-key", lambda key: _post("/v1/chat/completions", _chat_body(), _bearer("sk-wrong")), 401
    ),
    _case("chat-no-key", lambda key: _post("/v1/chat/completions", _chat_body(), ""), 401),
    _case(
        "chat-unknown-model",
        lambda key: _post("/v1/chat/completions", _chat_body("no-such-model"), _bearer(key)),
        404,
    ),
    _case("chat-body-not-json", lambda key: _post("/v1/chat/completions", b"{not json", _bearer(key)), 400),
    _case("chat-body-json-array", lambda key: _post("/v1/chat/completions", b"[1, 2]", _bearer(key)), 400),
    _case("chat-body-empty", lambda key: _post("/v1/chat/completions", b"", _bearer(key)), 400),
    _case("messages", lambda key: _post("/v1/messages", _messages_body(), _anthropic(key)), 200),
    _case(
        "messages-stream",
        lambda key: _post("/v1/messages", _messages_body(stream=True), _anthropic(key)),
        200,
    ),
    _case(
        "messages-wrong-key", lambda key: _post("/v1/messages", _messages_body(), _anthropic("sk-wrong")), 401
    ),
    _case(
        "messages-chat-only-model",  # `echo` serves chat only: 404 in envelope B
        lambda key: _post("/v1/messages", _messages_body("echo"), _anthropic(key)),
        404,
    ),
    # `echo` is chat only; the mock provider serves embeddings, so the config adds `embed` for them.
    _case(
        "embeddings",
        lambda key: _post("/v1/embeddings", orjson.dumps({"model": "embed", "input": "hello"}), _bearer(key)),
        200,
    ),
    _case(
        "embeddings-chat-only-model",
        lambda key: _post("/v1/embeddings", orjson.dumps({"model": "echo", "input": "hello"}), _bearer(key)),
        404,
    ),
    _case(
        "client-request-id",
        lambda key: _post("/v1/chat/completions", _chat_body(), _bearer(key) + "X-Request-Id: abc-123\r\n"),
        200,
    ),
    _case(
        "connection-close",
        lambda key: _post("/v1/chat/completions", _chat_body(), _bearer(key) + "Connection: close\r\n"),
        200,
    ),
    _case(
        "connection-close-on-an-error",
        lambda key: _post(
            "/v1/chat/completions", _chat_body(), _bearer("sk-wrong") + "Connection: close\r\n"
        ),
        401,
    ),
    _case("unknown-v1-path", lambda key: _post("/v1/nope", b"{}", _bearer(key)), 404),
    _case("post-to-a-get-route", lambda key: _post("/v1/models", b"{}", _bearer(key)), 404),
    _case(
        "query-string",
        lambda key: _post("/v1/chat/completions?api-version=1", _chat_body(), _bearer(key)),
        200,
    ),
    _case(
        "body-of-exactly-1-mib",  # the largest body the front serves
        lambda key: _post("/v1/chat/completions", _padded_chat(MiB), _bearer(key)),
        200,
    ),
    _case(
        "body-just-over-1-mib",  # handed to aiohttp on both: a control of the comparison
        lambda key: _post("/v1/chat/completions", _padded_chat(MiB + 1), _bearer(key)),
        200,
        on_front=False,
    ),
]


# -- answers -----------------------------------------------------------------------------------------------


class HeadKeepingReader(AnswerReader):
    """AnswerReader that also keeps the raw head of the last answer (for its status line's reason)."""

    last_head: bytes = b""

    def _until(self, marker: bytes) -> bytes:
        data = super()._until(marker)
        if marker == b"\r\n\r\n":  # only a head ends so
            self.last_head = data
        return data


@dataclass(frozen=True, slots=True)
class Seen:
    """One answer with what legitimately differs normalised."""

    status_line: str
    headers: dict[str, str]  # names lowercased
    body: bytes  # de-chunked
    chunked: bool


class _Ids:
    """Numbers made-up ids by first appearance: the same id gets the same placeholder within an answer."""

    def __init__(self) -> None:
        self._numbers: dict[bytes, int] = {}

    def placeholder(self, made_up: bytes) -> bytes:
        number = self._numbers.setdefault(made_up, len(self._numbers) + 1)
        return b"<id-%d>" % number

    def text(self, data: bytes) -> bytes:
        return _TIMESTAMP.sub(rb'"\1":0', _MADE_UP_ID.sub(lambda m: self.placeholder(m.group()), data))


def _seen(answer: WireAnswer, head: bytes) -> Seen:
    ids = _Ids()
    headers: dict[str, str] = {}
    for name, value in answer.headers.items():
        if name == "date":
            assert _IMF_FIXDATE.match(value), f"a Date that is no IMF-fixdate: {value!r}"
            value = "<date>"
        elif name in ("x-request-id", "request-id"):
            value = ids.text(value.encode()).decode()
        headers[name] = value
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    return Seen(status_line, headers, ids.text(answer.body), answer.chunked)


def _answer(reader: HeadKeepingReader) -> Seen:
    return _seen(reader.answer(), reader.last_head)


def _then(sock: socket.socket, reader: HeadKeepingReader, follow_up: bytes) -> Seen | str:
    """What becomes of the connection after an answer: `follow_up` answered on it, or "closed"."""
    assert reader.leftover() == b"", "bytes after the answer"
    try:
        sock.sendall(follow_up)
    except (BrokenPipeError, ConnectionResetError):
        return _CLOSED
    sock.settimeout(ANSWER_TIMEOUT)
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except ConnectionResetError:
        return _CLOSED
    except TimeoutError:
        raise AssertionError("the connection neither answered a second request nor closed") from None
    if not first:
        return _CLOSED
    return _answer(reader)


def _exchange(side: Side, case: Case) -> tuple[Seen, Seen | str]:
    """The answer of `side` to the case's request on a new connection, and what became of the connection."""
    key = side.tenant.api_key
    with connect(side.gateway.port, timeout=ANSWER_TIMEOUT) as sock:
        sock.sendall(case.build(key))
        reader = HeadKeepingReader(sock)
        first = _answer(reader)
        then = _then(sock, reader, _post("/v1/chat/completions", _chat_body(), _bearer(key)))
    return first, then


def _assert_alike(front_answer: Seen, aiohttp_answer: Seen) -> None:
    assert front_answer.status_line == aiohttp_answer.status_line
    assert set(front_answer.headers) == set(aiohttp_answer.headers), "the header names differ"
    assert front_answer.headers == aiohttp_answer.headers, "header values differ"
    assert front_answer.chunked == aiohttp_answer.chunked
    assert front_answer.body == aiohttp_answer.body


# -- the comparison ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_front_and_aiohttp_answer_alike(
    sides: tuple[Side, Side], front_spy: FrontSpy, case: Case
) -> None:
    with_front, without = sides
    front_answer, front_then = _exchange(with_front, case)
    aiohttp_answer, aiohttp_then = _exchange(without, case)

    # The two paths were taken: the front served every request of the front gateway, or handed it over.
    front_port, aiohttp_port = with_front.gateway.port, without.gateway.port
    assert aiohttp_port not in front_spy.served + front_spy.handed_over
    requests = 1 if front_then == _CLOSED else 2
    if case.on_front:
        assert (front_spy.served.count(front_port), front_spy.handed_over) == (requests, [])
    else:
        assert (front_spy.served, front_spy.handed_over) == ([], [front_port])

    assert front_answer.status_line.startswith(f"HTTP/1.1 {case.status} "), front_answer
    _assert_alike(front_answer, aiohttp_answer)
    assert (front_then == _CLOSED) == (aiohttp_then == _CLOSED), (front_then, aiohttp_then)
    if isinstance(front_then, Seen) and isinstance(aiohttp_then, Seen):
        assert front_then.status_line.startswith("HTTP/1.1 200 "), front_then
        _assert_alike(front_then, aiohttp_then)
    # A connection closes exactly when its answer says so.
    closes = front_answer.headers.get("connection", "").lower() == "close"
    assert closes == (front_then == _CLOSED), (front_answer.headers, front_then)
