"""The OpenAI-compatible presets' client (modelgate/proxy/upstream/dialects/presets.py) without a network:
each preset's request rewritten into what it accepts; its streams relayed as they came with usage lifted or
estimated and marked at `[DONE]`, split at every byte; its error answers in OpenAI's shape with "cannot
serve now" made a status the forwarder fails over on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from modelgate.config import load_config
from modelgate.config.dialects import PRESET_URLS
from modelgate.domain.errors import InvalidRequest
from modelgate.domain.usage import StreamUsageScanner
from modelgate.plugins import chain_plugins
from modelgate.proxy.upstream.dialects import dialect_upstream
from modelgate.proxy.upstream.dialects.base import LocalAnswer
from modelgate.proxy.upstream.dialects.presets import QUIRKS, PresetStream, PresetUpstream

TEMPLATE = """
[[providers]]
name = "p"
kind = "openai"

[[providers.hosts]]
name = "h"
preset = "{preset}"

[[models]]
name = "m"
kinds = ["chat"]
[[models.rows]]
provider = "p"

[[plans]]
code = "free"
"""
CHAT = "/v1/chat/completions"


@pytest.fixture
def upstream(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[PresetUpstream]:
    path = tmp_path / "preset.toml"
    path.write_text(TEMPLATE.format(preset=request.param), encoding="utf-8")
    config = load_config(path, env={}, chain=chain_plugins())
    client = dialect_upstream(config.provider("p").served_from("h"))
    assert isinstance(client, PresetUpstream)
    yield client
    asyncio.run(client.close())


def _prepared(upstream: PresetUpstream, payload: dict, path: str = CHAT) -> tuple[dict, object]:
    call = asyncio.run(upstream.prepare("POST", path, orjson.dumps(payload), {}))
    return orjson.loads(call.body), call


def test_every_preset_has_quirks() -> None:
    assert set(QUIRKS) == set(PRESET_URLS)


@pytest.mark.parametrize("upstream", ["groq"], indirect=True)
def test_groq_target_and_refused_fields_that_ask_for_nothing_are_dropped(upstream) -> None:
    sent, call = _prepared(
        upstream,
        {
            "model": "llama",
            "messages": [{"role": "user", "content": "hi", "name": "ann"}],
            "logprobs": False,
            "top_logprobs": 0,
            "logit_bias": {},
            "n": 1,
            "seed": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert call.target == "/openai/v1/chat/completions"
    assert call.stream and call.want_usage and call.model == "llama"
    assert sent == {
        "model": "llama",
        "messages": [{"role": "user", "content": "hi"}],
        "seed": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.parametrize("upstream", ["groq"], indirect=True)
@pytest.mark.parametrize(
    "field", [{"logprobs": True}, {"top_logprobs": 2}, {"logit_bias": {"1": 5}}, {"n": 2}]
)
def test_groq_refused_fields_that_ask_for_something_refuse_the_row(upstream, field) -> None:
    with pytest.raises(InvalidRequest, match=f"'{next(iter(field))}' is not supported by host"):
        _prepared(upstream, {"model": "llama", "messages": [], **field})


@pytest.mark.parametrize("upstream", ["mistral"], indirect=True)
def test_mistral_renames_drops_and_has_no_stream_options(upstream) -> None:
    sent, call = _prepared(
        upstream,
        {
            "model": "mistral-small",
            "messages": [{"role": "user", "content": "hi", "name": "ann"}],
            "seed": 7,
            "max_completion_tokens": 90,
            "max_tokens": 120,
            "user": "u",
            "store": False,
            "metadata": {"a": "b"},
            "service_tier": "auto",
            "n": 2,
            "parallel_tool_calls": False,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert call.target == "/v1/chat/completions" and call.want_usage  # asked, though not sent on
    assert sent == {
        "model": "mistral-small",
        "messages": [{"role": "user", "content": "hi", "name": "ann"}],
        "random_seed": 7,
        "max_tokens": 90,  # both caps given: the tighter
        "n": 2,
        "parallel_tool_calls": False,
        "stream": True,
    }


@pytest.mark.parametrize("upstream", ["ollama", "vllm", "deepseek"], indirect=True)
def test_presets_without_request_quirks_send_the_body_as_it_came(upstream) -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": 1, "n": 2}
    sent, call = _prepared(upstream, payload)
    assert sent == payload and call.target == "/v1/chat/completions"


@pytest.mark.parametrize("upstream", ["fireworks", "openrouter"], indirect=True)
def test_base_paths_of_their_own(upstream) -> None:
    _, call = _prepared(upstream, {"model": "m", "messages": []}, "/v1/completions")
    assert (
        call.target
        == {"fireworks": "/inference/v1", "openrouter": "/api/v1"}[upstream.preset] + "/completions"
    )


@pytest.mark.parametrize("upstream", ["groq"], indirect=True)
@pytest.mark.parametrize("body", [b"[1]", b"{not json"])
def test_a_body_that_is_not_an_object_is_a_clear_refusal(upstream, body) -> None:
    with pytest.raises(InvalidRequest):
        asyncio.run(upstream.prepare("POST", CHAT, body, {}))


# -- errors ----------------------------------------------------------------------------------------------


def _error(upstream: PresetUpstream, status: int, body: object) -> tuple[int, dict]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    answer = asyncio.run(upstream._error_answer(LocalAnswer(status, raw)))
    return answer.status, orjson.loads(asyncio.run(answer.read()))


@pytest.mark.parametrize("upstream", ["groq"], indirect=True)
def test_groq_498_is_a_503_and_402_a_429(upstream) -> None:
    status, body = _error(
        upstream, 498, {"error": {"message": "flex at capacity", "type": "capacity_exceeded"}}
    )
    assert status == 503 and body["error"]["code"] == "capacity_exceeded"
    assert "cannot serve now: flex at capacity" in body["error"]["message"]
    status, body = _error(upstream, 402, {"error": {"message": "pay up"}})
    assert status == 429 and body["error"]["code"] == "insufficient_quota"


@pytest.mark.parametrize("upstream", ["mistral"], indirect=True)
def test_mistral_and_vllm_error_shapes_become_openai_errors(upstream) -> None:
    detail = [
        {
            "type": "extra_forbidden",
            "loc": ["body", "stream_options"],
            "msg": "Extra inputs are not permitted",
        }
    ]
    status, body = _error(
        upstream, 422, {"object": "error", "message": {"detail": detail}, "type": "invalid_request_error"}
    )
    assert status == 422
    assert body == {
        "error": {
            "message": "stream_options: Extra inputs are not permitted",
            "type": "invalid_request_error",
        }
    }
    status, body = _error(
        upstream, 400, {"object": "error", "message": "bad n", "type": "BadRequestError", "code": 400}
    )
    assert (status, body["error"]["message"], body["error"]["type"]) == (400, "bad n", "BadRequestError")
    status, body = _error(upstream, 400, {"detail": "no such thing"})
    assert body["error"]["message"] == "no such thing"
    status, body = _error(upstream, 500, b"<html>oops</html>")
    assert status == 500 and body["error"]["message"] == "<html>oops</html>"


@pytest.mark.parametrize("upstream", ["openrouter"], indirect=True)
def test_openrouter_error_inside_a_200_answer(upstream) -> None:
    answer = upstream._ok_or_error(orjson.dumps({"error": {"code": 503, "message": "no provider"}}))
    assert answer.status == 503
    assert upstream._ok_or_error(b'{"choices": [], "id": "x"}').status == 200
    assert upstream._ok_or_error(b"<html>").status == 502


# -- streams ---------------------------------------------------------------------------------------------


def _chunk(delta: dict, finish: str | None = None, **extra: object) -> bytes:
    event = {"id": "c1", "object": "chat.completion.chunk", "created": 5, "model": "m"}
    event |= {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return b"data: " + orjson.dumps(event) + b"\n\n"


BODY = (
    _chunk({"role": "assistant", "content": ""})
    + _chunk({"content": "Hello there, friend"})
    + b": keep-alive\r\n\r\n"
)
X_GROQ = {
    "id": "req",
    "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13, "queue_time": 0.1},
}
USAGE_CHUNK = (
    b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
)


def _relay(data: bytes, splits: tuple[int, ...], holder: str | None = None, want: bool = True) -> bytes:
    stream = PresetStream(holder, want, 40, "chat.completion.chunk")
    out, last = b"", 0
    for split in (*splits, len(data)):
        out += stream.feed(data[last:split])
        last = split
    return out + stream.finish()


def _usage_events(data: bytes) -> list[dict]:
    events = [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: {")]
    return [e for e in events if e.get("usage")]


def test_a_stream_without_usage_gets_an_estimate_marked_before_done_at_every_split() -> None:
    source = BODY + _chunk({}, "stop") + b"data: [DONE]\n\n"
    whole = _relay(source, ())
    [usage] = _usage_events(whole)
    assert usage["choices"] == [] and usage["id"] == "c1" and usage["model"] == "m" and usage["created"] == 5
    assert usage["usage"] == {
        "prompt_tokens": 40,
        "completion_tokens": 5,
        "total_tokens": 45,
        "estimated": True,
    }
    assert whole.startswith(source[: -len(b"data: [DONE]\n\n")]) and whole.endswith(b"\n\ndata: [DONE]\n\n")
    for split in range(1, len(source)):
        assert _relay(source, (split,)) == whole
    scanner = StreamUsageScanner()
    scanner.feed(whole)
    assert (scanner.usage.input_tokens, scanner.usage.output_tokens) == (40, 5)


def test_groq_x_groq_usage_is_lifted_at_every_split() -> None:
    source = BODY + _chunk({}, "stop", x_groq=X_GROQ) + b"data: [DONE]\n\n"
    whole = _relay(source, (), holder="x_groq")
    [lifted] = _usage_events(whole)  # the finish chunk and its x_groq are relayed as they came
    assert lifted["usage"] == {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    for split in range(1, len(source)):
        assert _relay(source, (split,), holder="x_groq") == whole


@pytest.mark.parametrize(
    "source",
    [
        BODY + _chunk({}, "stop") + USAGE_CHUNK + b"data: [DONE]\n\n",  # OpenAI's usage chunk
        BODY + _chunk({}, "stop", usage={"prompt_tokens": 1, "completion_tokens": 1}) + b"data: [DONE]\n\n",
    ],
)
def test_a_stream_with_usage_is_relayed_byte_for_byte(source: bytes) -> None:
    assert _relay(source, (7, 100), holder="x_groq") == source


def test_no_usage_added_when_not_asked_or_when_the_stream_never_finished() -> None:
    finished = BODY + _chunk({}, "stop") + b"data: [DONE]\n\n"
    assert _relay(finished, (), want=False) == finished
    assert _relay(BODY + b'data: {"id": "c1", "cho', (30,)) == BODY + b'data: {"id": "c1", "cho'


def test_done_without_its_blank_line_still_gets_the_usage_first() -> None:
    out = _relay(BODY + b"data: [DONE]", ())
    assert _usage_events(out)[0]["usage"]["estimated"] is True and out.endswith(b"data: [DONE]")


def test_a_malformed_event_mentioning_usage_is_relayed_as_it_came() -> None:
    source = BODY + b'data: {"usage": {broken\n\n' + b"data: [DONE]\n\n"
    out = _relay(source, (11,))
    assert b'data: {"usage": {broken\n\n' in out
    assert b'"estimated":true' in out.split(b"broken", 1)[1]


@pytest.mark.parametrize("upstream", ["openrouter"], indirect=True)
def test_openrouter_stream_opening_with_an_error_is_that_error(upstream) -> None:
    error = b'data: {"id": "x", "error": {"code": 429, "message": "slow down"}}\n\n'
    assert upstream._stream_error(b": OPENROUTER PROCESSING\n\n" + error).status == 429
    assert upstream._stream_error(_chunk({"role": "assistant", "content": "error"})) is None
    assert upstream._stream_error(b": OPENROUTER PROCESSING\n\n") is None
