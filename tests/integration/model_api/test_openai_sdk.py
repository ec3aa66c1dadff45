"""The official openai SDK, sync and async, plain and streamed, works against the gateway as a base URL:
answers parse into the SDK's types and errors surface as the SDK's exception classes."""

from __future__ import annotations

import base64
import struct

import openai
import pytest
from openai.types import Completion, CreateEmbeddingResponse
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from tests.fakes import Fault
from tests.fakes.echo_model import embedding_vector

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
async def async_client(gateway, tenant):
    async with openai.AsyncOpenAI(
        base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0
    ) as client:
        yield client


# -- chat and completions ----------------------------------------------------------------------------


def test_chat_completion_parses_into_the_sdk_type(client) -> None:
    reply = client.chat.completions.create(model="gpt-test", messages=HELLO)
    assert isinstance(reply, ChatCompletion)
    assert reply.choices[0].message.content == "echo: hello there"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "gpt-test"
    assert reply.usage is not None and reply.usage.completion_tokens == 3


async def test_async_chat_completion(async_client) -> None:
    reply = await async_client.chat.completions.create(model="gpt-test", messages=HELLO)
    assert reply.choices[0].message.content == "echo: hello there"


async def test_async_streamed_chat_completion(async_client) -> None:
    stream = await async_client.chat.completions.create(
        model="gpt-test", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    pieces, usage = [], None
    async for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(pieces) == "echo: hello there"
    assert usage is not None and usage.completion_tokens == 3


def test_completion_parses_into_the_sdk_type(client) -> None:
    reply = client.completions.create(model="gpt-test", prompt="say this")
    assert isinstance(reply, Completion)
    assert reply.choices[0].text == "echo: say this"


async def test_async_streamed_completion(async_client) -> None:
    stream = await async_client.completions.create(model="gpt-test", prompt="say this", stream=True)
    assert "".join([chunk.choices[0].text async for chunk in stream if chunk.choices]) == "echo: say this"


# -- embeddings --------------------------------------------------------------------------------------


def test_embeddings_as_floats(client, alpha) -> None:
    reply = client.embeddings.create(model="embed-test", input=["first", "second"], encoding_format="float")
    assert isinstance(reply, CreateEmbeddingResponse)
    assert [d.embedding for d in reply.data] == [embedding_vector("first"), embedding_vector("second")]
    assert alpha.requests_to("/v1/embeddings")[0].json["encoding_format"] == "float"


def test_embeddings_as_base64(client) -> None:
    reply = client.embeddings.create(model="embed-test", input="first", encoding_format="base64")
    raw = base64.b64decode(reply.data[0].embedding)
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == embedding_vector("first")


def test_embeddings_with_the_sdk_default_encoding_decode_to_floats(client) -> None:
    reply = client.embeddings.create(model="embed-test", input="first")
    assert reply.data[0].embedding == embedding_vector("first")


async def test_async_embeddings(async_client) -> None:
    reply = await async_client.embeddings.create(model="embed-test", input="first", encoding_format="float")
    assert reply.data[0].embedding == embedding_vector("first")


# -- responses ---------------------------------------------------------------------------------------


def test_response_create_retrieve_delete(client) -> None:
    created = client.responses.create(model="gpt-test", input="hello there")
    assert isinstance(created, Response)
    assert created.output_text == "echo: hello there"
    retrieved = client.responses.retrieve(created.id)
    assert retrieved.id == created.id and retrieved.output_text == "echo: hello there"
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as raised:
        client.responses.retrieve(created.id)
    assert raised.value.type == "invalid_request_error"
    assert raised.value.body is not None and "code" not in raised.value.body


def test_response_stream(client) -> None:
    with client.responses.stream(model="gpt-test", input="one two three") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "echo: one two three"
    assert final.output_text == "echo: one two three"
    assert client.responses.retrieve(final.id).output_text == "echo: one two three"


def test_response_follow_up_with_previous_response_id(client) -> None:
    first = client.responses.create(model="gpt-test", input="hello there")
    second = client.responses.create(model="gpt-test", input="and more", previous_response_id=first.id)
    assert second.previous_response_id == first.id


async def test_async_response_create_retrieve_delete(async_client) -> None:
    created = await async_client.responses.create(model="gpt-test", input="hello there")
    assert (await async_client.responses.retrieve(created.id)).output_text == "echo: hello there"
    await async_client.responses.delete(created.id)


async def test_async_response_stream(async_client) -> None:
    stream = await async_client.responses.create(model="gpt-test", input="one two", stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


# -- errors as the SDK's exception classes ---------------------------------------------------------


def test_wrong_key_is_an_authentication_error(gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(model="gpt-test", messages=HELLO)
    assert raised.value.status_code == 401
    assert raised.value.type == "invalid_request_error"
    assert "code" not in raised.value.body


async def test_wrong_key_is_an_authentication_error_in_the_async_sdk(gateway) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{gateway.base_url}/v1", api_key="sk-wrong", max_retries=0
    ) as client:
        with pytest.raises(openai.AuthenticationError):
            await client.embeddings.create(model="embed-test", input="x")


def test_unknown_model_is_a_not_found_error_with_model_not_found(client) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="no-such-model", messages=HELLO)
    assert raised.value.status_code == 404
    assert (raised.value.type, raised.value.code) == ("invalid_request_error", "model_not_found")


def test_embeddings_on_a_chat_model_is_model_not_found(client) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.embeddings.create(model="gpt-test", input="x")
    assert raised.value.code == "model_not_found"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.moderations.create(input="x"), id="moderations"),
        pytest.param(lambda c: c.files.list(), id="files"),
        pytest.param(lambda c: c.batches.list(), id="batches"),
        pytest.param(lambda c: c.fine_tuning.jobs.list(), id="fine-tuning"),
        pytest.param(lambda c: c.vector_stores.list(), id="vector-stores"),
    ],
)
def test_unsupported_route_is_a_not_found_error_without_code(client, call) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        call(client)
    assert raised.value.body == {"message": "route not supported", "type": "invalid_request_error"}
    assert raised.value.code is None


