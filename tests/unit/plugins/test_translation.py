"""The translation plugin: answers of a row with another wire format reach the client in the route's
format, and answers in the route's own format name the client's model."""

from __future__ import annotations

import orjson
import pytest

from modelgate.domain.errors import UpstreamUnavailable
from modelgate.plugins.translation import Translation
from modelgate.proxy.pipeline.context import AnswerHead
from modelgate.proxy.translation import translator_for
from tests.support.plugin_context import CHAT, PluginServices, StoredKey, answer_head, context_before

MESSAGES = {"model": "gpt-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


async def test_a_whole_answer_of_the_routes_own_format_names_the_clients_model(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("translation", services, payload=CHAT, key=key.record)
    plugin = Translation()
    plugin.on_response_head(ctx, answer_head(ctx))

    answer = plugin.on_chunk(ctx, b'{"id":"c","model":"upstream-name","choices":[]}')

    assert orjson.loads(answer)["model"] == "gpt-test"


async def test_a_stream_of_the_routes_own_format_names_the_clients_model_line_by_line(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("translation", services, payload={**CHAT, "stream": True}, key=key.record)
    plugin = Translation()
    plugin.on_response_head(ctx, answer_head(ctx, content_type="text/event-stream", streamed=True))

    first = plugin.on_chunk(ctx, b'data: {"id":"c","model":"upstream-name","choi')
    second = plugin.on_chunk(ctx, b'ces":[]}\n\n')

    assert first == b""  # an incomplete line is held back
    assert second == b'data: {"id":"c","model":"gpt-test","choices":[]}\n\n'
    assert plugin.on_end(ctx, b"") == b""


async def test_a_whole_chat_answer_of_an_openai_row_becomes_a_messages_answer(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("translation", services, path="/v1/messages", payload=MESSAGES, key=key.record)
    translator = translator_for("messages", "openai", False)
    plugin = Translation()
    plugin.on_response_head(ctx, _head(ctx, translator))
    chat = {
        "id": "chatcmpl-1",
        "model": "upstream-name",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }

    answer = orjson.loads(plugin.on_chunk(ctx, orjson.dumps(chat)))

    assert (answer["type"], answer["model"], answer["content"][0]["text"]) == ("message", "gpt-test", "hello")


async def test_a_whole_answer_that_cannot_be_translated_is_502(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("translation", services, path="/v1/messages", payload=MESSAGES, key=key.record)
    ctx.row = ctx.rows[0]
    plugin = Translation()
    plugin.on_response_head(ctx, _head(ctx, translator_for("messages", "openai", False)))

    with pytest.raises(UpstreamUnavailable):
        plugin.on_chunk(ctx, b"not json at all")


async def test_a_stream_from_an_openai_row_ends_as_a_messages_stream_does(
    services: PluginServices, key: StoredKey
) -> None:
    payload = {**MESSAGES, "stream": True}
    ctx = await context_before("translation", services, path="/v1/messages", payload=payload, key=key.record)
    plugin = Translation()
    head = _head(ctx, translator_for("messages", "openai", False), streamed=True)
    plugin.on_response_head(ctx, head)

    opened = plugin.on_chunk(
        ctx, b'data: {"id":"c","model":"u","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    )
    ended = plugin.on_end(ctx, plugin.on_chunk(ctx, b"data: [DONE]\n\n"))

    assert b"event: message_start" in opened and b"hi" in opened
    assert ended.rstrip().endswith(b'"type":"message_stop"}')


def _head(ctx, translator, *, streamed: bool = False) -> AnswerHead:
    content_type = "text/event-stream" if streamed else "application/json"
    ctx.answer = AnswerHead(200, ctx.response_headers, {"content-type": content_type}, streamed, translator)
    return ctx.answer