def test_invalid_provider_object_is_a_bad_request_error(client) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="gpt-test", messages=HELLO, extra_body={"provider": {"only": 1}})
    assert raised.value.status_code == 400
    assert raised.value.type == "invalid_request_error"
    assert "code" not in raised.value.body


def test_upstream_400_is_a_bad_request_error_with_the_upstream_message(client, alpha) -> None:
    alpha.add_fault("/v1/chat/completions", Fault(status=400))
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="gpt-test", messages=HELLO)
    assert raised.value.body["message"] == "fake upstream 'alpha': injected HTTP 400"


def test_every_row_failing_is_an_internal_server_error_502(client, alpha, beta) -> None:
    alpha.add_fault("/v1/chat/completions", Fault(status=500))
    beta.add_fault("/v1/chat/completions", Fault(status=500))
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="gpt-test", messages=HELLO)
    assert raised.value.status_code == 502
    assert (raised.value.type, raised.value.code) == ("server_error", "upstream_unavailable")


def test_every_row_cooling_down_is_an_internal_server_error_503(client, alpha, beta) -> None:
    alpha.add_fault("/v1/chat/completions", Fault(status=500), times=-1)
    beta.add_fault("/v1/chat/completions", Fault(status=500), times=-1)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="gpt-test", messages=HELLO)
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="gpt-test", messages=HELLO)
    assert raised.value.status_code == 503
    assert (raised.value.type, raised.value.code) == ("server_error", "upstream_unavailable")


def test_oversized_body_is_an_api_status_error_413(client) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        client.embeddings.create(model="embed-test", input="x" * (4 * 1024 * 1024))
    assert raised.value.status_code == 413
    assert (raised.value.type, raised.value.code) == ("invalid_request_error", "request_too_large")
